//! Schema-evolution checks: whether consumers keep reading a message type's
//! payloads as its JSON Schema changes, following Confluent Schema
//! Registry's JSON Schema compatibility rules.
//!
//! The primitive is [`compare`]: the schema data is **written** with (a
//! producer's `Serialize` schema, or a committed snapshot) against the
//! schema it is **read** with (a consumer's `Deserialize` schema), listing
//! every [`Finding`] under its [`Rule`] and JSON pointer. Modes are defined
//! on top of it ([`Mode`]): `BACKWARD` compares the latest snapshot as the
//! writer with the current schema as the reader, `FORWARD` the other way,
//! `FULL` both, and the `_TRANSITIVE` forms every committed snapshot rather
//! than only the latest. [`SnapshotDir`] reads the committed history
//! (`contracts/<event-type>/v1.json, v2.json, ...`) and checks against it;
//! [`Contracts`] checks a whole service's
//! [`payload_schemas`](crate::ServiceContracts::payload_schemas), one snapshot
//! directory per serde contract, as a CI test does.
//!
//! Content models matter as they do for serde: a struct reads unknown
//! fields and ignores them (an *open* model, no `additionalProperties`)
//! unless it says `#[serde(deny_unknown_fields)]`, which `schemars` emits as
//! `additionalProperties: false` (a *closed* model). As in Confluent's
//! rules, adding a property to an open model breaks backward compatibility
//! (old data may already carry that name with another type), adding a
//! required one to a closed model does too, and removing a property from a
//! closed model breaks it; widening a type or an `enum` does not.
//!
//! ```
//! use consumer_contracts::compat::{Mode, Rule, compare};
//! use serde_json::json;
//!
//! let v1 = json!({"type": "object", "properties": {"id": {"type": "string"}},
//!                 "additionalProperties": false});
//! let v2 = json!({"type": "object", "properties": {"id": {"type": "string"},
//!                                                  "coupon": {"type": "string"}},
//!                 "required": ["coupon"], "additionalProperties": false});
//! // v2's consumers cannot read v1's data: it has no coupon.
//! let findings = compare(&v1, &v2)?;
//! assert_eq!(findings[0].rule, Rule::RequiredPropertyAddedToUnopenContentModel);
//! assert_eq!(findings[0].path, "/properties/coupon");
//!
//! let report = Mode::Backward.check("com.example.OrderPlaced", &v2, [("v1", &v1)])?;
//! assert!(!report.compatible);
//! println!("{report}");
//! # Ok::<(), consumer_contracts::compat::CompatError>(())
//! ```

mod contracts;
mod mode;
mod report;
mod rule;
mod snapshot;
mod walk;

use std::path::PathBuf;

pub use contracts::{ContractProblem, Contracts, ContractsOutcome};
pub use mode::{Direction, Mode, UnknownMode};
pub use report::{Comparison, Finding, Report};
pub use rule::Rule;
pub use snapshot::{History, Snapshot, SnapshotDir};
pub use walk::{compare, is_compatible};

/// What can stop a compatibility check.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompatError {
    /// A `$ref` could not be resolved.
    #[error("the {side}'s schema has a $ref `{reference}` that cannot be followed: {reason}")]
    Reference {
        /// `writer` or `reader`.
        side: &'static str,
        /// The reference as written.
        reference: String,
        /// Why it cannot be followed.
        reason: &'static str,
    },
    /// A snapshot file or directory could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A snapshot file is not JSON.
    #[error("{} is not a JSON document: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// serde's error.
        #[source]
        source: serde_json::Error,
    },
    /// An event type that cannot name a snapshot directory.
    #[error("event type `{event_type}` cannot name a snapshot directory: {reason}")]
    EventType {
        /// The name given.
        event_type: String,
        /// Why not.
        reason: &'static str,
    },
    /// A `.json` file in a type's directory is not named `vN.json`.
    #[error(
        "{} is not a snapshot name: snapshots are named v1.json, v2.json, ... (rename it or move it out)",
        path.display()
    )]
    SnapshotName {
        /// The file.
        path: PathBuf,
    },
    /// The numbers of a type's snapshots have a gap.
    #[error(
        "the snapshots of `{event_type}` skip v{version}.json: a transitive check would miss it; restore it from history"
    )]
    MissingVersion {
        /// The event type.
        event_type: String,
        /// The first missing number.
        version: u32,
    },
}
