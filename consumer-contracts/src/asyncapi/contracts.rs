//! Each event type's payload schema per serde contract, as a document of its
//! own: what schema-evolution checks ([`crate::compat`]) snapshot and
//! compare. Made with the generator settings of the AsyncAPI document, so
//! the two never disagree.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::{fmt, fs, io};

use serde_json::Value;

use super::AsyncApiError;
use super::builder::short_name;
use super::schemas::{Side, standalone};
use consumer_core::describe::{PartDescription, PayloadType, ServiceDescription};

/// Which side of a message a [`PayloadSchema`] describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Contract {
    /// What a handler reads: the type's `Deserialize` schema (a
    /// `#[serde(default)]` field is optional).
    Deserialize,
    /// What the outbox writes: the type's `Serialize` schema.
    Serialize,
}

impl Contract {
    /// Both contracts.
    pub const ALL: [Contract; 2] = [Contract::Deserialize, Contract::Serialize];

    /// `deserialize` or `serialize`: the subdirectory of a contracts
    /// directory that holds this contract's snapshots.
    pub fn dir_name(self) -> &'static str {
        match self {
            Contract::Deserialize => "deserialize",
            Contract::Serialize => "serialize",
        }
    }

    fn side(self) -> Side {
        match self {
            Contract::Deserialize => Side::Receive,
            Contract::Serialize => Side::Send,
        }
    }
}

impl fmt::Display for Contract {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.dir_name())
    }
}

/// The payload schema of one event type in one contract.
#[derive(Debug, Clone, PartialEq)]
pub struct PayloadSchema {
    /// The CloudEvents type; for a handler that declares none, its Rust
    /// type's short name (`PlaceOrder`), as the document names its message.
    pub subject: String,
    /// Whether handlers read it or the outbox writes it.
    pub contract: Contract,
    /// The Rust type (`std::any::type_name`).
    pub type_name: &'static str,
    /// A draft-07 JSON Schema document: the type's schema at the root, what
    /// it refers to under `definitions`.
    pub schema: Value,
}

/// Writes each schema as `<dir>/<contract>/<subject>.json`, pretty-printed:
/// the current schemas `consumer schema check --current <dir>/<contract>`
/// compares with a snapshot directory. Returns the files written. A
/// `.json` file left in a contract's directory by an earlier build, of a
/// type no longer in `schemas`, is removed, so a dropped type cannot pass
/// for a current one.
///
/// # Errors
///
/// An I/O error, or `InvalidInput` for a subject that cannot name a file
/// (empty, starting with `.`, containing `/`, a backslash or NUL).
pub fn write_current(dir: &Path, schemas: &[PayloadSchema]) -> io::Result<Vec<PathBuf>> {
    let mut written = Vec::with_capacity(schemas.len());
    for s in schemas {
        if s.subject.is_empty()
            || s.subject.starts_with('.')
            || s.subject.contains(['/', '\\', '\0'])
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("event type `{}` cannot name a schema file", s.subject),
            ));
        }
        let contract_dir = dir.join(s.contract.dir_name());
        fs::create_dir_all(&contract_dir)?;
        let path = contract_dir.join(format!("{}.json", s.subject));
        let mut text = serde_json::to_string_pretty(&s.schema).map_err(io::Error::other)?;
        text.push('\n');
        fs::write(&path, text)?;
        written.push(path);
    }
    for contract in Contract::ALL {
        let contract_dir = dir.join(contract.dir_name());
        let entries = match fs::read_dir(&contract_dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let path = entry?.path();
            let stale = path.extension().is_some_and(|e| e == "json") && !written.contains(&path);
            if stale {
                fs::remove_file(&path)?;
            }
        }
    }
    Ok(written)
}

impl Contract {
    /// `payload`'s schema in this contract, as [`PayloadSchema::schema`]
    /// has it; `None` when the type has no schema.
    pub fn schema_of(self, payload: &PayloadType) -> Option<Value> {
        standalone(self.side(), payload)
    }
}

/// One schema per subject and contract, sorted by subject then contract:
/// what `service`'s handlers read and its outboxes write.
pub fn payload_schemas(service: &ServiceDescription) -> Result<Vec<PayloadSchema>, AsyncApiError> {
    let mut found = Found::default();
    for part in &service.parts {
        for payload_use in uses(part) {
            found.add(payload_use);
        }
    }
    if found.problems.is_empty() {
        Ok(found.schemas.into_values().collect())
    } else {
        Err(AsyncApiError::Incomplete {
            service: service.name.to_owned(),
            problems: found.problems,
        })
    }
}

/// One place a payload type is read or written, as a subject in a
/// contract.
struct Use<'p> {
    subject: String,
    contract: Contract,
    payload: &'p PayloadType,
    /// Who reads or writes it, for the problems.
    whose: String,
}

