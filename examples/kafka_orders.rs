//! Orders over Kafka into PostgreSQL, exactly once.
//!
//! ```sh
//! scripts/services postgres kafka   # or any Kafka and PostgreSQL of your own
//! cargo run --example kafka_orders --features kafka
//! ```
//!
//! Needs a Kafka-protocol broker (Apache Kafka, or the tansu broker that
//! `scripts/services kafka` starts) and PostgreSQL. Environment:
//! `KAFKA_BROKERS` (default 127.0.0.1:9092), `DATABASE_URL` (default
//! postgres://postgres@127.0.0.1:5432/test), `KAFKA_TOPIC` (default
//! `orders`; retries go through `<topic>.retry`, dead letters to
//! `<topic>.dlq`), `KAFKA_GROUP` (default `orders-example`).
//!
//! Creates the three topics (brokers such as tansu do not create them on
//! first use), publishes a few orders with the idempotent `KafkaPublisher`
//! (one twice, one that is not JSON, one whose first attempt fails), consumes
//! them until each is settled, and prints what happened. Every producer sends
//! one record per batch (`batch.num.messages=1`): tansu 0.6 loses records
//! for a consumer that resumes inside a multi-record batch.

use std::time::Duration;

use consumer::kafka::{KafkaPublisher, KafkaSource, Topics};
use consumer::{Consumer, Message, MessageContext, Outgoing, PgStore, PgTx, Publisher, handler};

#[derive(serde::Serialize, serde::Deserialize)]
struct OrderPlaced {
    order_id: String,
    cents: i64,
    /// Makes the first attempt fail as if the database were briefly
    /// unreachable, to show a retry through the retry topic.
    #[serde(default)]
    simulate_outage: bool,
}

#[derive(Debug, thiserror::Error)]
enum OrderError {
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("simulated outage on attempt {0}")]
    Outage(u32),
}

#[handler(idempotency_key = order.order_id, retry = exponential(base = "200ms", max_delay = "2s", attempts = 5, mode = redeliver))]
async fn record_order(
    order: OrderPlaced,
    tx: &mut PgTx,
    ctx: &MessageContext,
) -> Result<(), OrderError> {
    sqlx::query("INSERT INTO kafka_orders (id, cents) VALUES ($1, $2)")
        .bind(&order.order_id)
        .bind(order.cents)
        .execute(&mut **tx)
        .await?;
    if order.simulate_outage && ctx.attempt() == 1 {
        // Transient: the insert above and the dedup row roll back together.
        return Err(OrderError::Outage(ctx.attempt()));
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_owned());
    let brokers = env("KAFKA_BROKERS", "127.0.0.1:9092");
    let database_url = env("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test");
    let topics = Topics::new(env("KAFKA_TOPIC", "orders"))?;
    let group = env("KAFKA_GROUP", "orders-example");
    println!(
        "kafka_orders: Kafka at {brokers} (group {group}), PostgreSQL at {database_url}\n\n{topics}\n"
    );
    topics.create(&brokers, 3, 1).await?;

    let pool = sqlx::PgPool::connect(&database_url).await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS kafka_orders (id TEXT PRIMARY KEY, cents BIGINT NOT NULL)",
    )
    .execute(&pool)
    .await?;
    let store = PgStore::new(pool.clone());
    store.migrate().await?;

    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let order = |n: i64, simulate_outage: bool| -> anyhow::Result<Message> {
        Ok(Message::json(
            "OrderPlaced",
            &OrderPlaced {
                order_id: format!("{run_id}-{n}"),
                cents: n * 100,
                simulate_outage,
            },
        )?
        .with_key(format!("customer-{}", n % 2)))
    };
    let to_topic = |message| Outgoing {
        destination: topics.topic().to_owned(),
        message,
    };
    let batch = vec![
        to_topic(order(1, false)?),
        to_topic(order(2, false)?),
        to_topic(order(2, false)?), // the same order again: processed once
        to_topic(
            Message::raw(&b"not json"[..])
                .with_id(format!("{run_id}-poison"))
                .with_key("customer-0"),
        ),
        to_topic(order(3, true)?), // fails once, then succeeds from the retry topic
        to_topic(order(4, false)?),
    ];
    let publisher = KafkaPublisher::builder(&brokers)
        .with_property("batch.num.messages", "1")
        .build()?;
    for r in publisher.publish(&batch).await {
        r?;
    }
    println!("published {} records to {}", batch.len(), topics.topic());

    let source = KafkaSource::builder(&brokers, &group, topics.clone())
        .with_producer_property("batch.num.messages", "1")
        .connect()?;
    let metrics = source.metrics();
    let consumer = Consumer::new(source, store, record_order);
    let stats = consumer.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));
    // Four orders processed (one after a retry), one duplicate skipped, one
    // dead letter: six settled deliveries.
    let settled = tokio::time::timeout(
        Duration::from_secs(120),
        stats.wait_for(|s| s.processed + s.duplicates + s.dead_letters() >= 6),
    )
    .await;
    let _ = stop.send(());
    run.await??;
    if settled.is_err() {
        anyhow::bail!(
            "the orders were not all settled within 120 s ({:?}); is the broker at {brokers} serving group {group}?",
            stats.snapshot()
        );
    }

    let s = stats.snapshot();
    let k = metrics.snapshot();
    let (rows,): (i64,) = sqlx::query_as("SELECT count(*) FROM kafka_orders WHERE id LIKE $1")
        .bind(format!("{run_id}-%"))
        .fetch_one(&pool)
        .await?;
    println!(
        "received {}, processed {}, duplicates {}, retries {}, dead letters {} (to {})",
        s.received,
        s.processed,
        s.duplicates,
        s.retries,
        s.dead_letters(),
        topics.dead_letter_topic()
    );
    println!("orders recorded in PostgreSQL for this run: {rows}");
    println!(
        "rebalances {}, commit failures {}, lag {}",
        k.rebalances,
        k.commit_failures,
        k.total_lag()
    );
    anyhow::ensure!(rows == 4, "expected 4 orders recorded, found {rows}");
    Ok(())
}
