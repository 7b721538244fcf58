//! `consumer schema check | record`, the real binary on temporary
//! directories of real `schemars` output (`write_current`, as a team's build
//! writes it): 0 when compatible, 8 and the rule when a change breaks, JSON
//! that parses, errors that name what to fix. No service is needed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use consumer::contracts::asyncapi::{Contract, PayloadSchema, write_current};
use consumer::describe::PayloadType;
use serde_json::Value;

/// The first release of the event.
mod v1 {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    pub struct OrderPlaced {
        pub order_id: String,
    }
}

/// Consumers now require a coupon, which events already written lack.
mod v2_breaking {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    pub struct OrderPlaced {
        pub order_id: String,
        pub coupon: String,
    }
}

/// Consumers now also read a null id: a widening, backward compatible.
mod v2_widened {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    pub struct OrderPlaced {
        pub order_id: Option<String>,
    }
}

/// A scratch directory with `current/` holding `payload`'s schema as
/// `OrderPlaced.json`.
struct Scratch {
    root: PathBuf,
}

impl Scratch {
    fn new() -> Self {
        let root = std::env::temp_dir().join(format!(
            "consumer-cli-schema-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        std::fs::create_dir_all(&root).expect("scratch dir");
        Scratch { root }
    }

    fn snapshots(&self) -> PathBuf {
        self.root.join("contracts")
    }

    /// Writes the current schema of `payload` and returns its directory.
    fn current(&self, payload: PayloadType) -> PathBuf {
        let schema = PayloadSchema {
            subject: "OrderPlaced".to_owned(),
            contract: Contract::Deserialize,
            type_name: payload.type_name(),
            schema: Contract::Deserialize
                .schema_of(&payload)
                .expect("the type derives JsonSchema"),
        };
        let dir = self.root.join("current");
        write_current(&dir, &[schema]).expect("write the current schema");
        dir.join("deserialize")
    }

    fn run(&self, args: &[&str], current: &Path) -> Output {
        Command::new(env!("CARGO_BIN_EXE_consumer"))
            .args(args)
            .arg("--snapshots")
            .arg(self.snapshots())
            .arg("--current")
            .arg(current)
            .output()
            .expect("the consumer binary runs")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn recorded_v1(scratch: &Scratch) {
    let current = scratch.current(PayloadType::of::<v1::OrderPlaced>());
    let out = scratch.run(&["schema", "record"], &current);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(scratch.snapshots().join("OrderPlaced/v1.json").is_file());
}

#[test]
fn an_unchanged_schema_is_compatible_and_exits_0() {
    let scratch = Scratch::new();
    recorded_v1(&scratch);
    let current = scratch.current(PayloadType::of::<v1::OrderPlaced>());
    let out = scratch.run(&["schema", "check"], &current);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("OrderPlaced: FULL_TRANSITIVE: compatible"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn a_breaking_change_exits_8_with_the_rule_and_path() {
    let scratch = Scratch::new();
    recorded_v1(&scratch);
    let current = scratch.current(PayloadType::of::<v2_breaking::OrderPlaced>());
    let out = scratch.run(&["schema", "check"], &current);
    assert_eq!(out.status.code(), Some(8), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("OrderPlaced: FULL_TRANSITIVE: INCOMPATIBLE"),
        "{stdout}"
    );
    assert!(
        stdout.contains("PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL at #/properties/coupon"),
        "{stdout}"
    );
    assert!(
        text(&out.stderr).contains("OrderPlaced"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn json_output_parses_and_carries_the_findings() {
    let scratch = Scratch::new();
    recorded_v1(&scratch);
    let current = scratch.current(PayloadType::of::<v2_breaking::OrderPlaced>());
    let out = scratch.run(
        &["schema", "check", "--json", "--mode", "backward"],
        &current,
    );
    assert_eq!(out.status.code(), Some(8), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(report["compatible"], false);
    assert_eq!(report["mode"], "BACKWARD");
    let finding = &report["reports"][0]["comparisons"][0]["findings"][0];
    assert_eq!(finding["rule"], "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL");
    assert_eq!(finding["path"], "/properties/coupon");
}

#[test]
fn record_adds_the_next_version_and_never_a_breaking_one() {
    let scratch = Scratch::new();
    recorded_v1(&scratch);
    let v1_path = scratch.snapshots().join("OrderPlaced/v1.json");
    let v1_text = std::fs::read_to_string(&v1_path).expect("v1");

    let breaking = scratch.current(PayloadType::of::<v2_breaking::OrderPlaced>());
    let out = scratch.run(&["schema", "record"], &breaking);
    assert_eq!(out.status.code(), Some(8), "{}", text(&out.stderr));
    assert!(!scratch.snapshots().join("OrderPlaced/v2.json").exists());

    let widened = scratch.current(PayloadType::of::<v2_widened::OrderPlaced>());
    let out = scratch.run(&["schema", "record", "--mode", "backward"], &widened);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("recorded"),
        "{}",
        text(&out.stdout)
    );
    assert!(scratch.snapshots().join("OrderPlaced/v2.json").is_file());
    assert_eq!(
        std::fs::read_to_string(&v1_path).expect("v1"),
        v1_text,
        "v1 is never rewritten"
    );
}

#[test]
fn errors_name_what_to_fix_and_exit_2() {
    let scratch = Scratch::new();
    let current = scratch.current(PayloadType::of::<v1::OrderPlaced>());

    let out = scratch.run(&["schema", "check"], &current);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no snapshot directory at"),
        "{}",
        text(&out.stderr)
    );

    recorded_v1(&scratch);
    let out = scratch.run(&["schema", "check", "--type", "OrderShipped"], &current);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("unknown event type `OrderShipped`"),
        "{}",
        text(&out.stderr)
    );

    std::fs::write(current.join("OrderPlaced.json"), "{ not json").expect("write");
    let out = scratch.run(&["schema", "check"], &current);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("OrderPlaced.json is not a JSON document"),
        "{stderr}"
    );

    let contracts_root = current.parent().expect("current/").to_owned();
    let out = scratch.run(&["schema", "check"], &contracts_root);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("one directory per contract"),
        "{}",
        text(&out.stderr)
    );

    let out = scratch.run(&["schema", "check", "--mode", "sideways"], &current);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("unknown compatibility mode `sideways`"),
        "{}",
        text(&out.stderr)
    );
}
