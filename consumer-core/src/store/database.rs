//! [`StoreDatabase`]: the one statement of the store each database writes
//! its own way. Everything else is written once, in `statements.rs`, on
//! the [SQL seam](crate::sql).

use std::future::Future;

use crate::sql::Dialect;

/// A database the store supports (PostgreSQL, SQLite): a [`Dialect`]
/// (sealed) that also claims a batch of keys in one statement, which
/// PostgreSQL writes with `unnest` over two arrays and SQLite with
/// multi-row `VALUES` in chunks under its parameter limit.
pub trait StoreDatabase: Dialect {
    /// Claims every `(key, message_id)` of `claims` (distinct keys, sorted
    /// by key) with one multi-row insert; per claim, whether it was fresh.
    fn claim_many(
        conn: &mut Self::Connection,
        handler: &str,
        claims: &[(&str, &str)],
    ) -> impl Future<Output = Result<Vec<bool>, sqlx::Error>> + Send;
}
