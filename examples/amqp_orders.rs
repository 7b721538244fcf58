//! The quickstart's shop on RabbitMQ and PostgreSQL: the outbox relay
//! publishes each order's events to one queue (the key travels as
//! `ce_partitionkey`), and a router of three handlers takes them in order
//! per order; dead letters go to the dead-letter queue.
//!
//! ```sh
//! scripts/services postgres rabbitmq   # or a RabbitMQ and PostgreSQL of your own
//! cargo run --example amqp_orders --features amqp
//! ```
//!
//! Environment: `AMQP_URL` (default amqp://guest:guest@127.0.0.1:5672/%2f),
//! `DATABASE_URL` (default postgres://postgres@127.0.0.1:5432/test; the
//! example works in a schema `shop_amqp` of its own), `ORDERS_QUEUE`
//! (default `shop.order-events`), `ORDERS_QUEUE_TYPE` (`classic` or
//! `quorum`, default `classic`).

#[path = "shop/mod.rs"]
mod shop;

use std::str::FromStr;
use std::time::Duration;

use consumer::amqp::{AmqpPublisher, AmqpSource, QueueType, Topology};
use consumer::testing::{Faults, FaultyPublisher};
use consumer::{DeadLetter, Message, Outbox, OutboxRelay, Outgoing, PgStore, PgTx, Publisher};
use lapin::options::{BasicGetOptions, BasicNackOptions};
use shop::Shop;

shop::shop_handlers!(PgTx, PgStore);

/// The dead letters of this run, read with `basic.get` and put back.
async fn read_dead_letters(
    url: &str,
    topology: &Topology,
    run: &str,
) -> anyhow::Result<Vec<DeadLetter>> {
    let conn = lapin::Connection::connect(url, lapin::ConnectionProperties::default()).await?;
    let channel = conn.create_channel().await?;
    let mut letters = Vec::new();
    while let Some(got) = channel
        .basic_get(
            topology.dead_letter_queue().into(),
            BasicGetOptions::default(),
        )
        .await?
    {
        let envelope = consumer::amqp::headers::to_envelope(
            topology.dead_letter_queue(),
            &got.delivery,
            got.delivery.data.clone().into(),
        );
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
    let requeue = BasicNackOptions {
        multiple: true,
        requeue: true,
    };
    let _ = channel.basic_nack(0, requeue).await;
    let _ = conn.close(200, "dead letters read".into()).await;
    Ok(letters)
}

/// The queue, its dead-letter queue and delay queues (retries of up to 5 s).
pub fn topology(queue: &str, queue_type: QueueType) -> anyhow::Result<Topology> {
    Ok(Topology::new(queue)?
        .with_queue_type(queue_type)
        .with_max_retry_delay(Duration::from_secs(5)))
}

/// The shop's outbox, its events to `destination`.
pub fn outbox(destination: &str) -> Outbox {
    shop::outbox(destination)
}

/// The service `main` runs (and `tests/asyncapi.rs` documents): the
/// outbox relay publishing through `publisher`, and the router over
/// `source`.
pub fn shop_service<P: Publisher, S: consumer::source::Source>(
    pool: sqlx::PgPool,
    store: PgStore,
    source: S,
    outbox: Outbox,
    publisher: P,
) -> anyhow::Result<Shop> {
    let relay = OutboxRelay::new(pool, outbox, publisher).with_source("amqp-orders-example");
    let router = orders_router()?;
    Ok(shop::service(relay, source, store, router))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_owned());
    let amqp_url = env("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f");
    let database_url = env("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test");
    let queue = env("ORDERS_QUEUE", "shop.order-events");
    let queue_type = match env("ORDERS_QUEUE_TYPE", "classic").as_str() {
        "quorum" => QueueType::Quorum,
        _ => QueueType::Classic,
    };
    let topology = topology(&queue, queue_type)?;
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();

    let admin = sqlx::PgPool::connect(&database_url).await?;
    sqlx::query("CREATE SCHEMA IF NOT EXISTS shop_amqp")
        .execute(&admin)
        .await?;
    admin.close().await;
    let options = sqlx::postgres::PgConnectOptions::from_str(&database_url)?
        .options([("search_path", "shop_amqp")]);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await?;
    let store = PgStore::new(pool.clone());
    store.migrate().await?;
    sqlx::query(shop::HISTORY_DDL).execute(&pool).await?;

    // The source declares the topology before anything is published to it.
    let source = AmqpSource::builder(amqp_url.clone(), topology.clone())
        .connect()
        .await?;
    let destination = format!("/{queue}");
    let outbox = outbox(&destination);
    shop::place_orders(&pool, &outbox, &run).await?;
    let publisher = AmqpPublisher::builder(amqp_url.clone()).connect().await?;
    let legacy: Vec<Outgoing> = shop::legacy_messages(&run)?
        .into_iter()
        .map(|message| Outgoing {
            destination: destination.clone(),
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
    let s = shop::run_until_settled(
        service,
        &stats,
        18,
        Duration::from_secs(120),
        &format!("RabbitMQ at {amqp_url} serving {queue}"),
    )
    .await?;

    print!(
        "{}",
        shop::report(
            &format!(
                "amqp_orders: the `shop` service on RabbitMQ at {amqp_url} and PostgreSQL\n\ntopology:\n{topology}"
            ),
            relay_stats.snapshot().published,
            &s,
            &shop::history(&pool, &run).await?,
            &read_dead_letters(&amqp_url, &topology, &run).await?,
        )
    );
    Ok(())
}
