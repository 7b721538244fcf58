//! Orders over RabbitMQ into PostgreSQL, exactly once.
//!
//! ```sh
//! cargo run --example amqp_orders --features amqp
//! ```
//!
//! Environment: `AMQP_URL` (default amqp://guest:guest@127.0.0.1:5672/%2f),
//! `DATABASE_URL` (default postgres://postgres@127.0.0.1:5432/test),
//! `ORDERS_QUEUE` (default `orders`), `ORDERS_DLQ` (default `<queue>.dlq`),
//! `ORDERS_QUEUE_TYPE` (`classic` or `quorum`, default `classic`).
//! Prints its topology, publishes a few orders (one twice, one that is not
//! JSON), consumes them, and prints what happened.

use std::time::Duration;

use consumer::amqp::{AmqpPublisher, AmqpSource, QueueType, Topology};
use consumer::{Consumer, Message, MessageContext, Outgoing, PgStore, PgTx, Publisher, handler};

#[derive(serde::Serialize, serde::Deserialize)]
struct OrderPlaced {
    order_id: String,
    cents: i64,
}

#[derive(Debug, thiserror::Error)]
enum OrderError {
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
}

#[handler(idempotency_key = order.order_id, retry = exponential(base = "100ms", max_delay = "5s", attempts = 5, mode = redeliver))]
async fn record_order(
    order: OrderPlaced,
    tx: &mut PgTx,
    _ctx: &MessageContext,
) -> Result<(), OrderError> {
    sqlx::query("INSERT INTO amqp_orders (id, cents) VALUES ($1, $2)")
        .bind(&order.order_id)
        .bind(order.cents)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_owned());
    let amqp_url = env("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f");
    let database_url = env("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test");
    let queue = env("ORDERS_QUEUE", "orders");
    let queue_type = match env("ORDERS_QUEUE_TYPE", "classic").as_str() {
        "quorum" => QueueType::Quorum,
        _ => QueueType::Classic,
    };
    let mut topology = Topology::new(queue.clone())?
        .with_queue_type(queue_type)
        .with_max_retry_delay(Duration::from_secs(5));
    if let Ok(dlq) = std::env::var("ORDERS_DLQ") {
        topology = topology.with_dead_letter_queue(dlq);
    }
    println!(
        "amqp_orders: RabbitMQ at {amqp_url}, PostgreSQL at {database_url}\n\ntopology:\n{topology}\n"
    );

    let pool = sqlx::PgPool::connect(&database_url).await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS amqp_orders (id TEXT PRIMARY KEY, cents BIGINT NOT NULL)",
    )
    .execute(&pool)
    .await?;
    let store = PgStore::new(pool.clone());
    store.migrate().await?;

    let source = AmqpSource::new(amqp_url.clone(), topology.clone())?
        .connect()
        .await?;
    let metrics = source.metrics();
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let order = |n: i64| -> anyhow::Result<Message> {
        Ok(Message::json(
            "OrderPlaced",
            &OrderPlaced {
                order_id: format!("{run_id}-{n}"),
                cents: n * 100,
            },
        )?
        .with_key(format!("customer-{}", n % 2)))
    };
    let to_queue = |message| Outgoing {
        destination: format!("/{queue}"),
        message,
    };
    let batch = vec![
        to_queue(order(1)?),
        to_queue(order(2)?),
        to_queue(order(2)?), // the same order again: processed once
        to_queue(Message::raw(&b"not json"[..]).with_id(format!("{run_id}-poison"))),
        to_queue(order(3)?),
    ];
    for r in AmqpPublisher::new(amqp_url).publish(&batch).await {
        r?;
    }

    let consumer = Consumer::new(source, store, record_order);
    let stats = consumer.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));
    stats
        .wait_for(|s| s.processed + s.duplicates + s.dead_letters() >= 5)
        .await;
    let _ = stop.send(());
    run.await??;

    let s = stats.snapshot();
    let depths = metrics.depths().await?;
    println!(
        "received {}, processed {}, duplicates {}, dead letters {}",
        s.received,
        s.processed,
        s.duplicates,
        s.dead_letters()
    );
    println!(
        "redelivered {}, reconnects {}",
        metrics.redelivered(),
        metrics.reconnects()
    );
    println!(
        "queue depths: work {}, dead letters {}, delayed {}",
        depths.work, depths.dead_letters, depths.delayed
    );
    Ok(())
}
