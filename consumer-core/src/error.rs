//! The crate's error type: a broker's ([`BrokerError`], from the backends)
//! or the runtime's own (the database, a configuration the runtime
//! refuses).

use std::time::Duration;

pub use consumer_backend::error::{BoxError, BrokerError, BrokerErrorKind};

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong outside a handler's own logic.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database failed or could not be reached.
    #[error("database error")]
    Database(#[from] sqlx::Error),
    /// The store's migrations failed.
    #[error("store migration failed")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The broker failed, could not be reached, or refused a message.
    #[error(transparent)]
    Broker(#[from] BrokerError),
    /// A value could not be serialised to JSON (an event payload, headers).
    #[error("{what} cannot be serialised to JSON")]
    Serialize {
        /// What was being serialised.
        what: &'static str,
        /// serde's error.
        #[source]
        source: serde_json::Error,
    },
    /// The dedup store would forget keys while retries may still arrive.
    #[error(
        "dedup retention of {retention:?} is shorter than the longest retry window of handler \
         `{handler}` ({window:?}): a late retry would run twice; raise it with Store::with_retention"
    )]
    RetentionTooShort {
        /// The handler.
        handler: String,
        /// The store's retention.
        retention: Duration,
        /// The handler's longest retry window.
        window: Duration,
    },
    /// A handler's retry policy asks for something its source cannot do
    /// (retries through the broker on a source without a retry
    /// destination, delays longer than the broker can hold).
    #[error("handler `{handler}` cannot run on this {system} source: {reason}")]
    RetryUnsupported {
        /// The handler.
        handler: String,
        /// `messaging.system` of the source.
        system: &'static str,
        /// What does not fit, and how to fix it.
        reason: String,
    },
    /// A configuration value is unusable.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Another failure a backend reported.
    #[error(transparent)]
    Backend(consumer_backend::Error),
}

impl From<consumer_backend::Error> for Error {
    fn from(e: consumer_backend::Error) -> Self {
        match e {
            consumer_backend::Error::Broker(b) => Self::Broker(b),
            consumer_backend::Error::Config(c) => Self::Config(c),
            consumer_backend::Error::Serialize { what, source } => Self::Serialize { what, source },
            other => Self::Backend(other),
        }
    }
}

impl Error {
    /// Whether the same operation may succeed later (a database or broker
    /// that is down), as opposed to a mistake or a refusal that will fail
    /// every time. The settle loop retries only what this says can heal.
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Database(e) => database_error_can_heal(e),
            Self::Broker(e) => e.kind().is_retriable(),
            Self::Backend(e) => e.is_retriable(),
            Self::Migrate(_)
            | Self::Serialize { .. }
            | Self::RetentionTooShort { .. }
            | Self::RetryUnsupported { .. }
            | Self::Config(_) => false,
        }
    }

    /// Whether the database did not answer: a connection broken, refused
    /// or closed mid-handshake, none to be had from the pool in time, a
    /// server shutting down or still starting. Nothing about the work is wrong: the same
    /// statement succeeds once the database is back.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Database(e) if database_is_unavailable(e))
    }

    /// Whether the database refused a statement for the data it was given
    /// (a value too long for its index, text it cannot store): the same
    /// input is refused every time, whoever retries it. A refusal of the
    /// statement itself (a missing table, no permission) is not the
    /// input's doing.
    pub fn is_refused_input(&self) -> bool {
        match self {
            Self::Database(sqlx::Error::Database(db)) => {
                db.code().is_some_and(|code| sql_state_is_input(&code))
            }
            _ => false,
        }
    }

    /// The kind of broker failure, for a broker error.
    pub fn broker_kind(&self) -> Option<BrokerErrorKind> {
        match self {
            Self::Broker(e) => Some(e.kind()),
            _ => None,
        }
    }

    /// Whether the broker refused the message for its size: the same
    /// message will never be taken, a smaller one may.
    pub fn is_too_large(&self) -> bool {
        self.broker_kind() == Some(BrokerErrorKind::TooLarge)
    }

    /// A broker error of `kind`; `context` says what was being done.
    pub fn broker(
        kind: BrokerErrorKind,
        context: impl Into<String>,
        source: Option<BoxError>,
    ) -> Self {
        Self::Broker(BrokerError::new(kind, context, source))
    }
}

