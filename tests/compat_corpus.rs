//! The compatibility corpus (tests/compat/corpus.json): schema changes,
//! each with the verdict expected in every mode, checked with
//! `consumer::contracts::compat`, and cross-checked with npm `json-schema-diff` 1.0.0
//! (run by scripts/json_schema_diff.js from the directory `scripts/tools
//! json-schema-diff` prints; `JSON_SCHEMA_DIFF` overrides it).

mod tools;

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use consumer::contracts::compat::{Mode, compare};
use serde::Deserialize;
use serde_json::{Value, json};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/compat/corpus.json");

#[derive(Deserialize)]
struct Corpus {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    versions: Vec<Value>,
    /// Mode (lowercase, `backward_transitive`) to verdict.
    expect: BTreeMap<String, bool>,
    #[serde(default)]
    breaks: Option<Breaks>,
    #[serde(default)]
    json_schema_diff: Option<Divergence>,
}

#[derive(Deserialize)]
struct Breaks {
    backward: Vec<String>,
    forward: Vec<String>,
}

#[derive(Deserialize)]
struct Divergence {
    diverges: String,
    /// What the tool reports instead: verdicts for the modes it gets wrong,
    /// or "error".
    reports: Value,
}

fn corpus() -> Corpus {
    let text = std::fs::read_to_string(CORPUS).unwrap_or_else(|e| panic!("{CORPUS}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{CORPUS} is not a corpus: {e}"))
}

fn key(mode: Mode) -> String {
    mode.name().to_ascii_lowercase()
}

impl Case {
    /// The verdict expected in `mode`: given, or for a two-version history
    /// the plain mode's (transitive and plain compare the same snapshot).
    fn expected(&self, mode: Mode) -> bool {
        if let Some(verdict) = self.expect.get(&key(mode)) {
            return *verdict;
        }
        assert!(
            mode.is_transitive() && self.versions.len() == 2,
            "case `{}` gives no verdict for {mode}: every case gives backward, forward and full, and a history of more than two versions the transitive ones too",
            self.name
        );
        let plain = match mode {
            Mode::BackwardTransitive => Mode::Backward,
            Mode::ForwardTransitive => Mode::Forward,
            _ => Mode::Full,
        };
        self.expect[&key(plain)]
    }

    fn current(&self) -> &Value {
        self.versions.last().expect("a case has versions")
    }

    fn snapshots(&self) -> Vec<(String, &Value)> {
        let older = &self.versions[..self.versions.len() - 1];
        older
            .iter()
            .enumerate()
            .map(|(i, v)| (format!("v{}", i + 1), v))
            .collect()
    }
}

/// The incompatible findings of `writer` read by `reader`, as `RULE@path`.
fn breaking(writer: &Value, reader: &Value) -> Vec<String> {
    let mut found: Vec<String> = compare(writer, reader)
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .filter(|f| !f.is_compatible())
        .map(|f| format!("{}@{}", f.rule, f.path))
        .collect();
    found.sort();
    found.dedup();
    found
}

