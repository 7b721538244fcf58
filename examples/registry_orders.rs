//! Orders as Avro records in the Confluent wire format, against a real
//! schema registry: a writer registers version 1 of
//! `com.example.orders.OrderPlaced` and writes with it, the subject is set
//! to BACKWARD, version 2 (a `currency` field with a default) is checked
//! and registered, more orders are written with it; a handler written for
//! version 1 reads them all (`#[handler(codec = avro)]`), and a record no
//! schema resolves is dead-lettered with the schema id and the reason. An
//! incompatible version 3 is refused by the registry.
//!
//! ```sh
//! scripts/services registry   # Apicurio Registry on 127.0.0.1:8081
//! cargo run --example registry_orders --features registry
//! ```
//!
//! Environment: `REGISTRY_URL` (default
//! `http://127.0.0.1:8081/apis/ccompat/v7`). The broker is the memory
//! broker and the store SQLite in memory: only the registry is a service.

use consumer::codec::Avro;
use consumer::codec::avro::AvroEncoder;
use consumer::codec::registry::{Compatibility, RegistryClient, RegistryConfig, Schema};
use consumer::memory::MemoryBroker;
use consumer::{Consumer, Message, SqliteStore, SqliteTx, handler};

/// The reader's type: version 1 of the schema, derived.
#[derive(Debug, serde::Serialize, serde::Deserialize, apache_avro::AvroSchema)]
#[avro(namespace = "com.example.orders")]
struct OrderPlaced {
    id: String,
    amount: i64,
}

const V1: &str = r#"{"type": "record", "name": "OrderPlaced", "namespace": "com.example.orders",
  "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "long"}]}"#;
const V2: &str = r#"{"type": "record", "name": "OrderPlaced", "namespace": "com.example.orders",
  "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "long"},
             {"name": "currency", "type": "string", "default": "EUR"}]}"#;
/// `amount` becomes a string: old records cannot be read with it.
const V3: &str = r#"{"type": "record", "name": "OrderPlaced", "namespace": "com.example.orders",
  "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "string"}]}"#;

#[derive(serde::Serialize)]
struct OrderV2 {
    id: String,
    amount: i64,
    currency: String,
}

#[derive(Debug, thiserror::Error)]
#[error("the ledger refused the order")]
struct Refused;

#[handler(codec = avro, idempotency_key = order.id)]
async fn record(order: OrderPlaced, tx: &mut SqliteTx) -> Result<(), Refused> {
    sqlx::query("INSERT INTO ledger (id, amount) VALUES (?, ?)")
        .bind(&order.id)
        .bind(order.amount)
        .execute(&mut **tx)
        .await
        .map_err(|_| Refused)?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REGISTRY_URL")
        .unwrap_or_else(|_| "http://127.0.0.1:8081/apis/ccompat/v7".to_owned());
    let registry = RegistryClient::new(RegistryConfig::new(&url))?;
    // A subject of this run's own: the registry may be shared.
    let subject = format!("orders-{}-value", uuid::Uuid::new_v4().simple());

    // Version 1, registered by the writer (auto-registration is for
    // development; production registers in a deploy step).
    let v1 = AvroEncoder::new(registry.clone(), &subject, V1)?.with_auto_register(true);
    let broker = MemoryBroker::new(2);
    for n in 1..=3 {
        let order = OrderPlaced {
            id: format!("o-{n}"),
            amount: n * 10,
        };
        publish(&broker, &order.id, v1.encode(&order).await?).await?;
    }

    // Version 2 under BACKWARD: checked, then registered.
    registry
        .set_compatibility(&subject, Compatibility::Backward)
        .await?;
    let check = registry
        .check_compatibility(&subject, &Schema::avro(V2))
        .await?;
    println!(
        "version 2 compatible with the latest: {}",
        check.is_compatible
    );
    let v2 = AvroEncoder::new(registry.clone(), &subject, V2)?.with_auto_register(true);
    for n in 4..=5 {
        let order = OrderV2 {
            id: format!("o-{n}"),
            amount: n * 10,
            currency: "USD".into(),
        };
        publish(&broker, &order.id, v2.encode(&order).await?).await?;
    }
    // Version 3 is refused by the registry.
    let v3 = registry
        .check_compatibility(&subject, &Schema::avro(V3))
        .await?;
    println!("version 3 compatible with the latest: {}", v3.is_compatible);

    // A record framed with an id the registry never gave.
    publish(
        &broker,
        "o-bad",
        consumer::codec::wire::encode_frame(2_000_000_000, b"\x02"),
    )
    .await?;

    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect("sqlite::memory:")
        .await?;
    let store = SqliteStore::new(pool.clone());
    store.migrate().await?;
    sqlx::query("CREATE TABLE ledger (id TEXT PRIMARY KEY, amount INTEGER NOT NULL)")
        .execute(&pool)
        .await?;
    let consumer =
        Consumer::new(broker.source("orders"), store, record).with_codec(Avro::new(registry));
    let stats = consumer.stats();
    let done = stats.clone();
    consumer
        .run_until(async move {
            done.wait_for(|s| s.processed + s.dead_poison == 6).await;
        })
        .await?;

    let rows: Vec<(String, i64)> = sqlx::query_as("SELECT id, amount FROM ledger ORDER BY id")
        .fetch_all(&pool)
        .await?;
    println!("ledger (written with versions 1 and 2, read as version 1): {rows:?}");
    for letter in broker.dead_letters("orders") {
        let reason = letter
            .headers
            .get("x-dlq-causes")
            .ok()
            .flatten()
            .unwrap_or_default();
        println!("dead letter: {reason}");
    }
    let s = stats.snapshot();
    println!("processed {}, poison {}", s.processed, s.dead_poison);
    Ok(())
}

async fn publish(
    broker: &MemoryBroker,
    key: &str,
    payload: Vec<u8>,
) -> Result<(), Box<dyn std::error::Error>> {
    let message = Message::raw(payload)
        .with_key(key)
        .with_header("content-type", "application/avro");
    broker.publish("orders", message).await?;
    Ok(())
}
