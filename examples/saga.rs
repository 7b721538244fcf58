//! A saga end to end, with no services: orders go through payment,
//! inventory and shipping, orchestrated by the `order-fulfilment` saga on
//! the in-memory broker with SQLite as the store. One order is paid and
//! shipped; one times out waiting for its payment; one fails at inventory
//! and is refunded (compensation); one has a refund that fails for good
//! (`compensation_failed`, dead-lettered to the store's table). It prints
//! each saga's history. The saga and its participants are in
//! `saga_shop/`, which the conformance suite runs on Kafka, RabbitMQ and
//! SQS too (`tests/suite/sagas.rs`, `the_saga_shop_...`).
//!
//! ```sh
//! cargo run --example saga
//! ```

#[path = "saga_shop/mod.rs"]
mod saga_shop;

use std::time::Instant;

use consumer::saga::SagaStore;
use consumer::{MemoryBroker, Message, Service, SqliteStore, SqliteTx};
use saga_shop::{Destinations, Sources};

saga_shop::participant_handlers!(SqliteTx, SqliteStore);

/// The shop's service on `broker`, its saga's state and the participants'
/// rows in `pool`: the saga, its three participants, the outbox relay and
/// the saga monitor.
pub fn shop_service(pool: sqlx::SqlitePool, broker: &MemoryBroker) -> anyhow::Result<Service> {
    let to = Destinations::plain();
    let sources = Sources {
        orders: broker.source(&to.orders),
        payments: broker.source(&to.payments),
        inventory: broker.source(&to.inventory),
        shipping: broker.source(&to.shipping),
    };
    let (service, _stats) = saga_shop::service(
        pool.clone(),
        SqliteStore::new(pool),
        broker.clone(),
        sources,
        participants()?,
        to,
    )?;
    Ok(service)
}

/// Runs the four orders to their end and returns the report.
pub async fn run() -> anyhow::Result<String> {
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect("sqlite::memory:")
        .await?;
    SqliteStore::new(pool.clone())
        .with_extension(consumer::saga::SagaTables)
        .migrate()
        .await?;
    let broker = MemoryBroker::new(4);
    let to = Destinations::plain();
    let service = shop_service(pool.clone(), &broker)?;
    for order in saga_shop::orders("") {
        let message = Message::json("OrderPlaced", &order)?.with_key(order.order_id.clone());
        broker.publish(&to.orders, message).await?;
    }
    let sagas = SagaStore::new(pool.clone());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(service.run_until(async move {
        let _ = stopped.await;
    }));
    let records = saga_shop::wait_finished(&sagas, "").await?;
    let _ = stop.send(());
    running.await??;
    let letters: i64 = sqlx::query_scalar("SELECT count(*) FROM consumer_dead_letters")
        .fetch_one(&pool)
        .await?;
    let mut out = String::from("saga: four orders through payment, inventory and shipping\n\n");
    out.push_str(&saga_shop::report(&records));
    out.push_str(&format!("\ndead letters in the store's table: {letters}\n"));
    Ok(out)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let started = Instant::now();
    print!("{}", run().await?);
    println!("\nfinished in {:.1?}", started.elapsed());
    Ok(())
}
