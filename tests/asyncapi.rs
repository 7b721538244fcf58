//! The AsyncAPI documents the services generate, checked by the official
//! parser (`@asyncapi/parser` 3.6.3 on node, through
//! scripts/asyncapi_validate.mjs; `scripts/tools asyncapi-parser` installs
//! it): every example's document and a fixture of the types that broke
//! other generators pass with zero diagnostics of any severity, and each
//! equals its committed golden file (`UPDATE_GOLDEN=1` rewrites them). A
//! mutated payload schema makes the parser fail, so payloads are checked.

// Each example carries the shop module, as each is its own binary.
#![allow(clippy::duplicate_mod)]

#[cfg(feature = "amqp")]
#[path = "../examples/amqp_orders.rs"]
#[allow(dead_code, unreachable_pub)]
mod amqp_orders;
#[path = "asyncapi/fixture.rs"]
mod fixture;
#[cfg(feature = "kafka")]
#[path = "../examples/kafka_orders.rs"]
#[allow(dead_code, unreachable_pub)]
mod kafka_orders;
#[path = "../examples/outbox_orders.rs"]
#[allow(dead_code, unreachable_pub)]
mod outbox_orders;
#[path = "../examples/quickstart.rs"]
#[allow(dead_code, unreachable_pub)]
mod quickstart;
#[path = "../examples/saga.rs"]
#[allow(dead_code, unreachable_pub)]
mod saga;
mod tools;

use std::path::{Path, PathBuf};
use std::process::Command;

use consumer::MemoryBroker;
use consumer::contracts::ServiceContracts;
use serde_json::Value;

/// Every diagnostic the parser reports on `document`.
fn diagnostics(name: &str, document: &Value) -> Vec<Value> {
    let dir = tools::asyncapi_parser_dir();
    let file = std::env::temp_dir().join(format!(
        "consumer-asyncapi-{}-{name}.json",
        std::process::id()
    ));
    std::fs::write(&file, serde_json::to_string_pretty(document).expect("json"))
        .expect("write the document");
    let out = Command::new("node")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/asyncapi_validate.mjs"))
        .arg(&file)
        .env("ASYNCAPI_PARSER_DIR", &dir)
        .output()
        .expect("run node");
    let _ = std::fs::remove_file(&file);
    assert!(
        out.status.success(),
        "scripts/asyncapi_validate.mjs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("the validator prints JSON");
    report[file.to_string_lossy().as_ref()]
        .as_array()
        .cloned()
        .expect("one list of diagnostics per file")
}

/// Checks `document` against its golden file, or rewrites the file with
/// `UPDATE_GOLDEN=1`.
fn matches_golden(path: &str, document: &Value) {
    let path: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    let text = serde_json::to_string_pretty(document).expect("json") + "\n";
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &text).expect("write the golden file");
        return;
    }
    let golden = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "golden file {} cannot be read ({e}): run UPDATE_GOLDEN=1 cargo test --test asyncapi",
            path.display()
        )
    });
    assert!(
        golden == text,
        "the document differs from {}: review the change, then run UPDATE_GOLDEN=1 cargo test --test asyncapi\n--- generated ---\n{text}",
        path.display()
    );
}

