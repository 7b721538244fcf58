//! The embedded quickstart, a small service with no services needed: an
//! order aggregate whose events go through the outbox to one topic of the
//! in-memory broker, handled there by three handlers behind one router, in
//! order per order, with SQLite as the store.
//!
//! What happens on the way: the relay's publisher sends one event twice (as
//! after a lost confirm), a legacy producer sends a payload that is not
//! JSON and an event type no handler takes, one payment needs two retries,
//! one payment gateway never answers, and one amount is invalid. The shop
//! itself (events, what the handlers do, the report) is in `shop/`, which
//! the Kafka and RabbitMQ examples run too.
//!
//! ```sh
//! cargo run --example quickstart
//! ```

#[path = "shop/mod.rs"]
pub(crate) mod shop;

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use consumer::testing::{Faults, FaultyPublisher};
use consumer::{MemoryBroker, Outbox, OutboxRelay, Publisher, SqliteStore, SqliteTx};
use shop::Shop;

/// Every event of an order goes to one topic, keyed by the order.
pub static OUTBOX: LazyLock<Outbox> = LazyLock::new(|| shop::outbox("order-events"));

shop::shop_handlers!(SqliteTx, SqliteStore);

/// The service `main` runs (and `tests/asyncapi.rs` documents): the
/// outbox relay publishing through `publisher`, and the router over the
/// topic `order-events` of `broker`.
pub fn shop_service<P: Publisher>(
    pool: sqlx::SqlitePool,
    store: SqliteStore,
    broker: &MemoryBroker,
    publisher: P,
) -> anyhow::Result<Shop> {
    let relay = OutboxRelay::new(pool, OUTBOX.clone(), publisher).with_source("quickstart");
    Ok(shop::service(
        relay,
        broker.source("order-events"),
        store,
        orders_router()?,
    ))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let started = Instant::now();
    let report = run().await?;
    // `tests/quickstart_readme.rs` compares this with the README's copy,
    // all but the timing.
    println!(
        "{report}\nfinished in {:.2?}",
        started.elapsed().max(Duration::from_millis(1))
    );
    Ok(())
}

/// Runs the shop once, start to finish, and returns its report.
pub async fn run() -> anyhow::Result<String> {
    let run = "quickstart";
    // One connection: an in-memory SQLite database lives in its connection.
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect("sqlite::memory:")
        .await?;
    let store = SqliteStore::new(pool.clone());
    store.migrate().await?;
    sqlx::query(shop::HISTORY_DDL).execute(&pool).await?;
    shop::place_orders(&pool, &OUTBOX, run).await?;

    let broker = MemoryBroker::new(4);
    for message in shop::legacy_messages(run)? {
        broker.publish("order-events", message).await?;
    }
    // The relay's publisher sends its first event twice, as after a lost
    // confirm: the consumer must not run it twice.
    let faults = Faults::new();
    faults.duplicate_next_publishes(1);
    let Shop {
        service,
        relay_stats,
        stats,
    } = shop_service(
        pool.clone(),
        store,
        &broker,
        FaultyPublisher::new(broker.clone(), faults),
    )?;

    // Done when the outbox is empty and the topic has nothing left.
    let done = {
        let (pool, broker) = (pool.clone(), broker.clone());
        async move {
            while OUTBOX.pending(&pool).await.unwrap_or(1) > 0 || broker.depth("order-events") > 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    service.run_until(done).await?;

    Ok(shop::report(
        "quickstart: the `shop` service: outbox relay -> topic `order-events` -> router `orders`\n\
         (reserve_stock, capture_payment, notify_customer), in-memory broker, SQLite",
        relay_stats.snapshot().published,
        &stats.snapshot(),
        &shop::history(&pool, run).await?,
        &broker.dead_letter_records("order-events"),
    ))
}
