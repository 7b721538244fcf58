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
    /// The stream has no lease row for this shard (the application never
    /// read it, or the name is mistyped).
    #[error("no lease of shard `{shard_id}` for this application and stream")]
    NoSuchShard {
        /// The shard asked for.
        shard_id: String,
    },
    /// A live instance holds the shard's lease: its checkpoint is moved only
    /// while nobody reads the shard (stop the consumers, or wait until the
    /// lease expires).
    #[error(
        "shard `{shard_id}` is leased to `{owner}`: stop the consumers (or wait until the lease expires) before moving its checkpoint"
    )]
    Leased {
        /// The shard.
        shard_id: String,
        /// The instance holding it.
        owner: String,
    },
    /// The lease or checkpoint changed between the read and the move (an
    /// instance took it meanwhile); nothing was written.
    #[error("shard `{shard_id}` changed while its checkpoint was being moved; nothing was written")]
    Changed {
        /// The shard.
        shard_id: String,
    },
    /// A row holds what this crate never writes (a counter below zero).
    #[error("the lease row of shard `{shard_id}` is not valid: {reason}")]
    Row {
        /// The shard.
        shard_id: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}
