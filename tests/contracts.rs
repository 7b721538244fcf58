//! Schema evolution in CI: every example's payload schemas
//! (`Service::payload_schemas`) are checked in FULL_TRANSITIVE against the
//! snapshots committed under `examples/contracts/<example>/` (and
//! `tests/contracts/fixture/` for the types that broke other generators),
//! one directory per contract (`deserialize/`, `serialize/`), each laid
//! out as `compat::SnapshotDir` reads it. A change that breaks a consumer
//! fails with the checker's report; a compatible change fails until it is
//! recorded with `UPDATE_CONTRACTS=1 cargo test --test contracts`, which
//! adds the next `vN.json` and never rewrites an older one. Where an event
//! type is both written and read, the written schema must be readable by
//! the read one. All of it is `compat::Contracts::verify`, which a team's
//! own test calls the same way.

// Each example carries the shop module, as each is its own binary.
#![allow(clippy::duplicate_mod)]

#[path = "asyncapi/fixture.rs"]
mod fixture;
#[path = "../examples/outbox_orders.rs"]
#[allow(dead_code, unreachable_pub)]
mod outbox_orders;
#[path = "../examples/quickstart.rs"]
#[allow(dead_code, unreachable_pub)]
mod quickstart;

use std::path::Path;

use consumer::MemoryBroker;
use consumer::contracts::ServiceContracts;
use consumer::contracts::asyncapi::{Contract, PayloadSchema};
use consumer::contracts::compat::{Contracts, Mode, SnapshotDir};
use consumer::describe::PayloadType;

/// Checks a service's schemas against its committed snapshots.
fn assert_contracts_hold(dir: &str, schemas: &[PayloadSchema]) {
    let contracts = Contracts::new(Path::new(env!("CARGO_MANIFEST_DIR")).join(dir));
    let update = std::env::var_os("UPDATE_CONTRACTS").is_some();
    let outcome = contracts.verify(schemas, update);
    for path in &outcome.recorded {
        eprintln!("recorded {}", path.display());
    }
    assert!(outcome.is_ok(), "{outcome}");
}

fn lazy_sqlite() -> sqlx::SqlitePool {
    sqlx::sqlite::SqlitePoolOptions::new()
        .connect_lazy("sqlite::memory:")
        .expect("an in-memory SQLite pool")
}

#[tokio::test]
async fn the_quickstart_schemas_are_full_transitive_compatible_with_their_snapshots() {
    let pool = lazy_sqlite();
    let broker = MemoryBroker::new(4);
    let shop = quickstart::shop_service(
        pool.clone(),
        consumer::SqliteStore::new(pool),
        &broker,
        broker.clone(),
    )
    .expect("the quickstart's service");
    let schemas = shop.service.payload_schemas().expect("the schemas");
    assert_contracts_hold("examples/contracts/quickstart", &schemas);
}

#[tokio::test]
async fn the_outbox_example_schemas_are_full_transitive_compatible_with_their_snapshots() {
    let pool = lazy_sqlite();
    let schemas = outbox_orders::orders_service(
        pool.clone(),
        consumer::SqliteStore::new(pool),
        &MemoryBroker::new(4),
    )
    .payload_schemas()
    .expect("the schemas");
    assert_contracts_hold("examples/contracts/outbox_orders", &schemas);
}

#[tokio::test]
async fn the_fixture_schemas_are_full_transitive_compatible_with_their_snapshots() {
    let schemas = fixture::service(lazy_sqlite())
        .expect("the fixture service")
        .payload_schemas()
        .expect("the schemas");
    assert_contracts_hold("tests/contracts/fixture", &schemas);
}

/// The first release of an event, and a second that adds a field its
/// consumers require: events already written have no coupon. In an open
/// content model (serde's default) and a closed one (`deny_unknown_fields`).
mod breaking {
    pub mod open {
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        #[allow(dead_code)]
        pub struct V1 {
            pub order_id: String,
        }

        #[derive(serde::Deserialize, schemars::JsonSchema)]
        #[allow(dead_code)]
        pub struct V2 {
            pub order_id: String,
            pub coupon: String,
        }
    }
    pub mod closed {
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        pub struct V1 {
            pub order_id: String,
        }

        #[derive(serde::Deserialize, schemars::JsonSchema)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        pub struct V2 {
            pub order_id: String,
            pub coupon: String,
        }
    }
}

fn read_schema(payload: PayloadType) -> PayloadSchema {
    PayloadSchema {
        subject: "OrderPlaced".to_owned(),
        contract: Contract::Deserialize,
        type_name: payload.type_name(),
        schema: Contract::Deserialize
            .schema_of(&payload)
            .expect("the type derives JsonSchema"),
    }
}

/// Records `v1`, then checks `v2`: the failure's text, and that nothing
/// but v1 is on disk.
fn second_release_fails(v1: PayloadType, v2: PayloadType) -> String {
    let root = std::env::temp_dir().join(format!(
        "consumer-contracts-breaking-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4()
    ));
    let contracts = Contracts::new(&root);
    assert_eq!(contracts.mode(), Mode::FullTransitive);
    let first = contracts.verify(&[read_schema(v1)], true);
    assert!(first.is_ok(), "{first}");
    assert_eq!(first.recorded.len(), 1, "v1 is recorded");
    let second = contracts.verify(&[read_schema(v2)], true);
    assert!(second.recorded.is_empty(), "a breaking version is recorded");
    let history = SnapshotDir::new(root.join("deserialize"))
        .history("OrderPlaced")
        .expect("the history");
    assert_eq!(history.snapshots.len(), 1, "only v1 is on disk");
    let _ = std::fs::remove_dir_all(&root);
    assert!(!second.is_ok());
    second.to_string()
}

#[test]
fn a_required_field_added_to_an_open_model_is_reported_with_its_rule_and_path() {
    let text = second_release_fails(
        PayloadType::of::<breaking::open::V1>(),
        PayloadType::of::<breaking::open::V2>(),
    );
    assert!(
        text.contains("OrderPlaced: FULL_TRANSITIVE: INCOMPATIBLE"),
        "{text}"
    );
    assert!(
        text.contains("backward against v1: BREAKS"),
        "new consumers cannot read old events: {text}"
    );
    assert!(
        text.contains("PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL at #/properties/coupon"),
        "{text}"
    );
}

#[test]
fn a_required_field_added_to_a_closed_model_is_reported_with_its_rule_and_path() {
    let text = second_release_fails(
        PayloadType::of::<breaking::closed::V1>(),
        PayloadType::of::<breaking::closed::V2>(),
    );
    assert!(
        text.contains("OrderPlaced: FULL_TRANSITIVE: INCOMPATIBLE"),
        "{text}"
    );
    assert!(
        text.contains("REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL at #/properties/coupon"),
        "{text}"
    );
}
