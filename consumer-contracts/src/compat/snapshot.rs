//! The committed snapshots of each message type's schema history, on disk
//! (the layout is on [`SnapshotDir`]).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::CompatError;
use super::mode::Mode;
use super::report::Report;

/// A directory of committed schema snapshots, one subdirectory per event
/// type:
///
/// ```text
/// contracts/                      the snapshot directory (any path)
///   com.example.OrderPlaced/      one directory per event type (its CloudEvents `type`)
///     v1.json                     the schema as first released
///     v2.json                     each later released schema, numbered from 1 with no gaps
///   com.example.OrderShipped/
///     v1.json
/// ```
///
/// Each `vN.json` is a draft-07 JSON Schema document (as `schemars` emits
/// it, `definitions` included). Other files (a `README.md`) are ignored;
/// a `.json` file not named `vN.json`, or a missing number, is an error
/// rather than a silently shorter history.
#[derive(Clone, Debug)]
pub struct SnapshotDir {
    root: PathBuf,
}

/// One committed version of a schema.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// Its number, from 1.
    pub version: u32,
    /// The file it was read from.
    pub path: PathBuf,
    /// The schema.
    pub schema: Value,
}

impl Snapshot {
    /// `v1`, `v2`, ...: how reports name it.
    pub fn label(&self) -> String {
        format!("v{}", self.version)
    }
}

/// Every committed version of one event type's schema, oldest first.
#[derive(Clone, Debug)]
pub struct History {
    /// The event type.
    pub event_type: String,
    /// Its snapshots, `v1` first.
    pub snapshots: Vec<Snapshot>,
}

impl History {
    /// The newest snapshot, if any.
    pub fn latest(&self) -> Option<&Snapshot> {
        self.snapshots.last()
    }

    /// Checks `current` against this history in `mode`.
    ///
    /// # Errors
    ///
    /// [`CompatError::Reference`] when a `$ref` cannot be resolved.
    pub fn check(&self, current: &Value, mode: Mode) -> Result<Report, CompatError> {
        let labels: Vec<String> = self.snapshots.iter().map(Snapshot::label).collect();
        mode.check(
            &self.event_type,
            current,
            labels
                .iter()
                .map(String::as_str)
                .zip(self.snapshots.iter().map(|s| &s.schema)),
        )
    }
}

impl SnapshotDir {
    /// The snapshot directory at `root` (`contracts/`); nothing is read yet.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        SnapshotDir { root: root.into() }
    }

    /// Where it is.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The event types with a directory, sorted; none when the directory
    /// does not exist yet.
    ///
    /// # Errors
    ///
    /// [`CompatError::Io`] when the directory cannot be listed.
    pub fn event_types(&self) -> Result<Vec<String>, CompatError> {
        let entries = match fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_error(&self.root, e)),
        };
        let mut types = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_error(&self.root, e))?;
            let is_dir = entry
                .file_type()
                .map_err(|e| io_error(&entry.path(), e))?
                .is_dir();
            match entry.file_name().to_str() {
                Some(name) if is_dir && !name.starts_with('.') => types.push(name.to_owned()),
                _ => {}
            }
        }
        types.sort();
        Ok(types)
    }

    /// The committed history of `event_type`; empty when it has none yet.
    ///
    /// # Errors
    ///
    /// [`CompatError::EventType`] for a name that cannot be a directory,
    /// [`CompatError::SnapshotName`] for a `.json` file not named `vN.json`,
    /// [`CompatError::MissingVersion`] for a gap in the numbers,
    /// [`CompatError::Io`] / [`CompatError::Json`] when a file cannot be read
    /// or parsed.
    pub fn history(&self, event_type: &str) -> Result<History, CompatError> {
        let dir = self.type_dir(event_type)?;
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(History {
                    event_type: event_type.to_owned(),
                    snapshots: Vec::new(),
                });
            }
            Err(e) => return Err(io_error(&dir, e)),
        };
        let mut versions = Vec::new();
        for entry in entries {
            let path = entry.map_err(|e| io_error(&dir, e))?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let version = path
                .file_stem()
                .and_then(|s| s.to_str())
                .and_then(parse_version)
                .ok_or_else(|| CompatError::SnapshotName { path: path.clone() })?;
            versions.push((version, path));
        }
        versions.sort();
        let mut snapshots = Vec::with_capacity(versions.len());
        for (expected, (version, path)) in (1..).zip(versions) {
            if version != expected {
                return Err(CompatError::MissingVersion {
                    event_type: event_type.to_owned(),
                    version: expected,
                });
            }
            let text = fs::read_to_string(&path).map_err(|e| io_error(&path, e))?;
            let schema = serde_json::from_str(&text).map_err(|source| CompatError::Json {
                path: path.clone(),
                source,
            })?;
            snapshots.push(Snapshot {
                version,
                path,
                schema,
            });
        }
        Ok(History {
            event_type: event_type.to_owned(),
            snapshots,
        })
    }

    /// Checks `current` against the committed history of `event_type` in
    /// `mode`.
    ///
    /// # Errors
    ///
    /// As [`SnapshotDir::history`] and [`History::check`].
    pub fn check(
        &self,
        event_type: &str,
        current: &Value,
        mode: Mode,
    ) -> Result<Report, CompatError> {
        self.history(event_type)?.check(current, mode)
    }

    /// Commits `schema` as the next version of `event_type` (`v1.json` for
    /// the first), pretty-printed, unless it equals the latest snapshot:
    /// returns the new snapshot's path, or `None` when nothing changed.
    /// Check compatibility first; this only writes.
    ///
    /// # Errors
    ///
    /// As [`SnapshotDir::history`], and [`CompatError::Io`] when the file
    /// cannot be written.
    pub fn record(&self, event_type: &str, schema: &Value) -> Result<Option<PathBuf>, CompatError> {
        let history = self.history(event_type)?;
        if history.latest().is_some_and(|s| &s.schema == schema) {
            return Ok(None);
        }
        let dir = self.type_dir(event_type)?;
        fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
        let version = history.latest().map_or(1, |s| s.version + 1);
        let path = dir.join(format!("v{version}.json"));
        let mut text =
            serde_json::to_string_pretty(schema).map_err(|source| CompatError::Json {
                path: path.clone(),
                source,
            })?;
        text.push('\n');
        // Written beside it and renamed, so a reader never sees half a file.
        let partial = dir.join(format!(".v{version}.json.partial"));
        fs::write(&partial, text).map_err(|e| io_error(&partial, e))?;
        fs::rename(&partial, &path).map_err(|e| io_error(&path, e))?;
        Ok(Some(path))
    }

    fn type_dir(&self, event_type: &str) -> Result<PathBuf, CompatError> {
        let reason = if event_type.is_empty() {
            Some("it is empty")
        } else if event_type.starts_with('.') {
            Some("it starts with `.`")
        } else if event_type.contains(['/', '\\', '\0']) {
            Some("it contains `/`, `\\` or NUL")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(CompatError::EventType {
                event_type: event_type.to_owned(),
                reason,
            }),
            None => Ok(self.root.join(event_type)),
        }
    }
}

