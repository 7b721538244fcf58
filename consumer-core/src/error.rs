//! The crate's error type.

use std::time::Duration;

/// A boxed error, as handlers and backends return them.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

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
    /// The broker failed or could not be reached.
    #[error("broker error: {message}")]
    Broker {
        /// What the broker said.
        message: String,
        /// Whether trying again later may succeed.
        retriable: bool,
        /// The client library's error.
        #[source]
        source: Option<BoxError>,
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
    /// A configuration value is unusable.
    #[error("invalid configuration: {0}")]
    Config(String),
}

impl Error {
    /// Whether the same operation may succeed later (a database or broker
    /// that is down), as opposed to a mistake that will fail every time.
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Database(e) => !matches!(
                e,
                sqlx::Error::Configuration(_)
                    | sqlx::Error::ColumnNotFound(_)
                    | sqlx::Error::ColumnIndexOutOfBounds { .. }
                    | sqlx::Error::TypeNotFound { .. }
                    | sqlx::Error::Decode(_)
            ),
            Self::Broker { retriable, .. } => *retriable,
            Self::Migrate(_) | Self::RetentionTooShort { .. } | Self::Config(_) => false,
        }
    }

    /// A broker error.
    pub fn broker(message: impl Into<String>, retriable: bool, source: Option<BoxError>) -> Self {
        Self::Broker {
            message: message.into(),
            retriable,
            source,
        }
    }
}
