//! [`SagaStatus`]: where a saga is in its life, as its row records it.

use std::fmt;

/// Where a saga is. `Running` and `Compensating` are active; every other
/// status is final: the row stays as a tombstone until the store's
/// retention ends, so a late event or timeout is recognised (acked, counted,
/// never applied) rather than taken for an unknown saga.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SagaStatus {
    /// Going forward: its transitions run.
    Running,
    /// Undoing what it did: its recorded undo steps are sent one at a time,
    /// last first; its transitions run (they report each undo's outcome).
    Compensating,
    /// Finished: [`Step::complete`](super::Step::complete).
    Completed,
    /// Finished: every undo step succeeded.
    Compensated,
    /// Finished without compensation: [`Step::fail`](super::Step::fail).
    Failed,
    /// Finished: an undo step failed for good (the others were still run).
    /// The saga was dead-lettered to the store's dead-letter table with its
    /// context; an operator resumes it (`consumer sagas resume`) once the
    /// cause is fixed, or abandons it.
    CompensationFailed,
    /// Finished: stopped by an operator (`consumer sagas abandon`).
    Abandoned,
}

impl SagaStatus {
    /// Every status, in the order above.
    pub const ALL: [Self; 7] = [
        Self::Running,
        Self::Compensating,
        Self::Completed,
        Self::Compensated,
        Self::Failed,
        Self::CompensationFailed,
        Self::Abandoned,
    ];

    /// The name the row and the metrics use (`compensation_failed`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Compensating => "compensating",
            Self::Completed => "completed",
            Self::Compensated => "compensated",
            Self::Failed => "failed",
            Self::CompensationFailed => "compensation_failed",
            Self::Abandoned => "abandoned",
        }
    }

    /// The status named `name`, as [`SagaStatus::as_str`] writes it.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// Whether the saga still takes events (running or compensating).
    pub const fn is_active(self) -> bool {
        matches!(self, Self::Running | Self::Compensating)
    }
}

impl fmt::Display for SagaStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_only_two_are_active() {
        for s in SagaStatus::ALL {
            assert_eq!(SagaStatus::parse(s.as_str()), Some(s));
            let json = serde_json::to_string(&s).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", s.as_str()));
        }
        let active: Vec<_> = SagaStatus::ALL
            .into_iter()
            .filter(|s| s.is_active())
            .collect();
        assert_eq!(active, [SagaStatus::Running, SagaStatus::Compensating]);
        assert_eq!(SagaStatus::parse("done"), None);
    }
}
