//! Compatibility modes, as Confluent Schema Registry defines them, and the
//! comparisons each one asks for.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use serde_json::Value;

use super::CompatError;
use super::report::{Comparison, Report};
use super::walk::compare;

/// Which readers must read which writers' data for a schema change to be
/// accepted.
///
/// * `Backward`: a consumer on the current schema reads data written with
///   the latest snapshot (the snapshot writes, the current schema reads).
/// * `Forward`: a consumer still on the latest snapshot reads data written
///   with the current schema.
/// * `Full`: both.
///
/// The `*Transitive` forms ask the same of every committed snapshot, not
/// only the latest: a history `v1 → v2 → current` where each step is fine
/// may still break a consumer on `v1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The current schema reads data written with the latest snapshot.
    Backward,
    /// The current schema reads data written with every snapshot.
    BackwardTransitive,
    /// The latest snapshot reads data written with the current schema.
    Forward,
    /// Every snapshot reads data written with the current schema.
    ForwardTransitive,
    /// Backward and forward against the latest snapshot.
    Full,
    /// Backward and forward against every snapshot.
    FullTransitive,
}

impl Mode {
    /// Every mode.
    pub const ALL: [Mode; 6] = [
        Mode::Backward,
        Mode::BackwardTransitive,
        Mode::Forward,
        Mode::ForwardTransitive,
        Mode::Full,
        Mode::FullTransitive,
    ];

    /// Confluent's name: `BACKWARD`, `FULL_TRANSITIVE`, ...
    pub fn name(self) -> &'static str {
        match self {
            Mode::Backward => "BACKWARD",
            Mode::BackwardTransitive => "BACKWARD_TRANSITIVE",
            Mode::Forward => "FORWARD",
            Mode::ForwardTransitive => "FORWARD_TRANSITIVE",
            Mode::Full => "FULL",
            Mode::FullTransitive => "FULL_TRANSITIVE",
        }
    }

    /// Whether every snapshot is compared, not only the latest.
    pub fn is_transitive(self) -> bool {
        matches!(
            self,
            Mode::BackwardTransitive | Mode::ForwardTransitive | Mode::FullTransitive
        )
    }

    /// The directions each snapshot is compared in.
    pub fn directions(self) -> &'static [Direction] {
        match self {
            Mode::Backward | Mode::BackwardTransitive => &[Direction::Backward],
            Mode::Forward | Mode::ForwardTransitive => &[Direction::Forward],
            Mode::Full | Mode::FullTransitive => &[Direction::Backward, Direction::Forward],
        }
    }

    /// Checks `current` against `history` (oldest first, each with its
    /// label, `v1`, `v2`, ...) in this mode: the latest snapshot only, or
    /// every one when transitive. An empty history is compatible.
    ///
    /// # Errors
    ///
    /// [`CompatError::Reference`] when a schema's `$ref` cannot be
    /// resolved.
    pub fn check<'h>(
        self,
        subject: &str,
        current: &Value,
        history: impl IntoIterator<Item = (&'h str, &'h Value)>,
    ) -> Result<Report, CompatError> {
        let history: Vec<(&str, &Value)> = history.into_iter().collect();
        let compared = if self.is_transitive() {
            &history[..]
        } else {
            &history[history.len().saturating_sub(1)..]
        };
        let mut comparisons = Vec::new();
        for (label, snapshot) in compared {
            for direction in self.directions() {
                let findings = match direction {
                    Direction::Backward => compare(snapshot, current)?,
                    Direction::Forward => compare(current, snapshot)?,
                };
                comparisons.push(Comparison::new(*label, *direction, findings));
            }
        }
        Ok(Report::new(subject, self, comparisons))
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Mode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// A name that is not a mode.
#[derive(Debug, thiserror::Error)]
#[error(
    "unknown compatibility mode `{0}`: expected one of BACKWARD, BACKWARD_TRANSITIVE, FORWARD, \
     FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE"
)]
pub struct UnknownMode(pub String);

impl FromStr for Mode {
    type Err = UnknownMode;

    /// Confluent's names, in any case, with `-` or `_`: `backward`,
    /// `full-transitive`, `FORWARD_TRANSITIVE`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_uppercase().replace('-', "_");
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == wanted)
            .ok_or_else(|| UnknownMode(s.to_owned()))
    }
}

/// Which schema writes and which reads in one comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// The snapshot writes, the current schema reads: new consumers read
    /// old data.
    Backward,
    /// The current schema writes, the snapshot reads: old consumers read
    /// new data.
    Forward,
}

impl Direction {
    /// `backward` or `forward`.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Backward => "backward",
            Direction::Forward => "forward",
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Direction {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_parse_back() {
        for mode in Mode::ALL {
            assert_eq!(mode.name().parse::<Mode>().ok(), Some(mode));
        }
        assert_eq!(
            "full-transitive".parse::<Mode>().ok(),
            Some(Mode::FullTransitive)
        );
        assert!("sideways".parse::<Mode>().is_err());
    }

    #[test]
    fn transitive_compares_every_snapshot_and_plain_only_the_latest() {
        let v1 = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let v2 = json!({"type": "object", "properties": {"a": {"type": ["string", "null"]}}});
        let current = json!({"type": "object", "properties": {"a": {"type": ["string", "null"]}}});
        let history = [("v1", &v1), ("v2", &v2)];
        let plain = Mode::Full.check("t", &current, history).expect("checks");
        assert_eq!(plain.comparisons.len(), 2);
        assert!(plain.comparisons.iter().all(|c| c.against == "v2"));
        assert!(plain.compatible);
        let transitive = Mode::FullTransitive
            .check("t", &current, history)
            .expect("checks");
        assert_eq!(transitive.comparisons.len(), 4);
        // v1 cannot read the nulls the current schema may write.
        assert!(!transitive.compatible);
    }

    #[test]
    fn empty_history_is_compatible() {
        let report = Mode::BackwardTransitive
            .check("t", &json!({"type": "string"}), [])
            .expect("checks");
        assert!(report.compatible);
        assert!(report.comparisons.is_empty());
    }
}