/// No reference into `definitions` or `$defs` is left, and each resolves.
fn assert_references_resolve(document: &Value) {
    fn walk(v: &Value, root: &Value) {
        match v {
            Value::Object(map) => {
                for (k, v) in map {
                    if k == "$ref"
                        && let Some(r) = v.as_str()
                    {
                        assert!(
                            !r.contains("/definitions/") && !r.contains("$defs"),
                            "{r} is left"
                        );
                        let target = r.strip_prefix('#').and_then(|p| root.pointer(p));
                        assert!(target.is_some(), "{r} does not resolve");
                    } else {
                        walk(v, root);
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, root)),
            _ => {}
        }
    }
    walk(document, document);
}

fn lazy_sqlite() -> sqlx::SqlitePool {
    sqlx::sqlite::SqlitePoolOptions::new()
        .connect_lazy("sqlite::memory:")
        .expect("an in-memory SQLite pool")
}

fn quickstart_document() -> Value {
    let pool = lazy_sqlite();
    let broker = MemoryBroker::new(4);
    let shop = quickstart::shop_service(
        pool.clone(),
        consumer::SqliteStore::new(pool),
        &broker,
        broker.clone(),
    )
    .expect("the quickstart's service");
    shop.service.asyncapi().expect("the quickstart's document")
}

#[tokio::test]
async fn the_quickstart_document_has_no_diagnostics_and_matches_its_golden_file() {
    let document = quickstart_document();
    assert_references_resolve(&document);
    let found = diagnostics("quickstart", &document);
    assert!(found.is_empty(), "the parser reports: {found:#?}");
    matches_golden("examples/asyncapi/quickstart.json", &document);
}

#[tokio::test]
async fn the_outbox_example_document_has_no_diagnostics_and_matches_its_golden_file() {
    let pool = lazy_sqlite();
    let document = outbox_orders::orders_service(
        pool.clone(),
        consumer::SqliteStore::new(pool),
        &MemoryBroker::new(4),
    )
    .asyncapi()
    .expect("the outbox example's document");
    assert_references_resolve(&document);
    let found = diagnostics("outbox_orders", &document);
    assert!(found.is_empty(), "the parser reports: {found:#?}");
    matches_golden("examples/asyncapi/outbox_orders.json", &document);
}

#[tokio::test]
async fn the_types_that_broke_other_generators_have_no_diagnostics() {
    let document = fixture::service(lazy_sqlite())
        .expect("the fixture service")
        .asyncapi()
        .expect("the fixture's document");
    assert_references_resolve(&document);
    let found = diagnostics("fixture", &document);
    assert!(found.is_empty(), "the parser reports: {found:#?}");
    matches_golden("tests/asyncapi/fixture.json", &document);
}

/// A PostgreSQL pool that never connects: documents need no database.
#[cfg(any(feature = "kafka", feature = "amqp"))]
fn lazy_postgres() -> sqlx::PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .connect_lazy("postgres://postgres@127.0.0.1:5432/test")
        .expect("a lazy PostgreSQL pool")
}

/// The Kafka example's service as `main` builds it with its defaults
/// (topic `shop.order-events`, group `shop-example`). Its clients are
/// made, never used: no broker is reached.
#[cfg(feature = "kafka")]
#[tokio::test]
async fn the_kafka_example_document_has_no_diagnostics_and_matches_its_golden_file() {
    use consumer::kafka::{KafkaPublisher, KafkaSource, Topics};
    let brokers = "127.0.0.1:9";
    let topics = Topics::new("shop.order-events").expect("valid topics");
    let source = KafkaSource::builder(brokers, "shop-example", topics.clone())
        .connect()
        .await
        .expect("a Kafka consumer client");
    let publisher = KafkaPublisher::builder(brokers)
        .connect()
        .await
        .expect("a Kafka producer client");
    let pool = lazy_postgres();
    let shop = kafka_orders::shop_service(
        pool.clone(),
        consumer::PgStore::new(pool),
        source,
        kafka_orders::outbox(topics.topic()),
        publisher,
    )
    .expect("the Kafka example's service");
    let document = shop
        .service
        .asyncapi()
        .expect("the Kafka example's document");
    assert_references_resolve(&document);
    let found = diagnostics("kafka_orders", &document);
    assert!(found.is_empty(), "the parser reports: {found:#?}");
    matches_golden("examples/asyncapi/kafka_orders.json", &document);
}

/// The RabbitMQ example's service as `main` builds it with its defaults
/// (queue `shop.order-events`, classic). Nothing is connected.
#[cfg(feature = "amqp")]
#[tokio::test]
async fn the_amqp_example_document_has_no_diagnostics_and_matches_its_golden_file() {
    use consumer::amqp::{AmqpPublisher, AmqpSource, QueueType};
    let url = "amqp://guest:guest@127.0.0.1:5672/%2f";
    let topology =
        amqp_orders::topology("shop.order-events", QueueType::Classic).expect("a valid topology");
    let source = AmqpSource::builder(url, topology)
        .build()
        .expect("an AMQP source");
    let pool = lazy_postgres();
    let shop = amqp_orders::shop_service(
        pool.clone(),
        consumer::PgStore::new(pool),
        source,
        amqp_orders::outbox("/shop.order-events"),
        AmqpPublisher::builder(url).build(),
    )
    .expect("the RabbitMQ example's service");
    let document = shop
        .service
        .asyncapi()
        .expect("the RabbitMQ example's document");
    assert_references_resolve(&document);
    let found = diagnostics("amqp_orders", &document);
    assert!(found.is_empty(), "the parser reports: {found:#?}");
    matches_golden("examples/asyncapi/amqp_orders.json", &document);
}

