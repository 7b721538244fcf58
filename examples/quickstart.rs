//! The embedded quickstart, a small service with no services needed: an
//! order aggregate whose events go through the outbox to one topic of the
//! in-memory broker, handled there by three handlers behind one router, in
//! order per order, with SQLite as the store.
//!
//! What happens on the way: the relay's publisher sends one event twice (as
//! after a lost confirm), a legacy producer sends a payload that is not
//! JSON and an event type no handler takes, one payment needs two retries,
//! one payment gateway never answers, and one amount is invalid.
//!
//! ```sh
//! cargo run --example quickstart
//! ```

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use consumer::testing::{Faults, FaultyPublisher};
use consumer::{
    Consumer, MemoryBroker, Message, MessageContext, NewEvent, Outbox, OutboxRelay, Router,
    Service, SqliteStore, SqliteTx, handler,
};
use serde::{Deserialize, Serialize};

/// Every event of an order goes to one topic, keyed by the order.
static OUTBOX: LazyLock<Outbox> =
    LazyLock::new(|| Outbox::new().with_default_destination("order-events"));

#[derive(Debug, Serialize, Deserialize)]
struct OrderPlaced {
    order_id: String,
    customer: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct OrderPaid {
    order_id: String,
    cents: i64,
}

#[derive(Debug, Serialize, Deserialize)]
struct OrderShipped {
    order_id: String,
    carrier: String,
}

#[derive(Debug, thiserror::Error)]
enum ShopError {
    #[error("payment gateway timed out (attempt {0})")]
    GatewayTimeout(u32),
    #[error("amount must be positive, got {0} cents")]
    InvalidAmount(i64),
    #[error("database error")]
    Db(#[from] sqlx::Error),
}

/// Writes one line of an order's history: which handler saw it, in which
/// order.
async fn step(tx: &mut SqliteTx, order: &str, what: &str) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO history (order_id, step) VALUES ($1, $2)")
        .bind(order)
        .bind(what)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

#[handler(event_type = "OrderPlaced", idempotency_key = e.order_id)]
async fn reserve_stock(e: OrderPlaced, tx: &mut SqliteTx) -> Result<(), ShopError> {
    step(
        tx,
        &e.order_id,
        &format!("stock reserved for {}", e.customer),
    )
    .await?;
    Ok(())
}

/// The external call gets our idempotency key, so a retry is safe there too.
#[handler(
    event_type = "OrderPaid",
    idempotency_key = e.order_id,
    retry = exponential(base = "20ms", max_delay = "200ms", attempts = 4),
    terminal = ShopError::InvalidAmount(_),
)]
async fn capture_payment(
    e: OrderPaid,
    tx: &mut SqliteTx,
    ctx: &MessageContext,
) -> Result<(), ShopError> {
    if e.cents <= 0 {
        return Err(ShopError::InvalidAmount(e.cents));
    }
    let _key_for_the_gateway = ctx.idempotency_key();
    match e.order_id.as_str() {
        "o-3" if ctx.attempt() < 3 => return Err(ShopError::GatewayTimeout(ctx.attempt())),
        "o-4" => return Err(ShopError::GatewayTimeout(ctx.attempt())),
        _ => {}
    }
    let line = format!(
        "{:.2} captured (attempt {})",
        e.cents as f64 / 100.0,
        ctx.attempt()
    );
    step(tx, &e.order_id, &line).await?;
    Ok(())
}

#[handler(event_type = "OrderShipped", idempotency_key = e.order_id)]
async fn notify_customer(e: OrderShipped, tx: &mut SqliteTx) -> Result<(), ShopError> {
    step(tx, &e.order_id, &format!("shipped with {}", e.carrier)).await?;
    Ok(())
}

