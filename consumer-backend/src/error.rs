//! The error a backend returns, and the kinds of broker failure the
//! runtime's settle loop and the outbox relay read from it.

use std::fmt;

/// A boxed error, as handlers and backends return them.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a backend's source, acker or publisher failed with: a broker
/// failure of a [kind](BrokerErrorKind) that says whether it can heal, or a
/// mistake in what it was given. It carries no failure of the runtime's own
/// (a database, a handler): those are the runtime's error, which this one
/// converts into.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The broker failed, could not be reached, or refused a message.
    #[error(transparent)]
    Broker(#[from] BrokerError),
    /// A configuration value is unusable (a name the broker would refuse,
    /// a setting the client rejects).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A value could not be serialised to JSON.
    #[error("{what} cannot be serialised to JSON")]
    Serialize {
        /// What was being serialised.
        what: &'static str,
        /// serde's error.
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    /// A broker error of `kind`; `context` says what was being done.
    pub fn broker(
        kind: BrokerErrorKind,
        context: impl Into<String>,
        source: Option<BoxError>,
    ) -> Self {
        Self::Broker(BrokerError::new(kind, context, source))
    }

    /// The kind of broker failure, for a broker error.
    pub fn broker_kind(&self) -> Option<BrokerErrorKind> {
        match self {
            Self::Broker(e) => Some(e.kind()),
            _ => None,
        }
    }

    /// Whether the same operation may succeed later: only a broker that is
    /// unavailable may; a configuration mistake or a refusal will fail the
    /// same way every time.
    pub fn is_retriable(&self) -> bool {
        self.broker_kind()
            .is_some_and(BrokerErrorKind::is_retriable)
    }

    /// Whether the broker refused the message for its size: the same
    /// message will never be taken, a smaller one may.
    pub fn is_too_large(&self) -> bool {
        self.broker_kind() == Some(BrokerErrorKind::TooLarge)
    }

    /// The conventions' `error.type` of this failure: its kind
    /// ([`BrokerErrorKind::as_str`]), or `_OTHER`.
    pub fn error_type(&self) -> &'static str {
        self.broker_kind().map_or("_OTHER", BrokerErrorKind::as_str)
    }
}

/// What kind of failure a broker reported: whether it can heal, and which
/// fallback a refused settle step takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BrokerErrorKind {
    /// Unreachable, timed out, a leader that moved, a closed channel, a
    /// refusal for now (a full queue, a `basic.nack`): trying again later
    /// may succeed.
    Unavailable,
    /// The message is over the destination's size limit: it will never be
    /// taken as it is.
    TooLarge,
    /// The destination does not exist, or routes the message nowhere.
    NoDestination,
    /// The client may not write there (or read from there).
    NotAuthorized,
    /// Refused for another reason that will not change (an invalid record,
    /// a policy violation, a header the protocol cannot carry).
    Rejected,
    /// The client is misconfigured or has failed for good.
    Fatal,
}

impl BrokerErrorKind {
    /// Whether an operation that failed this way may succeed later.
    pub const fn is_retriable(self) -> bool {
        matches!(self, Self::Unavailable)
    }

    /// A short name for logs and dead-letter records.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Unavailable => "unavailable",
            Self::TooLarge => "too_large",
            Self::NoDestination => "no_destination",
            Self::NotAuthorized => "not_authorized",
            Self::Rejected => "rejected",
            Self::Fatal => "fatal",
        }
    }
}

impl fmt::Display for BrokerErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A broker failure: its kind, what was being done, and the client
/// library's error.
#[derive(Debug, thiserror::Error)]
#[error("broker error ({kind}): {context}")]
pub struct BrokerError {
    kind: BrokerErrorKind,
    context: String,
    #[source]
    source: Option<BoxError>,
}

impl BrokerError {
    /// A failure of `kind` while doing `context`.
    pub fn new(
        kind: BrokerErrorKind,
        context: impl Into<String>,
        source: Option<BoxError>,
    ) -> Self {
        Self {
            kind,
            context: context.into(),
            source,
        }
    }

    /// Its kind.
    pub fn kind(&self) -> BrokerErrorKind {
        self.kind
    }

    /// What was being done.
    pub fn context(&self) -> &str {
        &self.context
    }
}