/// The RabbitMQ example's service on a partitioned queue (8 partitions):
/// every channel names its partition as a parameter. Nothing is connected.
#[cfg(feature = "amqp")]
#[tokio::test]
async fn a_partitioned_amqp_document_has_no_diagnostics_and_matches_its_golden_file() {
    use consumer::amqp::{AmqpPublisher, PartitionedSource, PartitionedTopology};
    let url = "amqp://guest:guest@127.0.0.1:5672/%2f";
    let topology = PartitionedTopology::new("shop.order-events", 8).expect("a valid topology");
    let source = PartitionedSource::builder(url, topology.clone())
        .build()
        .expect("a partitioned source");
    let pool = lazy_postgres();
    let shop = amqp_orders::shop_service(
        pool.clone(),
        consumer::PgStore::new(pool),
        source,
        amqp_orders::outbox("/shop.order-events"),
        AmqpPublisher::builder(url)
            .with_partitions(topology)
            .build(),
    )
    .expect("the partitioned service");
    let document = shop
        .service
        .asyncapi()
        .expect("the partitioned service's document");
    assert_references_resolve(&document);
    let found = diagnostics("amqp_partitioned", &document);
    assert!(found.is_empty(), "the parser reports: {found:#?}");
    matches_golden("tests/asyncapi/amqp_partitioned.json", &document);
}

#[tokio::test]
async fn a_mutated_payload_schema_fails_the_parser() {
    let mut document = quickstart_document();
    let payload = document["components"]["schemas"]
        .get_mut("OrderPaid")
        .expect("OrderPaid's payload schema");
    payload["properties"]["cents"]["type"] = Value::String("integr".into());
    let found = diagnostics("mutated", &document);
    let errors: Vec<&Value> = found
        .iter()
        .filter(|d| {
            d["severity"] == "error"
                && d["path"]
                    .as_str()
                    .is_some_and(|p| p.starts_with("components/schemas/OrderPaid"))
        })
        .collect();
    assert!(
        !errors.is_empty(),
        "the parser should refuse the mutated payload schema, and reports: {found:#?}"
    );
}

/// A message type without `schemars::JsonSchema`.
#[derive(Debug, serde::Deserialize)]
struct Unschematic {
    #[allow(dead_code)]
    a: u32,
}

#[consumer::handler(event_type = "Unschematic")]
async fn takes_unschematic(_m: Unschematic) -> Result<(), fixture::Never> {
    Ok(())
}

#[tokio::test]
async fn a_message_type_without_a_schema_refuses_the_document_naming_it() {
    let broker = MemoryBroker::new(1);
    let service = consumer::Service::new("unschematic").consumer(
        "plain",
        consumer::Consumer::new(
            broker.source("plain"),
            consumer::MemoryStore::new(),
            takes_unschematic,
        ),
    );
    let err = service.asyncapi().expect_err("no schema for Unschematic");
    let text = err.to_string();
    assert!(
        text.contains(
            "handler `takes_unschematic` takes `asyncapi::Unschematic`, which has no JSON schema"
        ),
        "{text}"
    );
    let err = service
        .with_asyncapi_endpoint()
        .expect_err("the endpoint refuses to start without the document");
    assert!(err.to_string().contains("Unschematic"), "{err}");
}

/// The saga example's document lists what the saga consumes (a receive
/// operation for each event type it registered, its timeout included) and
/// what it sends (a send operation for each command it declared), and the
/// parser finds nothing wrong with it.
#[tokio::test]
async fn the_saga_example_document_lists_what_the_saga_consumes_and_sends() {
    let document = saga::shop_service(lazy_sqlite(), &MemoryBroker::new(4))
        .expect("the saga example's service")
        .asyncapi()
        .expect("the saga example's document");
    assert_references_resolve(&document);
    let found = diagnostics("saga", &document);
    assert!(found.is_empty(), "the parser reports: {found:#?}");
    let Some(operations) = document["operations"].as_object() else {
        panic!("no operations: {document:#}");
    };
    let with = |action: &str, message: &str| {
        operations.values().any(|op| {
            op["action"] == action
                && op["messages"].as_array().is_some_and(|ms| {
                    ms.iter().any(|m| {
                        m["$ref"]
                            .as_str()
                            .is_some_and(|r| r.ends_with(&format!("/{message}")))
                    })
                })
        })
    };
    for consumed in ["OrderPlaced", "PaymentCaptured", "PaymentTimedOut"] {
        assert!(with("receive", consumed), "the saga consumes {consumed}");
    }
    for sent in [
        "ChargePayment",
        "RefundPayment",
        "ReserveStock",
        "ShipOrder",
    ] {
        assert!(with("send", sent), "the saga sends {sent}");
    }
}