/// `v1`, `v12` (no `v0`, no leading zeros).
fn parse_version(stem: &str) -> Option<u32> {
    let digits = stem.strip_prefix('v')?;
    if digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn io_error(path: &Path, source: io::Error) -> CompatError {
    CompatError::Io {
        path: path.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "consumer-compat-{name}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        fs::create_dir_all(&dir).expect("scratch dir");
        dir
    }

    #[test]
    fn versions_are_named_v_n() {
        assert_eq!(parse_version("v1"), Some(1));
        assert_eq!(parse_version("v12"), Some(12));
        assert_eq!(parse_version("v0"), None);
        assert_eq!(parse_version("v01"), None);
        assert_eq!(parse_version("latest"), None);
    }

    #[test]
    fn record_numbers_snapshots_and_skips_an_unchanged_schema() {
        let dir = SnapshotDir::new(scratch("record"));
        let v1 = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let v2 = json!({"type": "object", "properties": {"a": {"type": ["string", "null"]}}});
        let first = dir.record("com.example.A", &v1).expect("writes");
        assert!(first.is_some_and(|p| p.ends_with("com.example.A/v1.json")));
        assert_eq!(dir.record("com.example.A", &v1).expect("reads"), None);
        dir.record("com.example.A", &v2).expect("writes");
        let history = dir.history("com.example.A").expect("reads");
        let labels: Vec<_> = history.snapshots.iter().map(Snapshot::label).collect();
        assert_eq!(labels, ["v1", "v2"]);
        assert_eq!(dir.event_types().expect("lists"), ["com.example.A"]);
        let report = dir
            .check("com.example.A", &v2, Mode::BackwardTransitive)
            .expect("checks");
        assert!(report.compatible, "{report}");
        let _ = fs::remove_dir_all(dir.root());
    }

    #[test]
    fn a_gap_or_a_stray_json_file_is_an_error() {
        let root = scratch("gap");
        let type_dir = root.join("t");
        fs::create_dir_all(&type_dir).expect("dir");
        fs::write(type_dir.join("v1.json"), "{}").expect("write");
        fs::write(type_dir.join("v3.json"), "{}").expect("write");
        fs::write(type_dir.join("README.md"), "ignored").expect("write");
        let dir = SnapshotDir::new(&root);
        assert!(matches!(
            dir.history("t"),
            Err(CompatError::MissingVersion { version: 2, .. })
        ));
        fs::write(type_dir.join("latest.json"), "{}").expect("write");
        assert!(matches!(
            dir.history("t"),
            Err(CompatError::SnapshotName { .. })
        ));
        assert!(matches!(
            dir.history("../etc"),
            Err(CompatError::EventType { .. })
        ));
        let _ = fs::remove_dir_all(root);
    }

    #[test]
    fn a_type_without_snapshots_has_an_empty_history() {
        let dir = SnapshotDir::new(scratch("empty"));
        assert!(
            dir.history("never.seen")
                .expect("reads")
                .snapshots
                .is_empty()
        );
        let _ = fs::remove_dir_all(dir.root());
    }
}
