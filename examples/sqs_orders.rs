//! The quickstart's shop on AWS SQS and PostgreSQL: the outbox relay
//! publishes each order's events to one FIFO queue, the order as the
//! message group, and a router of three handlers takes them in order per
//! order; dead letters go to the queue's FIFO dead-letter queue with their
//! context.
//!
//! ```sh
//! scripts/services postgres sqs   # moto on 127.0.0.1:4566, or your own
//! cargo run --example sqs_orders --features sqs
//! ```
//!
//! Environment: `SQS_ENDPOINT` (default http://127.0.0.1:4566, moto's
//! server; `aws` uses the SDK's default configuration: region, credentials
//! and endpoint from the environment), `DATABASE_URL` (default
//! postgres://postgres@127.0.0.1:5432/test; the example works in a schema
//! `shop_sqs` of its own), `SQS_QUEUE` (default `shop-order-events.fifo`;
//! dead letters go to `shop-order-events-dlq.fifo`). Both queues are
//! created when missing, the queue with a redrive policy to the other.

#[path = "shop/mod.rs"]
mod shop;

use std::str::FromStr;
use std::time::Duration;

use consumer::sqs::client::{ReceiveRequest, VisibilityEntry};
use consumer::sqs::{SqsClient, SqsPublisher, SqsSource, Topology};
use consumer::testing::{Faults, FaultyPublisher};
use consumer::{DeadLetter, Message, Outbox, OutboxRelay, Outgoing, PgStore, PgTx, Publisher};
use shop::Shop;

shop::shop_handlers!(PgTx, PgStore);

/// The service `main` runs: the outbox relay publishing through
/// `publisher`, and the router over `source`.
pub fn shop_service<P: Publisher>(
    pool: sqlx::PgPool,
    store: PgStore,
    source: SqsSource,
    outbox: Outbox,
    publisher: P,
) -> anyhow::Result<Shop> {
    let relay = OutboxRelay::new(pool, outbox, publisher).with_source("sqs-orders-example");
    let router = orders_router()?;
    Ok(shop::service(relay, source, store, router))
}

/// The letters of this run in the dead-letter queue, read and put back.
async fn read_dead_letters(
    client: &SqsClient,
    queue_url: &str,
    run: &str,
) -> anyhow::Result<Vec<DeadLetter>> {
    let api = client.api();
    let mut letters = Vec::new();
    let mut receipts = Vec::new();
    loop {
        let got = api
            .receive(ReceiveRequest {
                queue_url,
                max: 10,
                wait_seconds: 1,
                visibility_seconds: 30,
                attempt_id: None,
            })
            .await?;
        if got.is_empty() {
            break;
        }
        for m in got {
            let consumer::sqs::attributes::Unpacked {
                headers, payload, ..
            } = consumer::sqs::attributes::unpack(&m.body, &m.attributes);
            let message = Message {
                key: m.group_id().map(str::to_owned),
                headers,
                payload,
            };
            if let Some(letter) = DeadLetter::from_message(&message)
                && letter.key.as_deref().is_some_and(|k| k.ends_with(run))
            {
                letters.push(letter);
            }
            receipts.push(m.receipt_handle);
        }
    }
    for chunk in receipts.chunks(10) {
        let entries = chunk
            .iter()
            .enumerate()
            .map(|(i, r)| VisibilityEntry {
                id: i.to_string(),
                receipt_handle: r.clone(),
                seconds: 0,
            })
            .collect();
        api.change_visibility_batch(queue_url, entries).await?;
    }
    Ok(letters)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_owned());
    let endpoint = env("SQS_ENDPOINT", "http://127.0.0.1:4566");
    let database_url = env("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test");
    let queue = env("SQS_QUEUE", "shop-order-events.fifo");
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let client = if endpoint == "aws" {
        SqsClient::from_env().await
    } else {
        SqsClient::local(&endpoint)
    };
    let topology = Topology::new(&queue)?;
    let (_, dead_letter_url) = topology.declare(&client).await.map_err(|e| {
        anyhow::anyhow!(
            "{e} (is an SQS emulator running at {endpoint}? scripts/services sqs starts moto there)"
        )
    })?;

    // A schema of its own, so the store's and the outbox's tables of this
    // example meet nobody else's.
    let admin = sqlx::PgPool::connect(&database_url).await?;
    sqlx::query("CREATE SCHEMA IF NOT EXISTS shop_sqs")
        .execute(&admin)
        .await?;
    admin.close().await;
    let options = sqlx::postgres::PgConnectOptions::from_str(&database_url)?
        .options([("search_path", "shop_sqs")]);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await?;
    let store = PgStore::new(pool.clone());
    store.migrate().await?;
    sqlx::query(shop::HISTORY_DDL).execute(&pool).await?;

    let outbox = shop::outbox(&queue);
    shop::place_orders(&pool, &outbox, &run).await?;
    let publisher = SqsPublisher::builder(client.clone()).connect().await?;
    let legacy: Vec<Outgoing> = shop::legacy_messages(&run)?
        .into_iter()
        .map(|message| Outgoing {
            destination: queue.clone(),
            message,
        })
        .collect();
    for r in publisher.publish(&legacy).await {
        r?;
    }
    // The relay's publisher sends its first event twice, as after a lost
    // confirm: SQS's deduplication (the event id) stores it once.
    let faults = Faults::new();
    faults.duplicate_next_publishes(1);
    let source = SqsSource::builder(client.clone(), topology)
        .with_wait_time(Duration::from_secs(1))
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

    // 15 events (the one sent twice stored once) and 2 legacy messages:
    // 17 deliveries to settle, as processed, duplicates or dead letters.
    let s = shop::run_until_settled(
        service,
        &stats,
        17,
        Duration::from_secs(120),
        &format!("SQS at {endpoint} serving {queue}"),
    )
    .await?;

    print!(
        "{}",
        shop::report(
            &format!(
                "sqs_orders: the `shop` service on SQS at {endpoint} and PostgreSQL\n\n  queue {queue}"
            ),
            relay_stats.snapshot().published,
            &s,
            &shop::history(&pool, &run).await?,
            &read_dead_letters(&client, &dead_letter_url, &run).await?,
        )
    );
    Ok(())
}
