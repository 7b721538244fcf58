//! The outbox end to end, with no services: a handler writes business state
//! and an outbox event in one transaction; the relay publishes the event to
//! the in-memory broker; a second handler consumes it. The three run as one
//! `Service`, whose AsyncAPI document is `examples/asyncapi/outbox_orders.json`.
//!
//! ```sh
//! cargo run --example outbox_orders
//! ```
//!
//! Its handlers are tested with the test kit in `tests/outbox_orders.rs`.

#[path = "shop/mod.rs"]
mod shop;

use std::sync::LazyLock;
use std::time::Duration;

use consumer::{
    Consumer, MemoryBroker, Message, MessageContext, NewEvent, Outbox, OutboxRelay, Service,
    SqliteStore, SqliteTx, handler,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
// The shop's event, the one every example writes and reads (`pub(crate)`
// for the kit's test: exported, it would need doc comments, which would
// become its schema's description in every example's documents).
pub(crate) use shop::OrderPlaced;

/// Where `place_order` writes its events.
pub static OUTBOX: LazyLock<Outbox> = LazyLock::new(|| {
    Outbox::new()
        .with_default_destination("order-events")
        .with_event::<OrderPlaced>("OrderPlaced")
});

// The command carries no doc comments: schemars would make them its
// schema's description, and the AsyncAPI document and the contract
// snapshots would change with it. It is `pub` for the kit's test.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[allow(missing_docs)]
pub struct PlaceOrder {
    pub order_id: String,
    pub customer: String,
    pub cents: i64,
}

/// What the handlers fail with: all of it transient.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// A query failed.
    #[error("database error")]
    Db(#[from] sqlx::Error),
    /// The outbox write failed.
    #[error("outbox error")]
    Outbox(#[from] consumer::Error),
}

/// Command handler: the order row and its event commit together, or not at all.
#[handler(idempotency_key = cmd.order_id)]
pub async fn place_order(cmd: PlaceOrder, tx: &mut SqliteTx) -> Result<(), AppError> {
    sqlx::query("INSERT INTO orders (order_id, customer, cents) VALUES ($1, $2, $3)")
        .bind(&cmd.order_id)
        .bind(&cmd.customer)
        .bind(cmd.cents)
        .execute(&mut **tx)
        .await?;
    let event = NewEvent::new(
        "Order",
        &cmd.order_id,
        "OrderPlaced",
        &OrderPlaced {
            order_id: cmd.order_id.clone(),
            customer: cmd.customer.clone(),
        },
    )?;
    OUTBOX.enqueue(tx, event).await?;
    Ok(())
}

/// Event handler, downstream: deduplicated on the event id (the default key).
#[handler]
pub async fn notify_customer(
    event: OrderPlaced,
    tx: &mut SqliteTx,
    ctx: &MessageContext,
) -> Result<(), AppError> {
    sqlx::query("INSERT INTO notifications (event_id, customer, text) VALUES ($1, $2, $3)")
        .bind(ctx.message_id())
        .bind(&event.customer)
        .bind(format!("order {} is confirmed", event.order_id))
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// The application's own tables: orders, and the notifications downstream.
pub const TABLES: &str =
    "CREATE TABLE orders (order_id TEXT PRIMARY KEY, customer TEXT, cents INTEGER);
     CREATE TABLE notifications (event_id TEXT PRIMARY KEY, customer TEXT, text TEXT);";

/// The service `main` runs (and `tests/asyncapi.rs` documents): commands
/// into orders and outbox events, the relay, and the events into
/// notifications downstream.
pub fn orders_service(
    pool: sqlx::SqlitePool,
    store: SqliteStore,
    broker: &MemoryBroker,
) -> Service {
    let relay =
        OutboxRelay::new(pool, OUTBOX.clone(), broker.clone()).with_source("/examples/orders");
    Service::new("orders")
        .with_version(env!("CARGO_PKG_VERSION"))
        .consumer(
            "commands",
            Consumer::new(broker.source("commands"), store.clone(), place_order),
        )
        .relay("outbox", relay)
        .consumer(
            "events",
            Consumer::new(broker.source("order-events"), store, notify_customer),
        )
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let path = std::env::temp_dir().join(format!("outbox-orders-{}.db", std::process::id()));
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(10));
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await?;
    let store = SqliteStore::new(pool.clone());
    store.migrate().await?; // dedup tables and the default outbox tables
    sqlx::raw_sql(TABLES).execute(&pool).await?;

    let broker = MemoryBroker::new(4);
    for (id, customer, cents) in [
        ("o-1", "alice", 1200),
        ("o-2", "bob", 800),
        ("o-3", "alice", 450),
    ] {
        let cmd = PlaceOrder {
            order_id: id.into(),
            customer: customer.into(),
            cents,
        };
        let m = Message::json("PlaceOrder", &cmd)?.with_key(customer);
        broker.publish("commands", m.clone()).await?;
        if id == "o-2" {
            broker.publish("commands", m).await?; // a duplicate command
        }
    }

    // Commands -> orders + outbox events (one transaction each) -> relay ->
    // events -> notifications, downstream. Done when the commands are
    // settled, the outbox is empty and the events are settled, in that order.
    let done = {
        let (pool, broker) = (pool.clone(), broker.clone());
        async move {
            broker.wait_drained("commands").await;
            while OUTBOX.pending(&pool).await.unwrap_or(1) > 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            broker.wait_drained("order-events").await;
        }
    };
    orders_service(pool.clone(), store, &broker)
        .run_until(done)
        .await?;

    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders")
        .fetch_one(&pool)
        .await?;
    let events: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT aggregate_id, event_type, version FROM outbox_events ORDER BY seq")
            .fetch_all(&pool)
            .await?;
    let notes: Vec<(String, String)> =
        sqlx::query_as("SELECT customer, text FROM notifications ORDER BY customer, text")
            .fetch_all(&pool)
            .await?;
    println!(
        "outbox_orders: commands -> orders + outbox (one transaction) -> relay -> broker -> notifications\n"
    );
    println!("  orders written            {orders} (4 commands, one of them a duplicate)");
    println!("  outbox events relayed     {}", events.len());
    for (agg, kind, version) in &events {
        println!("    {kind} {agg} v{version}");
    }
    println!("  notifications written     {}", notes.len());
    for (customer, text) in &notes {
        println!("    {customer}: {text}");
    }
    pool.close().await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    Ok(())
}
