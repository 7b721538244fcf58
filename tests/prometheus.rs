//! What a Prometheus server scrapes from the service host: `GET /metrics`
//! on the health endpoint, for a service with a router and an outbox
//! relay (no services: the in-memory broker, in-memory SQLite).
//!
//! The exposition must pass `promtool check metrics` with no finding
//! (promtool comes from Debian's `prometheus` package: `scripts/tools
//! promtool` installs it and `scripts/test` exports `PROMTOOL`).

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::{Command, Stdio};

use consumer::{
    Consumer, MemoryBroker, MemoryStore, MemoryTx, Message, NewEvent, Outbox, OutboxRelay, Router,
    Service, SqliteStore, handler, service::PrometheusMetrics,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

#[derive(serde::Deserialize)]
struct Placed {
    #[allow(dead_code)]
    id: String,
}

#[handler(event_type = "OrderPlaced")]
async fn placed(_order: Placed, _tx: &mut MemoryTx) -> Result<(), std::convert::Infallible> {
    Ok(())
}

async fn get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect to the health endpoint");
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut out = String::new();
    stream.read_to_string(&mut out).await.expect("read");
    let (head, body) = out.split_once("\r\n\r\n").expect("an HTTP response");
    (head.to_owned(), body.to_owned())
}

fn promtool() -> String {
    if let Ok(path) = std::env::var("PROMTOOL") {
        return path;
    }
    match Command::new("promtool").arg("--version").output() {
        Ok(o) if o.status.success() => "promtool".to_owned(),
        _ => panic!(
            "promtool is needed to lint the exposition: run `scripts/tools promtool` (scripts/test does) and set PROMTOOL to the path it prints"
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_serves_metrics_that_promtool_finds_nothing_wrong_with() {
    let metrics = PrometheusMetrics::new("orders-service").expect("exporter");
    let broker = MemoryBroker::new(2);
    for i in 0..3 {
        let m = Message::json("OrderPlaced", &serde_json::json!({ "id": format!("o{i}") }))
            .expect("json")
            .with_key(format!("k{i}"));
        broker.publish("orders", m).await.expect("publish");
    }
    broker
        .publish(
            "orders",
            Message::raw(&b"{not json"[..])
                .with_header(consumer::envelope::names::TYPE, "OrderPlaced"),
        )
        .await
        .expect("publish");
    let router = Router::builder("orders")
        .route(placed)
        .build()
        .expect("router");
    let consumer = Consumer::router(broker.source("orders"), MemoryStore::new(), router)
        .with_meter(metrics.meter());
    let stats = consumer.stats();

    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect("sqlite::memory:")
        .await
        .expect("in-memory SQLite");
    SqliteStore::new(pool.clone())
        .migrate()
        .await
        .expect("migrations");
    let outbox = Outbox::new().with_default_destination("events");
    let mut tx = pool.begin().await.expect("begin");
    let event =
        NewEvent::new("Order", "o1", "OrderShipped", &serde_json::json!({})).expect("event");
    outbox.enqueue(&mut tx, event).await.expect("enqueue");
    tx.commit().await.expect("commit");
    let relay = OutboxRelay::new(pool, outbox, broker.clone()).with_meter(metrics.meter());
    // Published (and counted) before the scrape, whatever the service's
    // relay gets to.
    assert_eq!(relay.run_once().await.expect("relay round"), 1);
    relay.read_backlog().await.expect("backlog");

    let service = Service::new("orders-service")
        .consumer("orders", consumer)
        .relay("outbox", relay)
        .with_health_endpoint("127.0.0.1:0".parse().expect("addr"))
        .expect("endpoint")
        .with_metrics(metrics);
    let addr = service.health_endpoint().expect("bound");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(service.run_until(async move {
        let _ = stopped.await;
    }));
    tokio::time::timeout(
        std::time::Duration::from_secs(60),
        stats.wait_for(|s| s.processed == 3 && s.dead_poison == 1 && s.in_flight == 0),
    )
    .await
    .expect("the consumer settled everything");

    let (head, body) = get(addr, "/metrics").await;
    let _ = stop.send(());
    running.await.expect("join").expect("service");

    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    for name in [
        "messaging_process_duration_seconds_bucket",
        "messaging_client_consumed_messages_total",
        "messaging_client_operation_duration_seconds_bucket",
        "consumer_delivery_duration_seconds_bucket",
        "consumer_dead_letters_total",
        "consumer_lag",
        "consumer_outbox_pending",
        "messaging_client_sent_messages_total",
        "target_info",
    ] {
        assert!(body.contains(name), "{name} is scraped:\n{body}");
    }
    assert!(
        body.contains(r#"consumer_dead_letter_reason="poison""#),
        "labels are the attributes with underscores:\n{body}"
    );
    assert!(body.contains(r#"service_name="orders-service""#), "{body}");

    let mut lint = Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    lint.stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("write the scrape to promtool");
    let out = lint.wait_with_output().expect("promtool ends");
    let findings = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && findings.trim().is_empty(),
        "promtool check metrics found:\n{findings}\nin:\n{body}"
    );
}
