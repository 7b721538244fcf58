//! `consumer sagas list | show | resume | abandon` on a real PostgreSQL
//! store (`DATABASE_URL`), with sagas made by a real consumer.

mod support;

use std::time::Duration;

use consumer::saga::{NotFound, SagaBuilder, SagaStatus, SagaStore, Step, Undo};
use consumer::{Consumer, MemoryBroker, Message, Outbox, PgStore, Saga};
use serde::{Deserialize, Serialize};
use support::{World, both, stdout};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Ev {
    id: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Order {
    opened: bool,
}

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

struct Orders;

impl Saga for Orders {
    type State = Order;
    type Error = Never;
    fn name(&self) -> &'static str {
        "order"
    }
}

fn open(_: &Orders, o: &mut Order, e: Ev, step: &mut Step<'_>) -> Result<(), Never> {
    o.opened = true;
    step.record_undo(Undo::new("payment", "payments", "RefundPayment", &e));
    step.schedule_timeout("Expire", &e, Duration::from_secs(3600));
    Ok(())
}

fn cancel(_: &Orders, _: &mut Order, _: Ev, step: &mut Step<'_>) -> Result<(), Never> {
    step.compensate("cancelled by the customer");
    Ok(())
}

fn refund_failed(_: &Orders, _: &mut Order, _: Ev, step: &mut Step<'_>) -> Result<(), Never> {
    step.undo_failed("the card was closed");
    Ok(())
}

fn expire(_: &Orders, _: &mut Order, _: Ev, step: &mut Step<'_>) -> Result<(), Never> {
    step.fail("expired");
    Ok(())
}

/// `o-1` running, waiting for its timeout; `o-2` in `compensation_failed`.
async fn make_sagas(pool: &sqlx::PgPool) {
    PgStore::new(pool.clone())
        .with_extension(consumer::saga::SagaTables)
        .migrate()
        .await
        .expect("the saga table");
    let id = |e: &Ev| e.id.clone();
    let saga = SagaBuilder::new(Orders, Outbox::new())
        .on("Open", id, NotFound::Start, open)
        .on("Cancel", id, NotFound::Ignore, cancel)
        .on_compensating("RefundFailed", id, NotFound::Ignore, refund_failed)
        .on_timeout("Expire", expire)
        .build()
        .expect("saga");
    let broker = MemoryBroker::new(2);
    for (kind, id) in [
        ("Open", "o-1"),
        ("Open", "o-2"),
        ("Cancel", "o-2"),
        ("RefundFailed", "o-2"),
    ] {
        let m = Message::json(kind, &Ev { id: id.into() })
            .expect("json")
            .with_key(id);
        broker.publish("orders", m).await.expect("publish");
    }
    let consumer = Consumer::new(broker.source("orders"), PgStore::new(pool.clone()), saga);
    let drained = broker.clone();
    tokio::time::timeout(
        Duration::from_secs(60),
        consumer.run_until(async move { drained.wait_drained("orders").await }),
    )
    .await
    .expect("drained within 60 s")
    .expect("consumer");
}

fn json_lines(out: &std::process::Output) -> Vec<serde_json::Value> {
    stdout(out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sagas_are_listed_shown_resumed_and_abandoned_by_hand() {
    let w = World::new("sagas").await;
    let pool = w.schema.pool.clone();
    make_sagas(&pool).await;

    let all = w.run(&["sagas", "list", "--json"]).await;
    assert_eq!(all.status.code(), Some(0), "{}", both(&all));
    let lines = json_lines(&all);
    assert_eq!(lines.len(), 2, "{}", both(&all));
    let failed = w
        .run(&["sagas", "list", "--status", "compensation_failed"])
        .await;
    assert!(
        stdout(&failed).contains("o-2") && !stdout(&failed).contains("o-1"),
        "{}",
        both(&failed)
    );
    let active = json_lines(&w.run(&["sagas", "list", "--active", "--json"]).await);
    assert_eq!(active.len(), 1);
    assert_eq!(
        (active[0]["saga_id"].as_str(), active[0]["status"].as_str()),
        (Some("o-1"), Some("running"))
    );
    let old = json_lines(
        &w.run(&["sagas", "list", "--older-than", "1h", "--json"])
            .await,
    );
    assert!(old.is_empty(), "nothing started an hour ago");

    let show = w.run(&["sagas", "show", "order", "o-2", "--json"]).await;
    assert_eq!(show.status.code(), Some(0), "{}", both(&show));
    let o2: serde_json::Value = serde_json::from_str(stdout(&show).trim()).expect("json");
    assert_eq!(o2["status"], "compensation_failed");
    assert_eq!(o2["compensation"][0]["status"], "failed");
    assert_eq!(o2["compensation"][0]["error"], "the card was closed");
    assert_eq!(o2["history"].as_array().map(Vec::len), Some(3));
    let text = w.run(&["sagas", "show", "order", "o-1"]).await;
    for part in [
        "pending timeouts: 1",
        "Expire",
        "compensation log: 1 step(s)",
        "RefundPayment",
        "history: 1 transition(s)",
    ] {
        assert!(stdout(&text).contains(part), "{part}: {}", both(&text));
    }
    let missing = w.run(&["sagas", "show", "order", "o-9"]).await;
    assert_eq!(missing.status.code(), Some(6), "{}", both(&missing));

    // A running saga's compensation cannot resume; a failed one's can: its
    // refund goes again, with another id.
    let refused = w.run(&["sagas", "resume", "order", "o-1"]).await;
    assert_eq!(refused.status.code(), Some(7), "{}", both(&refused));
    let resumed = w.run(&["sagas", "resume", "order", "o-2"]).await;
    assert_eq!(resumed.status.code(), Some(0), "{}", both(&resumed));
    assert!(
        stdout(&resumed).contains("compensating"),
        "{}",
        both(&resumed)
    );
    let refunds: Vec<String> = sqlx::query_scalar(
        "SELECT id::text FROM outbox_events WHERE event_type = 'RefundPayment' AND aggregate_id = 'o-2' ORDER BY version",
    )
    .fetch_all(&pool)
    .await
    .expect("refunds");
    assert_eq!(refunds.len(), 2, "the first refund and its resend");
    assert_ne!(refunds[0], refunds[1], "a new round, a new id");

    // Abandoned: its timeout is cancelled, and a second abandon is refused.
    let abandoned = w
        .run(&[
            "sagas",
            "abandon",
            "order",
            "o-1",
            "--reason",
            "the customer called",
        ])
        .await;
    assert_eq!(abandoned.status.code(), Some(0), "{}", both(&abandoned));
    let sagas = SagaStore::new(pool.clone());
    let o1 = sagas.get("order", "o-1").await.expect("read").expect("o-1");
    assert_eq!(o1.status, SagaStatus::Abandoned);
    assert!(o1.timeouts.is_empty());
    let scheduled: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM outbox_events_scheduled WHERE aggregate_id = 'o-1'",
    )
    .fetch_one(&pool)
    .await
    .expect("count");
    assert_eq!(scheduled, 0, "its timeout was cancelled");
    let again = w
        .run(&["sagas", "abandon", "order", "o-1", "--reason", "twice"])
        .await;
    assert_eq!(again.status.code(), Some(7), "{}", both(&again));
    w.close().await;
}
