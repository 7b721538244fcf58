//! A service's contracts against its committed snapshots, as one CI test
//! checks them: each payload schema ([`Service::payload_schemas`](crate::ServiceContracts::payload_schemas))
//! against its history, per contract, and what the outbox writes against
//! what the handlers read.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::mode::Mode;
use super::report::{Finding, Report};
use super::snapshot::SnapshotDir;
use super::{CompatError, compare};
use crate::asyncapi::{Contract, PayloadSchema};

/// A directory of a service's contracts: one [`SnapshotDir`] per contract,
/// `deserialize/` (what handlers read) and `serialize/` (what the outbox
/// writes), checked in one mode (`FULL_TRANSITIVE` unless told).
///
/// ```no_run
/// # fn service() -> consumer_core::Service { unimplemented!() }
/// use consumer_contracts::ServiceContracts;
/// use consumer_contracts::compat::Contracts;
///
/// // In a test: fails on a breaking change, and on a compatible one not yet
/// // recorded; `UPDATE_CONTRACTS=1` records it (the next vN.json).
/// let schemas = service().payload_schemas()?;
/// let update = std::env::var_os("UPDATE_CONTRACTS").is_some();
/// let outcome = Contracts::new("contracts").verify(&schemas, update);
/// assert!(outcome.is_ok(), "{outcome}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Contracts {
    root: PathBuf,
    mode: Mode,
}

/// Why a service's contracts do not hold.
#[derive(Debug)]
#[non_exhaustive]
pub enum ContractProblem {
    /// A schema breaks its snapshots.
    Breaks {
        /// The contract.
        contract: Contract,
        /// The Rust type.
        type_name: String,
        /// The check, with what broke.
        report: Report,
    },
    /// A schema with no snapshot yet, or changed compatibly and not recorded.
    Unrecorded {
        /// The contract.
        contract: Contract,
        /// The event type.
        subject: String,
        /// Whether it has no snapshot at all.
        first: bool,
        /// The check.
        report: Report,
    },
    /// Snapshots of a type the service no longer has a schema for.
    Dropped {
        /// The contract.
        contract: Contract,
        /// The event type.
        subject: String,
    },
    /// What the outbox writes, the handlers cannot read.
    ProducerBreaksConsumer {
        /// The event type.
        subject: String,
        /// The incompatible findings, in the written schema.
        findings: Vec<Finding>,
    },
    /// A snapshot that cannot be read or written.
    Unreadable {
        /// The contract.
        contract: Contract,
        /// The event type, when one.
        subject: Option<String>,
        /// Why.
        error: CompatError,
    },
}

/// What [`Contracts::verify`] found and did.
#[derive(Debug, Default)]
pub struct ContractsOutcome {
    /// The snapshot directory, for messages.
    pub root: PathBuf,
    /// Each schema's check.
    pub reports: Vec<(Contract, Report)>,
    /// Snapshots written.
    pub recorded: Vec<PathBuf>,
    /// Everything that keeps the contracts from holding.
    pub problems: Vec<ContractProblem>,
}

impl ContractsOutcome {
    /// Whether the contracts hold: no problem.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

impl Contracts {
    /// The contracts under `root`, checked in `FULL_TRANSITIVE`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Contracts {
            root: root.into(),
            mode: Mode::FullTransitive,
        }
    }

    /// Another mode.
    #[must_use]
    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// The mode checked in.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The snapshots of one contract.
    pub fn dir(&self, contract: Contract) -> SnapshotDir {
        SnapshotDir::new(self.root.join(contract.dir_name()))
    }

    /// Where they are.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Checks every schema against its snapshots; when `record`, commits
    /// each new or compatibly changed one as its next version (never one
    /// that breaks, never rewriting an older version). Also reports
    /// snapshots of types the service dropped, and an event type whose
    /// written schema its read schema cannot read.
    pub fn verify(&self, schemas: &[PayloadSchema], record: bool) -> ContractsOutcome {
        let mut outcome = ContractsOutcome {
            root: self.root.clone(),
            ..ContractsOutcome::default()
        };
        for s in schemas {
            self.verify_one(s, record, &mut outcome);
        }
        for contract in Contract::ALL {
            match self.dir(contract).event_types() {
                Ok(types) => outcome.problems.extend(
                    types
                        .into_iter()
                        .filter(|t| {
                            !schemas
                                .iter()
                                .any(|s| s.contract == contract && &s.subject == t)
                        })
                        .map(|subject| ContractProblem::Dropped { contract, subject }),
                ),
                Err(error) => outcome.problems.push(ContractProblem::Unreadable {
                    contract,
                    subject: None,
                    error,
                }),
            }
        }
        outcome.problems.extend(producer_against_consumer(schemas));
        outcome
    }

    fn verify_one(&self, s: &PayloadSchema, record: bool, outcome: &mut ContractsOutcome) {
        let unreadable = |error| ContractProblem::Unreadable {
            contract: s.contract,
            subject: Some(s.subject.clone()),
            error,
        };
        let dir = self.dir(s.contract);
        let history = match dir.history(&s.subject) {
            Ok(h) => h,
            Err(e) => return outcome.problems.push(unreadable(e)),
        };
        let report = match history.check(&s.schema, self.mode) {
            Ok(r) => r,
            Err(e) => return outcome.problems.push(unreadable(e)),
        };
        let latest = history.latest().map(|l| &l.schema);
        if !report.compatible {
            outcome.problems.push(ContractProblem::Breaks {
                contract: s.contract,
                type_name: s.type_name.to_owned(),
                report: report.clone(),
            });
        } else if latest != Some(&s.schema) {
            if record {
                match dir.record(&s.subject, &s.schema) {
                    Ok(Some(path)) => outcome.recorded.push(path),
                    Ok(None) => {}
                    Err(e) => outcome.problems.push(unreadable(e)),
                }
            } else {
                outcome.problems.push(ContractProblem::Unrecorded {
                    contract: s.contract,
                    subject: s.subject.clone(),
                    first: latest.is_none(),
                    report: report.clone(),
                });
            }
        }
        outcome.reports.push((s.contract, report));
    }
}

