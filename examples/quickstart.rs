//! The embedded quickstart: no services needed. An in-memory broker and an
//! in-memory SQLite store run one handler over a handful of orders chosen
//! to show every path: a normal order, a duplicate delivery, a poison pill,
//! a transient failure that succeeds on retry, one that never does, and an
//! order the business rejects for good.
//!
//! ```sh
//! cargo run --example quickstart
//! ```

use std::time::{Duration, Instant};

use consumer::{Consumer, MemoryBroker, Message, MessageContext, SqliteStore, SqliteTx, handler};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct OrderPlaced {
    order_id: String,
    customer: String,
    cents: i64,
}

#[derive(Debug, thiserror::Error)]
enum OrderError {
    #[error("payment gateway timed out (attempt {0})")]
    GatewayTimeout(u32),
    #[error("order total must be positive, got {0} cents")]
    InvalidAmount(i64),
    #[error("database error")]
    Db(#[from] sqlx::Error),
}

/// Stands in for a flaky external call: order "o-flaky" times out twice,
/// order "o-down" always does.
fn gateway(order: &OrderPlaced, ctx: &MessageContext) -> Result<(), OrderError> {
    match order.order_id.as_str() {
        "o-flaky" if ctx.attempt() < 3 => Err(OrderError::GatewayTimeout(ctx.attempt())),
        "o-down" => Err(OrderError::GatewayTimeout(ctx.attempt())),
        _ => Ok(()),
    }
}

#[handler(
    idempotency_key = order.order_id,
    retry = exponential(base = "20ms", max_delay = "200ms", attempts = 4),
    terminal = OrderError::InvalidAmount(_),
)]
async fn record_order(
    order: OrderPlaced,
    tx: &mut SqliteTx,
    ctx: &MessageContext,
) -> Result<(), OrderError> {
    if order.cents <= 0 {
        return Err(OrderError::InvalidAmount(order.cents));
    }
    // The external call gets our idempotency key, so a retry is safe there too.
    let _key = ctx.idempotency_key();
    gateway(&order, ctx)?;
    sqlx::query("INSERT INTO orders (order_id, customer, cents) VALUES ($1, $2, $3)")
        .bind(&order.order_id)
        .bind(&order.customer)
        .bind(order.cents)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

fn order(id: &str, customer: &str, cents: i64) -> anyhow::Result<Message> {
    let order = OrderPlaced {
        order_id: id.into(),
        customer: customer.into(),
        cents,
    };
    Ok(Message::json("OrderPlaced", &order)?
        .with_key(customer)
        .with_source("quickstart"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let started = Instant::now();
    // One connection: an in-memory SQLite database lives in its connection.
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect("sqlite::memory:")
        .await?;
    sqlx::query("CREATE TABLE orders (order_id TEXT PRIMARY KEY, customer TEXT, cents INTEGER)")
        .execute(&pool)
        .await?;
    let store = SqliteStore::new(pool.clone());
    store.migrate().await?;

    let broker = MemoryBroker::new(4);
    let normal = order("o-1", "alice", 1_250)?;
    broker.publish("orders", normal.clone()).await?;
    broker.publish("orders", normal).await?; // delivered twice: processed once
    broker.publish("orders", order("o-2", "bob", 990)?).await?;
    broker
        .publish(
            "orders",
            Message::raw(&b"{\"order_id\": 42,"[..]).with_key("mallory"),
        )
        .await?; // poison pill: not an OrderPlaced
    broker
        .publish("orders", order("o-flaky", "carol", 4_000)?)
        .await?;
    broker
        .publish("orders", order("o-down", "dave", 7_500)?)
        .await?;
    broker
        .publish("orders", order("o-negative", "erin", -5)?)
        .await?;

    let consumer = Consumer::new(broker.source("orders"), store, record_order);
    let stats = consumer.stats();
    let drained = broker.clone();
    consumer
        .run_until(async move { drained.wait_drained("orders").await })
        .await?;

    let s = stats.snapshot();
    let rows: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT order_id, customer, cents FROM orders ORDER BY order_id")
            .fetch_all(&pool)
            .await?;
    println!("quickstart: in-memory broker + SQLite store, handler `record_order`\n");
    println!("  received            {}", s.received);
    println!("  processed           {}", s.processed);
    println!("  duplicates skipped  {}", s.duplicates);
    println!("  retries             {}", s.retries);
    println!("  dead letters        {}", s.dead_letters());
    println!("\norders table:");
    for (id, customer, cents) in rows {
        println!("  {id:<10} {customer:<6} {:>8.2}", cents as f64 / 100.0);
    }
    println!("\ndead-letter queue of `orders` (kind, attempts, key, reason):");
    for dl in broker.dead_letter_records("orders") {
        let cause = dl
            .causes
            .first()
            .map(|c| format!(": {c}"))
            .unwrap_or_default();
        println!(
            "  {:<9} {} attempt(s)  {:<8} {}{}",
            dl.kind.as_str(),
            dl.attempts,
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
