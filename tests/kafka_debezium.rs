//! The outbox's log-based CDC option, run for real: PostgreSQL with
//! `wal_level=logical` (`DATABASE_URL`), Kafka Connect with Debezium's
//! PostgreSQL connector and its outbox event router (`KAFKA_CONNECT_URL`,
//! default http://127.0.0.1:8083; `scripts/services kafka-connect` starts
//! it), and Apache Kafka (`KAFKA_BROKERS`, default 127.0.0.1:9092).
//!
//! An event committed through `Outbox::enqueue` must reach the topic its
//! row names, keyed by its aggregate id, in its aggregate's order, with the
//! CloudEvents attributes and the writer's trace context readable by this
//! framework's own Kafka consumer: the connector configuration below is the
//! one the outbox guide documents.

mod conformance;

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::sync::Mutex;
use std::time::Duration;

use conformance::kafka::{check_external, external_brokers};
use conformance::support;
use consumer::kafka::{KafkaSource, Topics};
use consumer::{Consumer, MemoryStore, MessageContext, NewEvent, Outbox, handler};
use opentelemetry::trace::TraceContextExt;

fn connect_url() -> String {
    std::env::var("KAFKA_CONNECT_URL").unwrap_or_else(|_| "http://127.0.0.1:8083".to_owned())
}

