//! [`StoreDatabase`]: the SQL each supported database runs, sealed.

use std::future::Future;

use sqlx::{Database, Pool};

use super::{FailureRecord, LetterRow};
use crate::error::Error;

pub(super) mod sealed {
    pub trait Sealed {}
}

/// A database the store supports (PostgreSQL, SQLite). Sealed: the SQL
/// differs per database and is this crate's to keep correct.
pub trait StoreDatabase: Database + sealed::Sealed {
    #[doc(hidden)]
    fn migrate(pool: &Pool<Self>) -> impl Future<Output = Result<(), Error>> + Send;

    #[doc(hidden)]
    fn claim(
        conn: &mut Self::Connection,
        handler: &str,
        key: &str,
        message_id: &str,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Claims every `(key, message_id)` of `claims` (distinct keys, sorted
    /// by key) with one multi-row insert; per claim, whether it was fresh.
    #[doc(hidden)]
    fn claim_many(
        conn: &mut Self::Connection,
        handler: &str,
        claims: &[(&str, &str)],
    ) -> impl Future<Output = Result<Vec<bool>, sqlx::Error>> + Send;

    #[doc(hidden)]
    fn record_failure(
        pool: &Pool<Self>,
        handler: &str,
        message_id: &str,
        error: &str,
    ) -> impl Future<Output = Result<FailureRecord, sqlx::Error>> + Send;

    #[doc(hidden)]
    fn mark_dead_lettered(
        conn: &mut Self::Connection,
        handler: &str,
        message_id: &str,
        error: &str,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Whether `dead_lettered_at` is set.
    #[doc(hidden)]
    fn dead_lettered(
        pool: &Pool<Self>,
        handler: &str,
        message_id: &str,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    #[doc(hidden)]
    fn insert_dead_letter(
        conn: &mut Self::Connection,
        row: &LetterRow<'_>,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    #[doc(hidden)]
    fn clear_failures(
        pool: &Pool<Self>,
        handler: &str,
        message_id: &str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    #[doc(hidden)]
    fn purge_batch(
        pool: &Pool<Self>,
        older_than_ms: i64,
        batch: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;
}
