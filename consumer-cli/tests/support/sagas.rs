//! Sagas made by a real consumer: `o-1` running, waiting for its timeout;
//! `o-2` in `compensation_failed` (its refund failed).

use std::time::Duration;

use consumer::saga::{NotFound, SagaBuilder, Step, Undo};
use consumer::{Consumer, MemoryBroker, Message, Outbox, PgStore, Saga};
use serde::{Deserialize, Serialize};

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
pub async fn make_sagas(pool: &sqlx::PgPool) {
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
