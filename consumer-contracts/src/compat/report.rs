//! What a check found: each difference with its rule and JSON pointer, per
//! snapshot compared, and a report that prints for people (`Display`) and
//! serialises for machines (`serde::Serialize`).

use std::fmt;

use serde::Serialize;

use super::mode::{Direction, Mode};
use super::rule::Rule;

/// One difference between a writer's schema and a reader's: the rule it
/// falls under and where, as a JSON pointer into the writer's schema as
/// written (`$ref`s followed, so `/properties/customer/properties/name`
/// rather than a path through `definitions`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The kind of difference, under Confluent's name.
    pub rule: Rule,
    /// RFC 6901 JSON pointer (`""` is the root); printed as a URI
    /// fragment, `#/properties/amount/maximum`.
    pub path: String,
}

impl Finding {
    /// A finding at the root of the schemas compared.
    pub(crate) fn new(rule: Rule) -> Self {
        Finding {
            rule,
            path: String::new(),
        }
    }

    /// A finding at `segments` (unescaped) below the root.
    pub(crate) fn at(segments: &[&str], rule: Rule) -> Self {
        Finding::new(rule).under(segments)
    }

    /// The same finding seen from `segments` higher up.
    pub(crate) fn under(mut self, segments: &[&str]) -> Self {
        let mut prefix = String::new();
        for segment in segments {
            prefix.push('/');
            prefix.push_str(&segment.replace('~', "~0").replace('/', "~1"));
        }
        self.path.insert_str(0, &prefix);
        self
    }

    /// Whether the reader still reads what the writer writes despite it.
    pub fn is_compatible(&self) -> bool {
        self.rule.is_compatible()
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at #{}", self.rule, self.path)
    }
}

/// One comparison a mode asked for: the current schema against one
/// snapshot, in one direction.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// The snapshot compared with (`v2`).
    pub against: String,
    /// Which side writes and which reads.
    pub direction: Direction,
    /// Whether no finding is incompatible.
    pub compatible: bool,
    /// Every difference found, compatible ones included.
    pub findings: Vec<Finding>,
}

impl Comparison {
    /// A comparison with what it found.
    pub fn new(against: impl Into<String>, direction: Direction, findings: Vec<Finding>) -> Self {
        Comparison {
            against: against.into(),
            direction,
            compatible: findings.iter().all(Finding::is_compatible),
            findings,
        }
    }

    /// The findings that break it.
    pub fn breaking(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| !f.is_compatible())
    }
}

/// The verdict on one message type's current schema in one mode: every
/// comparison the mode asked for and what each found.
///
/// `Display` prints what broke, where and under which rule (`{:#}` also
/// lists the compatible differences); `Serialize` gives the same as JSON.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// What was checked: the event type or schema name.
    pub subject: String,
    /// The mode checked in.
    pub mode: Mode,
    /// Whether every comparison is compatible.
    pub compatible: bool,
    /// The comparisons, oldest snapshot first.
    pub comparisons: Vec<Comparison>,
}

impl Report {
    /// A report over these comparisons.
    pub fn new(subject: impl Into<String>, mode: Mode, comparisons: Vec<Comparison>) -> Self {
        Report {
            subject: subject.into(),
            mode,
            compatible: comparisons.iter().all(|c| c.compatible),
            comparisons,
        }
    }

    /// Every finding that breaks compatibility, with the comparison it
    /// belongs to.
    pub fn breaking(&self) -> impl Iterator<Item = (&Comparison, &Finding)> {
        self.comparisons
            .iter()
            .flat_map(|c| c.breaking().map(move |f| (c, f)))
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let breaking = self.breaking().count();
        if self.comparisons.is_empty() {
            return write!(
                f,
                "{}: {}: compatible (no snapshot to compare with)",
                self.subject, self.mode
            );
        }
        if self.compatible {
            write!(f, "{}: {}: compatible", self.subject, self.mode)?;
        } else {
            write!(
                f,
                "{}: {}: INCOMPATIBLE, {breaking} breaking change{}",
                self.subject,
                self.mode,
                if breaking == 1 { "" } else { "s" }
            )?;
        }
        for comparison in &self.comparisons {
            let (writer, reader) = match comparison.direction {
                Direction::Backward => (comparison.against.as_str(), "the current schema"),
                Direction::Forward => ("the current schema", comparison.against.as_str()),
            };
            let others = comparison
                .findings
                .iter()
                .filter(|f| f.is_compatible())
                .count();
            write!(
                f,
                "\n  {} against {}: {} (data written with {writer}, read with {reader})",
                comparison.direction,
                comparison.against,
                if comparison.compatible {
                    "ok"
                } else {
                    "BREAKS"
                },
            )?;
            for finding in comparison.breaking() {
                write!(f, "\n    {finding}")?;
            }
            if f.alternate() {
                for finding in comparison.findings.iter().filter(|f| f.is_compatible()) {
                    write!(f, "\n    (compatible) {finding}")?;
                }
            } else if others > 0 {
                write!(
                    f,
                    "\n    and {others} compatible difference{}",
                    if others == 1 { "" } else { "s" }
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn report() -> Report {
        let v1 = json!({"type": "object", "properties": {"id": {"type": "string"}}, "additionalProperties": false});
        let v2 = json!({"type": "object", "properties": {"id": {"type": "string"}, "note": {"type": "string"}},
                        "additionalProperties": false});
        Mode::Full
            .check("com.example.OrderPlaced", &v2, [("v1", &v1)])
            .expect("checks")
    }

    #[test]
    fn display_says_what_broke_where_and_under_which_rule() {
        let text = report().to_string();
        assert!(
            text.starts_with("com.example.OrderPlaced: FULL: INCOMPATIBLE, 1 breaking change"),
            "{text}"
        );
        assert!(text.contains("backward against v1: ok"), "{text}");
        assert!(
            text.contains(
                "forward against v1: BREAKS (data written with the current schema, read with v1)"
            ),
            "{text}"
        );
        assert!(
            text.contains("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL at #/properties/note"),
            "{text}"
        );
        assert!(!text.contains("(compatible)"), "{text}");
        let all = format!("{:#}", report());
        assert!(
            all.contains(
                "(compatible) OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL at #/properties/note"
            ),
            "{all}"
        );
    }

    #[test]
    fn serialises_for_machines() {
        let v = serde_json::to_value(report()).expect("serialises");
        assert_eq!(v["mode"], "FULL");
        assert_eq!(v["compatible"], false);
        assert_eq!(v["comparisons"][1]["direction"], "forward");
        assert_eq!(
            v["comparisons"][1]["findings"][0]["rule"],
            "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"
        );
        assert_eq!(
            v["comparisons"][1]["findings"][0]["path"],
            "/properties/note"
        );
    }
}
