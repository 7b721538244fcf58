//! What one attempt produced, and how a failure is classified.

use crate::error::BoxError;
use crate::retry::RetryPolicy;

/// How a failure is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// Undecodable or malformed input: never retried.
    Poison,
    /// A handler error matched by `terminal = ...`: never retried.
    Terminal,
    /// Anything else, database and broker errors included: retried.
    Transient,
}

/// A failed attempt.
#[derive(Debug)]
pub struct Failure {
    /// Its class.
    pub kind: FailureKind,
    /// The error, with its cause chain.
    pub error: BoxError,
    /// For a transient failure, the policy that retries it instead of the
    /// handler's (declared in [`Handler::retry_policies`](super::Handler::retry_policies)).
    pub retry: Option<RetryPolicy>,
}

impl Failure {
    /// A failure of the given kind.
    pub fn new(kind: FailureKind, error: impl Into<BoxError>) -> Self {
        Self {
            kind,
            error: error.into(),
            retry: None,
        }
    }

    /// A transient failure retried under `policy` rather than the
    /// handler's own: a handler whose messages fail in ways that each have
    /// their own policy (a saga event that arrives before its saga starts
    /// waits under the saga's not-found policy).
    pub fn with_retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }
}

/// What one attempt produced.
#[derive(Debug)]
pub enum Outcome {
    /// Committed.
    Processed,
    /// The key was committed before: nothing ran.
    Duplicate,
    /// Rolled back.
    Failed(Failure),
}

/// The payload could not be decoded into the handler's message type.
#[derive(Debug, thiserror::Error)]
#[error("payload is not a valid `{type_name}` JSON document")]
pub struct DecodeError {
    pub(super) type_name: &'static str,
    #[source]
    pub(super) source: serde_json::Error,
}

impl DecodeError {
    /// `source` decoding a `type_name`: what a hand-written handler
    /// returns (as poison) for a payload that does not decode.
    pub fn new(type_name: &'static str, source: serde_json::Error) -> Self {
        Self { type_name, source }
    }
}
