//! The quickstart's shop on Amazon Kinesis and PostgreSQL: the outbox relay
//! publishes each order's events to one stream, the order as the partition
//! key (as the standard's producer does: `PutRecord` with `PartitionKey` =
//! the aggregate id), and a router of three handlers takes them in order
//! per order. The source's shard leases and checkpoints live in
//! PostgreSQL beside the store; dead letters go to a second stream with
//! their context.
//!
//! ```sh
//! scripts/services postgres sqs   # moto (it serves Kinesis) on 127.0.0.1:4566
//! cargo run --example kinesis_orders --features kinesis
//! ```
//!
//! Environment: `KINESIS_ENDPOINT` (default http://127.0.0.1:4566, moto's
//! server; `aws` uses the SDK's default configuration), `DATABASE_URL`
//! (default postgres://postgres@127.0.0.1:5432/test; the example works in a
//! schema `shop_kinesis` of its own), `KINESIS_STREAM` (default
//! `shop-order-events`; dead letters go to `<stream>-dlq`). Both streams are
//! created when missing, with two shards and one.

#[path = "shop/mod.rs"]
mod shop;

use std::str::FromStr;
use std::time::Duration;

use consumer::kinesis::aws_sdk_kinesis;
use consumer::kinesis::client::{AwsKinesis, IteratorStart};
use consumer::kinesis::{KinesisClient, KinesisPublisher, KinesisSource, envelope};
use consumer::kinesis_store::SqlLeaseStore;
use consumer::testing::{Faults, FaultyPublisher};
use consumer::{DeadLetter, OutboxRelay, Outgoing, PgStore, PgTx, Publisher};
use shop::Shop;

shop::shop_handlers!(PgTx, PgStore);

/// Creates `stream` with `shards` shards unless it exists, and waits until
/// it is active; when it was created (Unix seconds).
async fn ensure_stream(
    sdk: &aws_sdk_kinesis::Client,
    stream: &str,
    shards: i32,
) -> anyhow::Result<i64> {
    let exists = sdk
        .describe_stream_summary()
        .stream_name(stream)
        .send()
        .await
        .is_ok();
    if !exists {
        sdk.create_stream()
            .stream_name(stream)
            .shard_count(shards)
            .send()
            .await?;
    }
    for _ in 0..300 {
        let summary = sdk
            .describe_stream_summary()
            .stream_name(stream)
            .send()
            .await?;
        let status = summary
            .stream_description_summary()
            .map(|s| s.stream_status().clone());
        if status == Some(aws_sdk_kinesis::types::StreamStatus::Active) {
            let created = summary
                .stream_description_summary()
                .map_or(0, |s| s.stream_creation_timestamp().secs());
            return Ok(created);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("stream {stream} is not active after 30 s")
}

/// The letters of this run in the dead-letter stream.
async fn read_dead_letters(
    client: &KinesisClient,
    stream: &str,
    run: &str,
) -> anyhow::Result<Vec<DeadLetter>> {
    let api = client.api();
    let mut letters = Vec::new();
    for shard in api.list_shards(stream).await? {
        let mut iterator = Some(
            api.shard_iterator(stream, &shard.id, &IteratorStart::TrimHorizon)
                .await?,
        );
        while let Some(it) = iterator.take() {
            let page = api.get_records(&it, 10_000).await?;
            if page.records.is_empty() {
                break;
            }
            for r in &page.records {
                let Ok(message) = envelope::decode(&r.data, &r.partition_key) else {
                    continue;
                };
                if let Some(letter) = DeadLetter::from_message(&message)
                    && letter.key.as_deref().is_some_and(|k| k.ends_with(run))
                {
                    letters.push(letter);
                }
            }
            iterator = page.next_iterator;
        }
    }
    Ok(letters)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_owned());
    let endpoint = env("KINESIS_ENDPOINT", "http://127.0.0.1:4566");
    let database_url = env("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test");
    let stream = env("KINESIS_STREAM", "shop-order-events");
    let dead_letters = format!("{stream}-dlq");
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    // One SDK client: the source and publishers use it, and so does the
    // stream setup below.
    let aws = if endpoint == "aws" {
        AwsKinesis::from_env().await
    } else {
        AwsKinesis::local(&endpoint)
    };
    let sdk = aws.client().clone();
    let client = KinesisClient::from_sdk(sdk.clone());
    let mut created = 0;
    for (name, shards) in [(&stream, 2), (&dead_letters, 1)] {
        let at = ensure_stream(&sdk, name, shards).await.map_err(|e| {
            anyhow::anyhow!(
                "{e} (is a Kinesis emulator running at {endpoint}? scripts/services sqs starts moto there)"
            )
        })?;
        if name == &stream {
            created = at;
        }
    }

    // A schema of its own, so the store's, the outbox's and the leases'
    // tables of this example meet nobody else's.
    let admin = sqlx::PgPool::connect(&database_url).await?;
    sqlx::query("CREATE SCHEMA IF NOT EXISTS shop_kinesis")
        .execute(&admin)
        .await?;
    admin.close().await;
    let options = sqlx::postgres::PgConnectOptions::from_str(&database_url)?
        .options([("search_path", "shop_kinesis")]);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await?;
    let store = PgStore::new(pool.clone());
    store.migrate().await?;
    sqlx::query(shop::HISTORY_DDL).execute(&pool).await?;
    // Leases and checkpoints of this stream as created: a stream deleted and
    // created again under its name (an emulator restarted) starts afresh.
    let leases = SqlLeaseStore::new(pool.clone(), format!("shop-{created}"), stream.as_str());
    leases.migrate().await?;

    let outbox = shop::outbox(&stream);
    shop::place_orders(&pool, &outbox, &run).await?;
    let publisher = KinesisPublisher::builder(client.clone()).build();
    let legacy: Vec<Outgoing> = shop::legacy_messages(&run)?
        .into_iter()
        .map(|message| Outgoing {
            destination: stream.clone(),
            message,
        })
        .collect();
    for r in publisher.publish(&legacy).await {
        r?;
    }
    // The relay's publisher sends its first event twice, as after a lost
    // confirm: Kinesis stores both, and the consumer's dedup runs it once.
    let faults = Faults::new();
    faults.duplicate_next_publishes(1);
    let source = KinesisSource::builder(client.clone(), stream.as_str(), leases)
        .with_dead_letter_stream(&dead_letters)
        .with_poll_interval(Duration::from_millis(200))
        .connect()
        .await?;
    let relay = OutboxRelay::new(
        pool.clone(),
        outbox,
        FaultyPublisher::new(publisher, faults),
    )
    .with_source("kinesis-orders-example");
    let router = orders_router()?;
    let Shop {
        service,
        relay_stats,
        stats,
    } = shop::service(relay, source, store, router);

    // 15 events, one of them twice, and 2 legacy messages: 18 deliveries
    // to settle, as processed, duplicates or dead letters.
    let s = shop::run_until_settled(
        service,
        &stats,
        18,
        Duration::from_secs(120),
        &format!("Kinesis at {endpoint} serving {stream}"),
    )
    .await?;

    print!(
        "{}",
        shop::report(
            &format!(
                "kinesis_orders: the `shop` service on Kinesis at {endpoint} and PostgreSQL\n\n  stream {stream}"
            ),
            relay_stats.snapshot().published,
            &s,
            &shop::history(&pool, &run).await?,
            &read_dead_letters(&client, &dead_letters, &run).await?,
        )
    );
    Ok(())
}
