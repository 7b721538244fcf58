//! The quickstart's shop on Kafka and PostgreSQL: the outbox relay publishes
//! each order's events to one topic, keyed by the order, and a router of
//! three handlers takes them in order per order; dead letters go to the
//! dead-letter topic.
//!
//! ```sh
//! scripts/services postgres kafka   # or any Kafka and PostgreSQL of your own
//! cargo run --example kafka_orders --features kafka
//! ```
//!
//! Environment: `KAFKA_BROKERS` (default 127.0.0.1:9092), `DATABASE_URL`
//! (default postgres://postgres@127.0.0.1:5432/test; the example works in
//! a schema `shop_kafka` of its own), `KAFKA_TOPIC` (default
//! `shop.order-events`; retries would go through `<topic>.retry`, dead
//! letters go to `<topic>.dlq`), `KAFKA_GROUP` (default `shop-example`).
//! Topics are created first, with the admin API: the test broker
//! `scripts/services kafka` starts does not create them on use, and neither
//! should a production cluster.

#[path = "shop/mod.rs"]
mod shop;

use std::str::FromStr;
use std::time::Duration;

use consumer::kafka::{KafkaPublisher, KafkaSource, Topics};
use consumer::testing::{Faults, FaultyPublisher};
use consumer::{DeadLetter, Message, Outbox, OutboxRelay, Outgoing, PgStore, PgTx, Publisher};
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use shop::Shop;

shop::shop_handlers!(PgTx, PgStore);

/// The shop's outbox, its events to `topic`.
pub fn outbox(topic: &str) -> Outbox {
    shop::outbox(topic)
}

/// The service `main` runs (and `tests/asyncapi.rs` documents): the
/// outbox relay publishing to `topics` through `publisher`, and the router
/// over `source`.
pub fn shop_service<P: Publisher>(
    pool: sqlx::PgPool,
    store: PgStore,
    source: KafkaSource,
    outbox: Outbox,
    publisher: P,
) -> anyhow::Result<Shop> {
    let relay = OutboxRelay::new(pool, outbox, publisher).with_source("kafka-orders-example");
    let router = orders_router()?;
    Ok(shop::service(relay, source, store, router))
}

/// The records of the dead-letter topic written by this run.
fn read_dead_letters(brokers: &str, topic: &str, run: &str) -> anyhow::Result<Vec<DeadLetter>> {
    let reader: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", format!("shop-dlq-reader-{run}"))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()?;
    reader.subscribe(&[topic])?;
    let mut letters = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline && letters.len() < 4 {
        if let Some(Ok(record)) = reader.poll(Duration::from_millis(200)) {
            let envelope = consumer::kafka::headers::to_envelope(&record);
            let message = Message {
                key: envelope.key,
                headers: envelope.headers,
                payload: envelope.payload,
            };
            if let Some(letter) = DeadLetter::from_message(&message)
                && letter.key.as_deref().is_some_and(|k| k.ends_with(run))
            {
                letters.push(letter);
            }
        }
    }
    Ok(letters)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_owned());
    let brokers = env("KAFKA_BROKERS", "127.0.0.1:9092");
    let database_url = env("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test");
    let topics = Topics::new(env("KAFKA_TOPIC", "shop.order-events"))?;
    let group = env("KAFKA_GROUP", "shop-example");
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    topics.create(&brokers, 3, 1).await?;

    // A schema of its own, so the store's and the outbox's tables of this
    // example meet nobody else's.
    let admin = sqlx::PgPool::connect(&database_url).await?;
    sqlx::query("CREATE SCHEMA IF NOT EXISTS shop_kafka")
        .execute(&admin)
        .await?;
    admin.close().await;
    let options = sqlx::postgres::PgConnectOptions::from_str(&database_url)?
        .options([("search_path", "shop_kafka")]);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await?;
    let store = PgStore::new(pool.clone());
    store.migrate().await?;
    sqlx::query(shop::HISTORY_DDL).execute(&pool).await?;

    let outbox = outbox(topics.topic());
    shop::place_orders(&pool, &outbox, &run).await?;
    let publisher = KafkaPublisher::builder(&brokers).connect().await?;
    let legacy: Vec<Outgoing> = shop::legacy_messages(&run)?
        .into_iter()
        .map(|message| Outgoing {
            destination: topics.topic().to_owned(),
            message,
        })
        .collect();
    for r in publisher.publish(&legacy).await {
        r?;
    }
    // The relay's publisher sends its first event twice, as after a lost
    // confirm: the consumer must not run it twice.
    let faults = Faults::new();
    faults.duplicate_next_publishes(1);
    let source = KafkaSource::builder(&brokers, &group, topics.clone())
        .connect()
        .await?;
    let Shop {
        service,
        relay_stats,
        stats,
    } = shop_service(
        pool.clone(),
        store,
        source,
        outbox,
        FaultyPublisher::new(publisher, faults),
    )?;

    // 15 events (one sent twice) and 2 legacy records: 18 deliveries to
    // settle, as processed, duplicates or dead letters.
    let s = shop::run_until_settled(
        service,
        &stats,
        18,
        Duration::from_secs(120),
        &format!("the broker at {brokers} serving group {group}"),
    )
    .await?;

    print!(
        "{}",
        shop::report(
            &format!(
                "kafka_orders: the `shop` service on Kafka at {brokers} and PostgreSQL\n\n{topics}"
            ),
            relay_stats.snapshot().published,
            &s,
            &shop::history(&pool, &run).await?,
            &read_dead_letters(&brokers, topics.dead_letter_topic(), &run)?,
        )
    );
    Ok(())
}