/// One HTTP/1.1 exchange with the Connect worker's REST API; returns the
/// status code and the body.
fn http(method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let url = connect_url();
    let hostport = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let mut stream = std::net::TcpStream::connect(&hostport).unwrap_or_else(|e| {
        panic!("Kafka Connect does not answer at {url} ({e}): run `scripts/services kafka-connect` (it starts a Connect worker with Debezium's PostgreSQL connector) or set KAFKA_CONNECT_URL")
    });
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("read timeout");
    let body = body.unwrap_or("");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("send request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read response");
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response from {url}: {response:.200}"));
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// The connector the outbox guide documents, on one schema's table.
fn connector_config(name: &str, schema: &str, database_url: &str) -> serde_json::Value {
    let url = url_parts(database_url);
    serde_json::json!({
        "name": name,
        "config": {
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "plugin.name": "pgoutput",
            "database.hostname": url.host,
            "database.port": url.port,
            "database.user": url.user,
            "database.password": url.password,
            "database.dbname": url.database,
            "topic.prefix": name,
            "slot.name": name,
            "slot.drop.on.stop": "true",
            "publication.name": name,
            "publication.autocreate.mode": "filtered",
            "snapshot.mode": "no_data",
            "table.include.list": format!("{schema}.outbox_events"),
            "tombstones.on.delete": "false",
            "transforms": "outbox,ce_source,ce_specversion,content_type",
            "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
            "transforms.outbox.table.field.event.id": "id",
            "transforms.outbox.table.field.event.key": "aggregate_id",
            "transforms.outbox.table.field.event.payload": "payload",
            "transforms.outbox.table.expand.json.payload": "true",
            "transforms.outbox.route.by.field": "destination",
            "transforms.outbox.route.topic.replacement": "${routedByValue}",
            "transforms.outbox.table.fields.additional.placement":
                "id:header:ce_id,event_type:header:ce_type,aggregate_id:header:ce_subject,trace_metadata:header:trace_metadata",
            "transforms.ce_source.type": "org.apache.kafka.connect.transforms.InsertHeader",
            "transforms.ce_source.header": "ce_source",
            "transforms.ce_source.value.literal": "/outbox",
            "transforms.ce_specversion.type": "org.apache.kafka.connect.transforms.InsertHeader",
            "transforms.ce_specversion.header": "ce_specversion",
            "transforms.ce_specversion.value.literal": "1.0",
            "transforms.content_type.type": "org.apache.kafka.connect.transforms.InsertHeader",
            "transforms.content_type.header": "content-type",
            "transforms.content_type.value.literal": "application/json",
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable": "false"
        }
    })
}

struct UrlParts {
    host: String,
    port: String,
    user: String,
    password: String,
    database: String,
}

/// postgres://user[:password]@host[:port]/db
fn url_parts(url: &str) -> UrlParts {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let (userinfo, rest) = rest.split_once('@').unwrap_or(("postgres", rest));
    let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
    let (hostport, database) = rest.split_once('/').unwrap_or((rest, "test"));
    let database = database.split('?').next().unwrap_or(database);
    let (host, port) = hostport.rsplit_once(':').unwrap_or((hostport, "5432"));
    UrlParts {
        host: host.to_owned(),
        port: port.to_owned(),
        user: user.to_owned(),
        password: password.to_owned(),
        database: database.to_owned(),
    }
}

/// Removes the connector (and with it its replication slot) when the test
/// ends, passed or not.
struct Connector(String);

impl Drop for Connector {
    fn drop(&mut self) {
        let _ = http("DELETE", &format!("/connectors/{}", self.0), None);
    }
}

/// Waits until the connector and its task run; fails with the worker's
/// trace when either failed.
fn await_running(name: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (code, body) = http("GET", &format!("/connectors/{name}/status"), None);
        if code == 200 {
            let status: serde_json::Value = serde_json::from_str(&body).expect("status JSON");
            let connector = status["connector"]["state"].as_str().unwrap_or("");
            let task = status["tasks"][0]["state"].as_str().unwrap_or("");
            assert!(
                connector != "FAILED" && task != "FAILED",
                "the Debezium connector failed: {body}"
            );
            if connector == "RUNNING" && task == "RUNNING" {
                return;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the Debezium connector {name} is not running after 60 s: {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What the handler saw of one delivery.
#[derive(Debug, Clone)]
struct Seen {
    key: Option<String>,
    kind: Option<String>,
    subject: Option<String>,
    source: Option<String>,
    trace_id: String,
    n: u64,
}

#[derive(serde::Deserialize)]
struct OrderPlaced {
    order: String,
    n: u64,
}

static SEEN: Mutex<Vec<(String, Seen)>> = Mutex::new(Vec::new());

#[handler]
async fn record(order: OrderPlaced, ctx: &MessageContext) -> Result<(), std::convert::Infallible> {
    let e = ctx.envelope();
    let seen = Seen {
        key: e.key.clone(),
        kind: e.kind.clone(),
        subject: e.subject.clone(),
        source: e.source.clone(),
        trace_id: ctx
            .trace_context()
            .span()
            .span_context()
            .trace_id()
            .to_string(),
        n: order.n,
    };
    assert_eq!(seen.key.as_deref(), Some(order.order.as_str()));
    SEEN.lock()
        .expect("seen")
        .push((ctx.message_id().to_owned(), seen));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_enqueued_in_the_outbox_reaches_kafka_through_debezium_keyed_routed_and_traced() {
    consumer::testing::in_memory_spans();
    let brokers = external_brokers();
    check_external(&brokers);
    let database_url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let fresh = consumer::testing::FreshSchema::create("ct", 4)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let pool = fresh.pool.clone();
    let level: String = sqlx::query_scalar("SHOW wal_level")
        .fetch_one(&pool)
        .await
        .expect("wal_level");
    assert_eq!(
        level, "logical",
        "PostgreSQL must run with wal_level=logical for Debezium: `scripts/services kafka-connect` configures a local cluster so"
    );

    let topic = format!("ct.cdc.{}", uuid::Uuid::now_v7().simple());
    let topics = Topics::new(&topic).expect("topic").without_retry_topic();
    topics.create(&brokers, 3, 1).await.expect("create topic");

    let name = format!("ct_{}", uuid::Uuid::new_v4().simple());
    let (code, body) = http(
        "POST",
        "/connectors",
        Some(&connector_config(&name, &fresh.schema, &database_url).to_string()),
    );
    assert!(
        code == 201 || code == 200,
        "Kafka Connect refused the connector ({code}): {body}"
    );
    let _connector = Connector(name.clone());
    tokio::task::spawn_blocking({
        let name = name.clone();
        move || await_running(&name)
    })
    .await
    .expect("status");

    // Two aggregates, three events each, each in its own transaction under
    // a span of its own.
    let outbox = Outbox::new().with_default_destination(&topic);
    let mut trace_of = HashMap::new();
    for n in 1..=3u64 {
        for order in ["o-1", "o-2"] {
            let span = tracing::info_span!("place order");
            let _in = span.enter();
            let mut tx = pool.begin().await.expect("begin");
            let event = NewEvent::new(
                "Order",
                order,
                "OrderPlaced",
                &serde_json::json!({ "order": order, "n": n }),
            )
            .expect("json");
            let id = outbox.enqueue(&mut tx, event).await.expect("enqueue");
            tx.commit().await.expect("commit");
            trace_of.insert(id.to_string(), consumer::testing::trace_id_of(&span));
        }
    }

    // This framework's own consumer reads what Debezium wrote.
    let source = KafkaSource::builder(&brokers, format!("g-{topic}"), topics)
        .connect()
        .await
        .expect("source");
    let consumer = Consumer::new(source, MemoryStore::new(), record);
    let stats = consumer.stats();
    let mine = |seen: &[(String, Seen)]| -> Vec<(String, Seen)> {
        seen.iter()
            .filter(|(id, _)| trace_of.contains_key(id))
            .cloned()
            .collect()
    };
    let done = async {
        while mine(&SEEN.lock().expect("seen")).len() < 6 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    support::within(consumer.run_until(done))
        .await
        .expect("consumer");

    let seen = mine(&SEEN.lock().expect("seen"));
    let stats = stats.snapshot();
    assert_eq!(
        stats.dead_poison + stats.dead_terminal + stats.dead_exhausted,
        0,
        "{stats:?}"
    );
    let mut per_order: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (id, s) in &seen {
        let order = s.key.clone().expect("the record key is the aggregate id");
        assert_eq!(s.kind.as_deref(), Some("OrderPlaced"), "ce_type of {id}");
        assert_eq!(
            s.subject.as_deref(),
            Some(order.as_str()),
            "ce_subject of {id}"
        );
        assert_eq!(s.source.as_deref(), Some("/outbox"), "ce_source of {id}");
        assert_eq!(
            s.trace_id, trace_of[id],
            "the handler continues the trace of the transaction that enqueued {id} (from trace_metadata)"
        );
        per_order.entry(order).or_default().push(s.n);
    }
    assert_eq!(
        per_order,
        BTreeMap::from([
            ("o-1".to_owned(), vec![1, 2, 3]),
            ("o-2".to_owned(), vec![1, 2, 3]),
        ]),
        "each aggregate's events, once each and in order"
    );
}
