//! What became of one message the kit watched: [`Delivery`] and its
//! [`Outcome`], with assertions that panic with a sentence, as `assert!`
//! does.

use crate::dead_letter::DeadLetterKind;

/// How a message left the consumer for good.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Its handler's transaction committed.
    Processed,
    /// Its idempotency key was committed before: skipped, nothing ran.
    Duplicate,
    /// Dead-lettered: `kind` says why (poison, terminal, exhausted) and
    /// `reason` is the error the dead letter carries.
    DeadLettered {
        /// Poison, terminal or exhausted.
        kind: DeadLetterKind,
        /// The error, as the dead letter carries it.
        reason: String,
    },
    /// No handler takes its type and the router ignores unknown types.
    Ignored,
    /// Given back to the broker unsettled (the consumer stopped).
    Released,
}

/// One message the kit followed from its first receipt to its outcome,
/// across its retries (in place, or as copies through the broker).
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Its id (`ce_id`, or the broker's position when it has none).
    pub message_id: String,
    /// The topic it was consumed from.
    pub topic: String,
    /// Its partition key.
    pub key: Option<String>,
    /// Its CloudEvents type, when it has one.
    pub event_type: Option<String>,
    /// The handler that took it, once one did.
    pub handler: Option<String>,
    /// Handler attempts made.
    pub attempts: u32,
    /// Retries scheduled after a transient failure.
    pub retries: u32,
    /// The last transient error, when an attempt failed.
    pub last_error: Option<String>,
    /// How it ended.
    pub outcome: Outcome,
}

impl Delivery {
    /// Whether its handler's transaction committed.
    pub fn is_processed(&self) -> bool {
        self.outcome == Outcome::Processed
    }

    /// The reason it was dead-lettered with, if it was with `kind`.
    pub fn dead_lettered(&self, kind: DeadLetterKind) -> Option<&str> {
        match &self.outcome {
            Outcome::DeadLettered { kind: k, reason } if *k == kind => Some(reason),
            _ => None,
        }
    }

    /// Asserts it was processed.
    ///
    /// # Panics
    ///
    /// When it was not, with a sentence saying what became of it instead.
    #[track_caller]
    pub fn assert_processed(&self) -> &Self {
        assert!(self.is_processed(), "expected {self} to be processed");
        self
    }

    /// Asserts it was skipped as a duplicate.
    ///
    /// # Panics
    ///
    /// When it was not, saying what became of it instead.
    #[track_caller]
    pub fn assert_duplicate(&self) -> &Self {
        assert!(
            self.outcome == Outcome::Duplicate,
            "expected {self} to be a duplicate"
        );
        self
    }

    /// Asserts it was retried exactly `n` times.
    ///
    /// # Panics
    ///
    /// When it was retried another number of times.
    #[track_caller]
    pub fn assert_retried(&self, n: u32) -> &Self {
        assert!(self.retries == n, "expected {self} to be retried {n} times");
        self
    }

    /// Asserts it was dead-lettered as `kind` and returns the reason.
    ///
    /// # Panics
    ///
    /// When it was not dead-lettered, or with another kind.
    #[track_caller]
    pub fn assert_dead_lettered(&self, kind: DeadLetterKind) -> &str {
        match self.dead_lettered(kind) {
            Some(reason) => reason,
            None => panic!("expected {self} to be dead-lettered as {}", kind.as_str()),
        }
    }
}

impl std::fmt::Display for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "message `{}`", self.message_id)?;
        if let Some(t) = &self.event_type {
            write!(f, " ({t})")?;
        }
        write!(f, " on `{}`", self.topic)?;
        let outcome = match &self.outcome {
            Outcome::Processed => "processed".to_owned(),
            Outcome::Duplicate => "skipped as a duplicate".to_owned(),
            Outcome::DeadLettered { kind, reason } => {
                format!("dead-lettered as {} ({reason})", kind.as_str())
            }
            Outcome::Ignored => "ignored (no handler takes its type)".to_owned(),
            Outcome::Released => "released unsettled".to_owned(),
        };
        write!(
            f,
            ", which was {outcome} after {} attempt(s) and {} retries",
            self.attempts, self.retries
        )?;
        if let Some(e) = &self.last_error {
            write!(f, ", last error: {e}")?;
        }
        Ok(())
    }
}
