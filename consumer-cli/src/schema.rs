//! `schema check | record`: the current payload schemas against the
//! committed snapshots (`consumer_contracts::compat`), as a CI step runs it.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use consumer_contracts::compat::{CompatError, Report, SnapshotDir};
use serde_json::{Value, json};

use crate::args::SchemaArgs;
use crate::error::{Error, Result};

/// `check`: prints each type's report; `Err(Incompatible)` when one breaks.
pub fn check(args: &SchemaArgs, out: &mut impl Write) -> Result<()> {
    let (dir, current) = load(args, false)?;
    let reports = reports(&dir, &current, args)?;
    print(args, &reports, None, out)?;
    verdict(args, &reports)
}

/// `record`: checks, then commits what changed, only if nothing breaks.
pub fn record(args: &SchemaArgs, out: &mut impl Write) -> Result<()> {
    let (dir, current) = load(args, true)?;
    let reports = reports(&dir, &current, args)?;
    if reports.iter().any(|r| !r.compatible) {
        print(args, &reports, None, out)?;
        return verdict(args, &reports);
    }
    let mut recorded = BTreeMap::new();
    for (event_type, schema) in &current {
        recorded.insert(event_type.as_str(), dir.record(event_type, schema)?);
    }
    print(args, &reports, Some(&recorded), out)
}

/// The snapshot directory, and each current schema to check by type;
/// `record` makes the directory (`creates`), `check` wants it there.
fn load(args: &SchemaArgs, creates: bool) -> Result<(SnapshotDir, BTreeMap<String, Value>)> {
    let made_here = creates && !args.snapshots.exists();
    if !args.snapshots.is_dir() && !made_here {
        return Err(Error::Usage(format!(
            "no snapshot directory at {} (`consumer schema record` makes it: one <event-type>/v1.json per type)",
            args.snapshots.display()
        )));
    }
    let dir = SnapshotDir::new(&args.snapshots);
    if args.current.is_file() {
        let current = BTreeMap::from([(file_type(args)?, read_schema(&args.current)?)]);
        return Ok((dir, current));
    }
    let current = current_dir(args)?;
    if args.types.is_empty() {
        every_snapshot_has_a_schema(args, &dir, &current)?;
        return Ok((dir, current));
    }
    let chosen = chosen(args, current)?;
    Ok((dir, chosen))
}

/// The event type of `--current`, one file: its `--type`, or its name.
fn file_type(args: &SchemaArgs) -> Result<String> {
    match args.types.as_slice() {
        [one] => Ok(one.clone()),
        [] => stem(&args.current).ok_or_else(|| {
            Error::Usage(format!(
                "{} is not named <event-type>.json: say its type with --type",
                args.current.display()
            ))
        }),
        _ => Err(Error::Usage(
            "--current names one file: give one --type at most".to_owned(),
        )),
    }
}

/// Every `<event-type>.json` of `--current`, a directory; at least one
/// (a directory of contracts instead of schemas gets a hint).
fn current_dir(args: &SchemaArgs) -> Result<BTreeMap<String, Value>> {
    if !args.current.is_dir() {
        return Err(Error::Usage(format!(
            "no current schemas at {}: give a directory of <event-type>.json files or one file",
            args.current.display()
        )));
    }
    let listing = || Error::io(format!("listing {}", args.current.display()));
    let mut current = BTreeMap::new();
    for entry in std::fs::read_dir(&args.current).map_err(listing())? {
        let path = entry.map_err(listing())?.path();
        if let Some(event_type) = stem(&path) {
            current.insert(event_type, read_schema(&path)?);
        }
    }
    if current.is_empty() {
        let hint = if ["deserialize", "serialize"]
            .iter()
            .any(|c| args.current.join(c).is_dir())
        {
            " (it holds one directory per contract: point --current and --snapshots at the same contract's, e.g. <dir>/deserialize)"
        } else {
            ""
        };
        return Err(Error::Usage(format!(
            "no <event-type>.json in {}{hint}",
            args.current.display()
        )));
    }
    Ok(current)
}

