//! The crate's error type.

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong keeping leases in the database.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database failed or could not be reached.
    #[error("the Kinesis lease table could not be read or written")]
    Database(#[from] sqlx::Error),
    /// The migration failed.
    #[error("the Kinesis lease table could not be migrated")]
    Migrate(#[source] consumer_core::Error),
    /// A row holds what this crate never writes (a counter below zero).
    #[error("the lease row of shard `{shard_id}` is not valid: {reason}")]
    Row {
        /// The shard.
        shard_id: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}