/// An order's three events, written in the same transactions as the
/// business rows would be.
async fn place(
    pool: &sqlx::SqlitePool,
    order: &str,
    customer: &str,
    cents: i64,
) -> anyhow::Result<()> {
    let events = [
        NewEvent::new(
            "Order",
            order,
            "OrderPlaced",
            &OrderPlaced {
                order_id: order.into(),
                customer: customer.into(),
            },
        )?,
        NewEvent::new(
            "Order",
            order,
            "OrderPaid",
            &OrderPaid {
                order_id: order.into(),
                cents,
            },
        )?,
        NewEvent::new(
            "Order",
            order,
            "OrderShipped",
            &OrderShipped {
                order_id: order.into(),
                carrier: "parcelco".into(),
            },
        )?,
    ];
    for event in events {
        let mut tx = pool.begin().await?;
        OUTBOX.enqueue(&mut tx, event).await?;
        tx.commit().await?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let started = Instant::now();
    // One connection: an in-memory SQLite database lives in its connection.
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect("sqlite::memory:")
        .await?;
    let store = SqliteStore::new(pool.clone());
    store.migrate().await?;
    sqlx::query(
        "CREATE TABLE history (n INTEGER PRIMARY KEY AUTOINCREMENT, order_id TEXT, step TEXT)",
    )
    .execute(&pool)
    .await?;

    for (order, customer, cents) in [
        ("o-1", "alice", 1_250),
        ("o-2", "bob", 990),
        ("o-3", "carol", 4_000), // the gateway times out twice
        ("o-4", "dave", 7_500),  // the gateway never answers
        ("o-5", "erin", -5),     // an invalid amount
    ] {
        place(&pool, order, customer, cents).await?;
    }

    let broker = MemoryBroker::new(4);
    // Outside the outbox: a legacy producer's payload that is not JSON, and
    // an event type no handler takes.
    broker
        .publish(
            "order-events",
            Message::raw(&b"<order id=6/>"[..])
                .with_header("ce_type", "OrderPlaced")
                .with_key("o-6")
                .with_id("legacy-1"),
        )
        .await?;
    broker
        .publish(
            "order-events",
            Message::json("OrderReturned", &serde_json::json!({ "order_id": "o-1" }))?
                .with_key("o-1")
                .with_id("returned-1"),
        )
        .await?;

    // The relay's publisher sends its first event twice, as after a lost
    // confirm: the consumer must not run it twice.
    let faults = Faults::new();
    faults.duplicate_next_publishes(1);
    let relay = OutboxRelay::new(
        pool.clone(),
        OUTBOX.clone(),
        FaultyPublisher::new(broker.clone(), faults),
    )
    .with_source("quickstart");
    let relay_stats = relay.stats();

    let router = Router::builder("orders")
        .route(reserve_stock)
        .route(capture_payment)
        .route(notify_customer)
        .build()?;
    let consumer = Consumer::router(broker.source("order-events"), store, router);
    let stats = consumer.stats();

    let done = {
        let (pool, broker) = (pool.clone(), broker.clone());
        async move {
            // Done when the outbox is empty and the topic has nothing left.
            loop {
                let pending = OUTBOX.pending(&pool).await.unwrap_or(1);
                if pending == 0 && broker.depth("order-events") == 0 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    Service::new("shop")
        .relay("outbox", relay)
        .consumer("orders", consumer)
        .run_until(done)
        .await?;

    let s = stats.snapshot();
    println!(
        "quickstart: the `shop` service: outbox relay -> topic `order-events` -> router `orders`"
    );
    println!(
        "            (reserve_stock, capture_payment, notify_customer), in-memory broker, SQLite\n"
    );
    println!("  events relayed      {}", relay_stats.snapshot().published);
    println!("  deliveries          {}", s.received);
    println!("  processed           {}", s.processed);
    println!("  duplicates skipped  {}", s.duplicates);
    println!("  retries             {}", s.retries);
    println!("  dead letters        {}", s.dead_letters());
    println!("\nhistory, per order in the order its events were handled:");
    let rows: Vec<(String, String)> =
        sqlx::query_as("SELECT order_id, step FROM history ORDER BY order_id, n")
            .fetch_all(&pool)
            .await?;
    let mut last = String::new();
    for (order, what) in rows {
        let shown = if order == last { "" } else { order.as_str() };
        println!("  {shown:<5} {what}");
        last = order;
    }
    println!("\ndead letters of `order-events` (kind, attempts, handler, key, reason):");
    for dl in broker.dead_letter_records("order-events") {
        let cause = dl
            .causes
            .first()
            .map(|c| format!(": {c}"))
            .unwrap_or_default();
        println!(
            "  {:<9} {} attempt(s)  {:<16} {:<4} {}{}",
            dl.kind.as_str(),
            dl.attempts,
            dl.handler,
            dl.key.as_deref().unwrap_or("-"),
            dl.error,
            cause
        );
    }
    println!(
        "\nfinished in {:.2?}",
        started.elapsed().max(Duration::from_millis(1))
    );
    Ok(())
}