/// Checks that every type with snapshots still has a schema: a type
/// dropped from the build is not silently left unchecked.
fn every_snapshot_has_a_schema(
    args: &SchemaArgs,
    dir: &SnapshotDir,
    current: &BTreeMap<String, Value>,
) -> Result<()> {
    for event_type in dir.event_types()? {
        if !current.contains_key(&event_type) {
            return Err(Error::Other(format!(
                "`{event_type}` has snapshots in {} but no current schema {}: generate it, \
                 or check the others with --type",
                args.snapshots.display(),
                args.current.join(format!("{event_type}.json")).display()
            )));
        }
    }
    Ok(())
}

/// The schemas of the types `--type` names; one it names that has no
/// schema is an error listing those there are.
fn chosen(
    args: &SchemaArgs,
    mut current: BTreeMap<String, Value>,
) -> Result<BTreeMap<String, Value>> {
    let known: Vec<String> = current.keys().cloned().collect();
    let mut chosen = BTreeMap::new();
    for event_type in &args.types {
        let Some(schema) = current.remove(event_type) else {
            return Err(Error::Usage(format!(
                "unknown event type `{event_type}`: {} has no {event_type}.json (it has: {})",
                args.current.display(),
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            )));
        };
        chosen.insert(event_type.clone(), schema);
    }
    Ok(chosen)
}

/// `OrderPlaced` of `.../OrderPlaced.json`; `None` for other files.
fn stem(path: &Path) -> Option<String> {
    if path.extension().and_then(|e| e.to_str()) != Some("json") {
        return None;
    }
    path.file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| !s.starts_with('.'))
        .map(str::to_owned)
}

fn read_schema(path: &PathBuf) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|source| CompatError::Io {
        path: path.clone(),
        source,
    })?;
    let schema: Value = serde_json::from_str(&text).map_err(|source| CompatError::Json {
        path: path.clone(),
        source,
    })?;
    if !(schema.is_object() || schema.is_boolean()) {
        return Err(Error::Usage(format!(
            "{} is JSON but not a JSON Schema (an object or a boolean)",
            path.display()
        )));
    }
    Ok(schema)
}

fn reports(
    dir: &SnapshotDir,
    current: &BTreeMap<String, Value>,
    args: &SchemaArgs,
) -> Result<Vec<Report>> {
    current
        .iter()
        .map(|(event_type, schema)| Ok(dir.check(event_type, schema, args.mode)?))
        .collect()
}

fn print(
    args: &SchemaArgs,
    reports: &[Report],
    recorded: Option<&BTreeMap<&str, Option<PathBuf>>>,
    out: &mut impl Write,
) -> Result<()> {
    let written = |e: io::Error| Error::io("writing the output")(e);
    if args.json {
        let mut document = json!({
            "snapshots": args.snapshots,
            "mode": args.mode,
            "compatible": reports.iter().all(|r| r.compatible),
            "reports": reports,
        });
        if let Some(recorded) = recorded {
            document["recorded"] = json!(recorded);
        }
        let text = serde_json::to_string_pretty(&document)
            .map_err(|e| Error::Other(format!("the report cannot be rendered: {e}")))?;
        return writeln!(out, "{text}").map_err(written);
    }
    for report in reports {
        writeln!(out, "{report}").map_err(written)?;
        if let Some(recorded) = recorded {
            match recorded.get(report.subject.as_str()) {
                Some(Some(path)) => writeln!(out, "  recorded {}", path.display()),
                _ => writeln!(out, "  unchanged: nothing recorded"),
            }
            .map_err(written)?;
        }
    }
    Ok(())
}

fn verdict(args: &SchemaArgs, reports: &[Report]) -> Result<()> {
    let broken: Vec<&str> = reports
        .iter()
        .filter(|r| !r.compatible)
        .map(|r| r.subject.as_str())
        .collect();
    if broken.is_empty() {
        return Ok(());
    }
    Err(Error::Incompatible {
        count: broken.len(),
        checked: reports.len(),
        mode: args.mode,
        types: broken.join(", "),
    })
}