/// Whether a database error may go away by itself: a connection, a lock,
/// a full disk, a server restarting may; bad data, a missing table, a
/// refused permission, a constraint will fail the same way every time.
fn database_error_can_heal(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => db.code().is_none_or(|code| sql_state_can_heal(&code)),
        sqlx::Error::Configuration(_)
        | sqlx::Error::InvalidArgument(_)
        | sqlx::Error::RowNotFound
        | sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::TypeNotFound { .. }
        | sqlx::Error::Encode(_)
        | sqlx::Error::Decode(_)
        | sqlx::Error::Migrate(_) => false,
        _ => true,
    }
}

/// See [`Error::is_unavailable`]. PostgreSQL's class 08 (connection
/// exception) and 57P01-57P03 (the server shutting down, crashed, or not
/// yet accepting connections). A protocol error is a connection closed
/// or garbled on the way (a server going down mid-handshake, or a pooler
/// or load balancer whose server is gone accepting and closing: sqlx's
/// "unexpected response from SSLRequest"), not a statement's fault.
pub(crate) fn database_is_unavailable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            code.starts_with("08") || matches!(&*code, "57P01" | "57P02" | "57P03")
        }),
        _ => false,
    }
}

/// PostgreSQL's SQLSTATE (always five characters, by class) or SQLite's
/// extended result code (a number of at most four digits, the primary
/// code in its low byte).
fn sql_state_can_heal(code: &str) -> bool {
    if code.len() < 5
        && let Ok(sqlite) = code.parse::<u32>()
    {
        // BUSY, LOCKED, NOMEM, IOERR, FULL, CANTOPEN, PROTOCOL.
        return matches!(sqlite & 0xff, 5 | 6 | 7 | 10 | 13 | 14 | 15);
    }
    // 0A feature not supported, 22 data exception (a NUL in a text, bad
    // encoding), 23 integrity constraint, 28 invalid authorization, 42
    // syntax error or access rule (a missing table, no permission), 44
    // check option, 54 program limit.
    !matches!(
        code.get(..2),
        Some("0A" | "22" | "23" | "28" | "42" | "44" | "54")
    )
}

/// PostgreSQL's class 22 (data exception) and 54 (program limit: an index
/// row too large), SQLite's TOOBIG.
fn sql_state_is_input(code: &str) -> bool {
    if code.len() < 5
        && let Ok(sqlite) = code.parse::<u32>()
    {
        return sqlite & 0xff == 18;
    }
    matches!(code.get(..2), Some("22" | "54"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unavailable_brokers_are_retried() {
        let retriable = |k| Error::broker(k, "publish", None).is_retriable();
        assert!(retriable(BrokerErrorKind::Unavailable));
        for k in [
            BrokerErrorKind::TooLarge,
            BrokerErrorKind::NoDestination,
            BrokerErrorKind::NotAuthorized,
            BrokerErrorKind::Rejected,
            BrokerErrorKind::Fatal,
        ] {
            assert!(!retriable(k), "{k}");
        }
        assert!(Error::broker(BrokerErrorKind::TooLarge, "dead letter", None).is_too_large());
    }

    #[test]
    fn database_errors_that_fail_the_same_way_every_time_are_not_retried() {
        // PostgreSQL: a NUL in a text (22021), a unique violation, a
        // missing table, no permission; a lost connection or a
        // serialization failure heal.
        for code in ["22021", "22P05", "23505", "42P01", "42501", "28P01"] {
            assert!(!sql_state_can_heal(code), "{code}");
        }
        for code in ["08006", "40001", "40P01", "53300", "57P01", "55P03"] {
            assert!(sql_state_can_heal(code), "{code}");
        }
        // SQLite: BUSY (5) and LOCKED (6) heal; CONSTRAINT_UNIQUE (2067)
        // and a plain SQL error (1: no such table) do not.
        assert!(sql_state_can_heal("5"));
        assert!(sql_state_can_heal("517"));
        assert!(!sql_state_can_heal("2067"));
        assert!(!sql_state_can_heal("1"));
        assert!(!Error::Database(sqlx::Error::Encode("bad".into())).is_retriable());
        assert!(Error::Database(sqlx::Error::PoolTimedOut).is_retriable());
    }
}