/// Every use in `part`, in the order the problems are reported: for each
/// handler what it sends, then what it takes (once per event type it
/// declares, or under its type's short name); for a relay each event.
fn uses(part: &PartDescription) -> Vec<Use<'_>> {
    let mut uses = Vec::new();
    match part {
        PartDescription::Consumer { name, handlers, .. } => {
            for h in handlers {
                uses.extend(h.sends.iter().map(|event| Use {
                    subject: event.event_type.clone(),
                    contract: Contract::Serialize,
                    payload: &event.payload,
                    whose: format!(
                        "consumer `{name}`: `{}` sends `{}`",
                        h.name, event.event_type
                    ),
                }));
                let Some(payload) = &h.payload else {
                    continue;
                };
                let subjects = if h.event_types.is_empty() {
                    vec![short_name(payload.type_name())]
                } else {
                    h.event_types.iter().map(|t| (*t).to_owned()).collect()
                };
                uses.extend(subjects.into_iter().map(|subject| Use {
                    subject,
                    contract: Contract::Deserialize,
                    payload,
                    whose: format!("consumer `{name}`: handler `{}`", h.name),
                }));
            }
        }
        PartDescription::Relay { name, events, .. } => {
            uses.extend(events.iter().map(|(event, _, _)| Use {
                subject: event.event_type.clone(),
                contract: Contract::Serialize,
                payload: &event.payload,
                whose: format!("relay `{name}`: event `{}`", event.event_type),
            }));
        }
    }
    uses
}

/// The schemas found so far, by subject and contract, and the problems.
#[derive(Default)]
struct Found {
    schemas: BTreeMap<(String, Contract), PayloadSchema>,
    problems: Vec<String>,
}

impl Found {
    /// Adds the schema of one use: the first of its subject and contract
    /// is kept; a type without a schema, or another schema for the same
    /// subject and contract, is a problem (one event type has one
    /// contract).
    fn add(&mut self, u: Use<'_>) {
        let Use {
            subject,
            contract,
            payload,
            whose,
        } = u;
        let Some(schema) = contract.schema_of(payload) else {
            self.problems.push(format!(
                "{whose} is a `{}`, which has no JSON schema: derive `schemars::JsonSchema` for it",
                payload.type_name()
            ));
            return;
        };
        match self.schemas.get(&(subject.clone(), contract)) {
            Some(seen) if seen.schema != schema => self.problems.push(format!(
                "{whose}: `{subject}` is {contract}d as `{}` here and as `{}` elsewhere, with different schemas: one event type has one contract",
                payload.type_name(),
                seen.type_name
            )),
            Some(_) => {}
            None => {
                self.schemas.insert(
                    (subject.clone(), contract),
                    PayloadSchema {
                        subject,
                        contract,
                        type_name: payload.type_name(),
                        schema,
                    },
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Read with a default, so its contracts differ.
    #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Placed {
        id: String,
        #[serde(default)]
        note: String,
        line: Line,
    }

    #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Line {
        sku: String,
    }

    #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Tree {
        children: Vec<Tree>,
    }

    #[test]
    fn the_type_is_at_the_root_and_what_it_refers_to_under_definitions() {
        let read = standalone(Side::Receive, &PayloadType::of::<Placed>()).expect("a schema");
        assert_eq!(read["$schema"], "http://json-schema.org/draft-07/schema#");
        assert_eq!(read["type"], "object");
        assert_eq!(read["properties"]["line"]["$ref"], "#/definitions/Line");
        assert!(read["definitions"].get("Placed").is_none(), "{read:#}");
        assert!(read["definitions"].get("Line").is_some(), "{read:#}");
        let written = standalone(Side::Send, &PayloadType::of::<Placed>()).expect("a schema");
        assert_ne!(read["required"], written["required"]);
    }

    #[test]
    fn write_current_leaves_no_schema_of_a_dropped_type() {
        let dir = std::env::temp_dir().join(format!(
            "consumer-write-current-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        let schema = |subject: &str| PayloadSchema {
            subject: subject.to_owned(),
            contract: Contract::Deserialize,
            type_name: "t",
            schema: serde_json::json!({"type": "string"}),
        };
        write_current(&dir, &[schema("A"), schema("B")]).expect("written");
        let written = write_current(&dir, &[schema("A")]).expect("written");
        assert_eq!(written, [dir.join("deserialize/A.json")]);
        assert!(!dir.join("deserialize/B.json").exists());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_recursive_type_keeps_its_definition() {
        let tree = standalone(Side::Receive, &PayloadType::of::<Tree>()).expect("a schema");
        assert_eq!(
            tree["properties"]["children"]["items"]["$ref"],
            "#/definitions/Tree"
        );
        assert!(tree["definitions"].get("Tree").is_some(), "{tree:#}");
    }
}
