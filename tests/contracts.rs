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
//! the read one.

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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use consumer::MemoryBroker;
use consumer::asyncapi::{Contract, PayloadSchema, PayloadType};
use consumer::compat::{Mode, SnapshotDir, compare};
use serde_json::Value;

/// The mode a team that never breaks a consumer, old or new, checks in.
const MODE: Mode = Mode::FullTransitive;

/// What a check of one service's schemas against its snapshots found.
#[derive(Debug, Default)]
struct Outcome {
    /// Snapshots written (with `UPDATE_CONTRACTS=1`).
    recorded: Vec<PathBuf>,
    /// Everything that fails the check, one paragraph each.
    failures: Vec<String>,
}

/// Checks `schemas` against the snapshots under `root` (`deserialize/` and
/// `serialize/`), recording compatible changes when `update`.
fn check_contracts(root: &Path, schemas: &[PayloadSchema], update: bool) -> Outcome {
    let mut outcome = Outcome::default();
    for s in schemas {
        let dir = SnapshotDir::new(root.join(s.contract.dir_name()));
        let report = match dir.check(&s.subject, &s.schema, MODE) {
            Ok(report) => report,
            Err(e) => {
                outcome
                    .failures
                    .push(format!("{} {}: {e}", s.contract, s.subject));
                continue;
            }
        };
        if !report.compatible {
            outcome.failures.push(format!(
                "{} schema of {} ({}) breaks its snapshots in {}:\n{report}",
                s.contract,
                s.subject,
                s.type_name,
                dir.root().display()
            ));
            continue;
        }
        let latest = dir
            .history(&s.subject)
            .ok()
            .and_then(|h| h.latest().map(|l| l.schema.clone()));
        if latest.as_ref() == Some(&s.schema) {
            continue;
        }
        if update {
            match dir.record(&s.subject, &s.schema) {
                Ok(Some(path)) => outcome.recorded.push(path),
                Ok(None) => {}
                Err(e) => outcome.failures.push(e.to_string()),
            }
        } else if latest.is_none() {
            outcome.failures.push(format!(
                "{} schema of {} has no snapshot under {}: run UPDATE_CONTRACTS=1 cargo test --test contracts \
                 and commit its v1.json",
                s.contract,
                s.subject,
                dir.root().display()
            ));
        } else {
            outcome.failures.push(format!(
                "{} schema of {} changed compatibly but is not recorded under {}: \
                 run UPDATE_CONTRACTS=1 cargo test --test contracts and commit the new snapshot\n{report:#}",
                s.contract,
                s.subject,
                dir.root().display()
            ));
        }
    }
    // A snapshot with no current schema: a contract dropped unnoticed.
    for contract in Contract::ALL {
        let dir = SnapshotDir::new(root.join(contract.dir_name()));
        match dir.event_types() {
            Ok(types) => {
                for t in types {
                    if !schemas
                        .iter()
                        .any(|s| s.contract == contract && s.subject == t)
                    {
                        outcome.failures.push(format!(
                            "{}/{t} has snapshots but the service no longer has a {contract} schema for `{t}`: \
                             if consumers (or producers) of it are gone, delete the directory",
                            dir.root().display()
                        ));
                    }
                }
            }
            Err(e) => outcome.failures.push(e.to_string()),
        }
    }
    outcome.failures.extend(producer_against_consumer(schemas));
    outcome
}

/// Each event type both written and read: what the outbox writes must be
/// readable by what the handlers read it as.
fn producer_against_consumer(schemas: &[PayloadSchema]) -> Vec<String> {
    let mut by_subject: BTreeMap<&str, BTreeMap<Contract, &Value>> = BTreeMap::new();
    for s in schemas {
        by_subject
            .entry(&s.subject)
            .or_default()
            .insert(s.contract, &s.schema);
    }
    let mut failures = Vec::new();
    for (subject, contracts) in by_subject {
        let (Some(written), Some(read)) = (
            contracts.get(&Contract::Serialize),
            contracts.get(&Contract::Deserialize),
        ) else {
            continue;
        };
        match compare(written, read) {
            Ok(findings) => {
                let breaking: Vec<String> = findings
                    .iter()
                    .filter(|f| !f.is_compatible())
                    .map(ToString::to_string)
                    .collect();
                if !breaking.is_empty() {
                    failures.push(format!(
                        "{subject}: handlers cannot read what the outbox writes:\n    {}",
                        breaking.join("\n    ")
                    ));
                }
            }
            Err(e) => failures.push(format!("{subject}: {e}")),
        }
    }
    failures
}

/// Checks a service's schemas against its committed snapshots.
fn assert_contracts_hold(dir: &str, schemas: &[PayloadSchema]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let update = std::env::var_os("UPDATE_CONTRACTS").is_some();
    let outcome = check_contracts(&root, schemas, update);
    for path in &outcome.recorded {
        eprintln!("recorded {}", path.display());
    }
    assert!(
        outcome.failures.is_empty(),
        "{}",
        outcome.failures.join("\n\n")
    );
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
        schema: payload
            .schema(Contract::Deserialize)
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
    let first = check_contracts(&root, &[read_schema(v1)], true);
    assert!(first.failures.is_empty(), "{:?}", first.failures);
    assert_eq!(first.recorded.len(), 1, "v1 is recorded");
    let second = check_contracts(&root, &[read_schema(v2)], true);
    assert!(second.recorded.is_empty(), "a breaking version is recorded");
    let history = SnapshotDir::new(root.join("deserialize"))
        .history("OrderPlaced")
        .expect("the history");
    assert_eq!(history.snapshots.len(), 1, "only v1 is on disk");
    let _ = std::fs::remove_dir_all(&root);
    second.failures.join("\n")
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