/// Each event type both written and read: the written schema against the
/// read one.
fn producer_against_consumer(schemas: &[PayloadSchema]) -> Vec<ContractProblem> {
    let mut by_subject: BTreeMap<&str, BTreeMap<Contract, &Value>> = BTreeMap::new();
    for s in schemas {
        by_subject
            .entry(&s.subject)
            .or_default()
            .insert(s.contract, &s.schema);
    }
    let mut problems = Vec::new();
    for (subject, contracts) in by_subject {
        let (Some(written), Some(read)) = (
            contracts.get(&Contract::Serialize),
            contracts.get(&Contract::Deserialize),
        ) else {
            continue;
        };
        match compare(written, read) {
            Ok(findings) => {
                let findings: Vec<Finding> = findings
                    .into_iter()
                    .filter(|f| !f.is_compatible())
                    .collect();
                if !findings.is_empty() {
                    problems.push(ContractProblem::ProducerBreaksConsumer {
                        subject: subject.to_owned(),
                        findings,
                    });
                }
            }
            Err(error) => problems.push(ContractProblem::Unreadable {
                contract: Contract::Serialize,
                subject: Some(subject.to_owned()),
                error,
            }),
        }
    }
    problems
}

impl fmt::Display for ContractsOutcome {
    /// Each problem, a paragraph each, with what to do.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let root = self.root.display();
        for (i, problem) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("\n\n")?;
            }
            match problem {
                ContractProblem::Breaks {
                    contract,
                    type_name,
                    report,
                } => write!(
                    f,
                    "the {contract} schema of `{}` ({type_name}) breaks its snapshots in {root}/{contract}:\n{report}",
                    report.subject
                )?,
                ContractProblem::Unrecorded {
                    contract,
                    subject,
                    first: true,
                    ..
                } => write!(
                    f,
                    "the {contract} schema of `{subject}` has no snapshot in {root}/{contract}: \
                     record it (UPDATE_CONTRACTS=1) and commit its v1.json"
                )?,
                ContractProblem::Unrecorded {
                    contract,
                    subject,
                    report,
                    ..
                } => write!(
                    f,
                    "the {contract} schema of `{subject}` changed compatibly and is not recorded in {root}/{contract}: \
                     record it (UPDATE_CONTRACTS=1) and commit the new version\n{report:#}"
                )?,
                ContractProblem::Dropped { contract, subject } => write!(
                    f,
                    "{root}/{contract}/{subject} has snapshots but the service has no {contract} schema for `{subject}` any more: \
                     if no one reads (or writes) it, delete the directory"
                )?,
                ContractProblem::ProducerBreaksConsumer { subject, findings } => {
                    write!(
                        f,
                        "`{subject}`: the handlers cannot read what the outbox writes:"
                    )?;
                    for finding in findings {
                        write!(f, "\n    {finding}")?;
                    }
                }
                ContractProblem::Unreadable {
                    contract,
                    subject,
                    error,
                } => match subject {
                    Some(subject) => write!(f, "{contract} `{subject}`: {error}")?,
                    None => write!(f, "{root}/{contract}: {error}")?,
                },
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(subject: &str, contract: Contract, schema: Value) -> PayloadSchema {
        PayloadSchema {
            subject: subject.to_owned(),
            contract,
            type_name: "t",
            schema,
        }
    }

    fn scratch() -> PathBuf {
        std::env::temp_dir().join(format!(
            "consumer-contracts-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ))
    }

    #[test]
    fn what_the_outbox_writes_must_be_readable_by_the_handlers() {
        let written = json!({"type": "object", "properties": {"id": {"type": ["string", "null"]}}});
        let read = json!({"type": "object", "properties": {"id": {"type": "string"}}});
        let problems = producer_against_consumer(&[
            schema("OrderPlaced", Contract::Serialize, written),
            schema("OrderPlaced", Contract::Deserialize, read),
        ]);
        let [ContractProblem::ProducerBreaksConsumer { subject, findings }] = &problems[..] else {
            panic!("one problem expected: {problems:?}");
        };
        assert_eq!(subject, "OrderPlaced");
        assert_eq!(findings[0].path, "/properties/id/type");
    }

    #[test]
    fn snapshots_of_a_dropped_type_are_a_problem() {
        let root = scratch();
        let contracts = Contracts::new(&root);
        let placed = schema(
            "OrderPlaced",
            Contract::Deserialize,
            json!({"type": "string"}),
        );
        let first = contracts.verify(std::slice::from_ref(&placed), true);
        assert!(first.is_ok(), "{first}");
        let unchanged = contracts.verify(&[placed], false);
        assert!(unchanged.is_ok(), "{unchanged}");
        let dropped = contracts.verify(&[], false);
        assert!(
            matches!(&dropped.problems[..], [ContractProblem::Dropped { subject, .. }] if subject == "OrderPlaced"),
            "{dropped}"
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}