#[test]
fn every_case_has_its_expected_verdict_in_every_mode() {
    let corpus = corpus();
    assert!(
        corpus.cases.len() >= 30,
        "the corpus has {} cases, fewer than 30",
        corpus.cases.len()
    );
    let mut wrong = Vec::new();
    for case in &corpus.cases {
        assert!(
            case.versions.len() >= 2,
            "case `{}` needs at least two versions",
            case.name
        );
        let snapshots = case.snapshots();
        for mode in Mode::ALL {
            let report = mode
                .check(
                    &case.name,
                    case.current(),
                    snapshots.iter().map(|(l, v)| (l.as_str(), *v)),
                )
                .unwrap_or_else(|e| panic!("case `{}`: {e}", case.name));
            if report.compatible != case.expected(mode) {
                wrong.push(format!(
                    "`{}` in {mode}: expected {}, got:\n{report:#}",
                    case.name,
                    if case.expected(mode) {
                        "compatible"
                    } else {
                        "incompatible"
                    }
                ));
            }
        }
        if let Some(breaks) = &case.breaks {
            let (latest, _) = snapshots.last().expect("a snapshot");
            let previous = snapshots.last().map(|(_, v)| *v).expect("a snapshot");
            let mut expected = breaks.backward.clone();
            expected.sort();
            let backward = breaking(previous, case.current());
            if backward != expected {
                wrong.push(format!(
                    "`{}` backward against {latest}: expected {expected:?}, found {backward:?}",
                    case.name
                ));
            }
            let mut expected = breaks.forward.clone();
            expected.sort();
            let forward = breaking(case.current(), previous);
            if forward != expected {
                wrong.push(format!(
                    "`{}` forward against {latest}: expected {expected:?}, found {forward:?}",
                    case.name
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} mismatches:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn the_corpus_has_histories_that_only_transitive_modes_reject() {
    let corpus = corpus();
    let transitive_only = corpus
        .cases
        .iter()
        .filter(|c| c.versions.len() > 2)
        .filter(|c| {
            [
                (Mode::Backward, Mode::BackwardTransitive),
                (Mode::Forward, Mode::ForwardTransitive),
                (Mode::Full, Mode::FullTransitive),
            ]
            .iter()
            .any(|(plain, transitive)| c.expected(*plain) && !c.expected(*transitive))
        })
        .count();
    assert!(
        transitive_only >= 2,
        "only {transitive_only} histories pass a plain mode and fail its transitive form"
    );
}

#[test]
fn every_recorded_divergence_differs_from_the_expected_verdict() {
    for case in corpus().cases {
        let Some(divergence) = &case.json_schema_diff else {
            continue;
        };
        assert!(
            !divergence.diverges.trim().is_empty(),
            "case `{}` records a divergence without saying why",
            case.name
        );
        if divergence.reports == json!("error") {
            continue;
        }
        let reports = divergence.reports.as_object().unwrap_or_else(|| {
            panic!(
                "case `{}`: `reports` is \"error\" or an object of verdicts",
                case.name
            )
        });
        assert!(
            Mode::ALL.iter().any(|m| reports
                .get(&key(*m))
                .and_then(Value::as_bool)
                .is_some_and(|v| v != case.expected(*m))),
            "case `{}` records a divergence whose verdicts all equal the expected ones",
            case.name
        );
    }
}

/// What json-schema-diff says of one pair: whether the destination accepts
/// values the source did not (added) and the other way (removed).
enum ToolSays {
    Diff { added: bool, removed: bool },
    Error(String),
}

fn run_json_schema_diff(pairs: &[(Value, Value)]) -> Vec<ToolSays> {
    let package = tools::NpmPackage {
        env: "JSON_SCHEMA_DIFF",
        dir: "json-schema-diff/node_modules/json-schema-diff",
        module: ".",
        tool: "json-schema-diff",
        needs: "npm json-schema-diff 1.0.0 on node",
    }
    .dir();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/json_schema_diff.js");
    let input: Vec<Value> = pairs
        .iter()
        .map(|(s, d)| json!({"source": s, "destination": d}))
        .collect();
    let mut child = Command::new("node")
        .arg(script)
        .arg(&package)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running node {script}: {e}"));
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(
            serde_json::to_string(&input)
                .expect("serialises")
                .as_bytes(),
        )
        .expect("writes the pairs");
    let out = child.wait_with_output().expect("node finishes");
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<ToolSays> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            match v.get("error").and_then(Value::as_str) {
                Some(e) => ToolSays::Error(e.to_owned()),
                None => ToolSays::Diff {
                    added: v["added"].as_bool().expect("added"),
                    removed: v["removed"].as_bool().expect("removed"),
                },
            }
        })
        .collect();
    assert_eq!(
        lines.len(),
        pairs.len(),
        "{script} answered {} of {} pairs",
        lines.len(),
        pairs.len()
    );
    lines
}

/// json-schema-diff agrees with every case's expected verdicts, except
/// where the corpus records a divergence: there it must still diverge
/// exactly as recorded, so the list stays honest.
///
/// Its "removed" (values the source accepted that the destination
/// rejects) from a snapshot to the current schema breaks BACKWARD; its
/// "added" (values the current schema accepts that the snapshot rejected)
/// breaks FORWARD.
#[test]
fn json_schema_diff_agrees_except_for_the_recorded_divergences() {
    let corpus = corpus();
    let mut pairs = Vec::new();
    let mut spans = Vec::new();
    for case in &corpus.cases {
        let start = pairs.len();
        for (_, snapshot) in case.snapshots() {
            pairs.push((snapshot.clone(), case.current().clone()));
        }
        spans.push(start..pairs.len());
    }
    let said = run_json_schema_diff(&pairs);

    let mut wrong = Vec::new();
    for (case, span) in corpus.cases.iter().zip(spans) {
        let answers = &said[span];
        let errors: Vec<&str> = answers
            .iter()
            .filter_map(|a| match a {
                ToolSays::Error(e) => Some(e.as_str()),
                ToolSays::Diff { .. } => None,
            })
            .collect();
        let recorded = case.json_schema_diff.as_ref().map(|d| &d.reports);
        if recorded == Some(&json!("error")) {
            if errors.is_empty() {
                wrong.push(format!("`{}`: recorded as an error of json-schema-diff, which now compares it: update the corpus", case.name));
            }
            continue;
        }
        if !errors.is_empty() {
            wrong.push(format!(
                "`{}`: json-schema-diff failed: {}",
                case.name,
                errors.join("; ")
            ));
            continue;
        }
        let ok = |a: &ToolSays, backward: bool| match a {
            ToolSays::Diff { added, removed } => {
                if backward {
                    !removed
                } else {
                    !added
                }
            }
            ToolSays::Error(_) => false,
        };
        let latest = answers.last().expect("a pair");
        let verdict = |mode: Mode| -> bool {
            let compared: &[ToolSays] = if mode.is_transitive() {
                answers
            } else {
                std::slice::from_ref(latest)
            };
            let backward = compared.iter().all(|a| ok(a, true));
            let forward = compared.iter().all(|a| ok(a, false));
            match mode {
                Mode::Backward | Mode::BackwardTransitive => backward,
                Mode::Forward | Mode::ForwardTransitive => forward,
                Mode::Full | Mode::FullTransitive => backward && forward,
            }
        };
        for mode in Mode::ALL {
            let tool = verdict(mode);
            let wanted = recorded
                .and_then(|r| r.get(key(mode)))
                .and_then(Value::as_bool)
                .unwrap_or_else(|| case.expected(mode));
            if tool != wanted {
                let what = if recorded.and_then(|r| r.get(key(mode))).is_some() {
                    "the recorded divergence"
                } else {
                    "the expected verdict"
                };
                wrong.push(format!(
                    "`{}` in {mode}: json-schema-diff says {}, {what} is {}",
                    case.name,
                    if tool { "compatible" } else { "incompatible" },
                    if wanted { "compatible" } else { "incompatible" }
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} disagreements:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
