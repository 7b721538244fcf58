//! [`StoreExtension`]: what a part built on the runtime (sagas) hooks into
//! the store: its own tables, migrated with the store's and purged with
//! the store's retention.

use std::future::Future;
use std::pin::Pin;

use sqlx::Pool;

use super::StoreDatabase;
use crate::error::Error;

/// A future an extension returns.
pub type ExtensionFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A part that keeps tables of its own in the store's database, registered
/// with [`Store::with_extension`](super::Store::with_extension):
/// [`Store::migrate`](super::Store::migrate) migrates them after the
/// store's own tables, and [`Store::purge`](super::Store::purge) deletes
/// their rows older than the retention with the store's.
pub trait StoreExtension<DB: StoreDatabase>: Send + Sync + 'static {
    /// A name for logs and errors: the part (`sagas`).
    fn name(&self) -> &'static str;

    /// Creates or upgrades the part's tables; idempotent, tracked apart
    /// from the store's own migrations.
    fn migrate<'a>(&'a self, pool: &'a Pool<DB>) -> ExtensionFuture<'a, Result<(), Error>>;

    /// Deletes at most `batch` of the part's rows that are older than
    /// `older_than_ms` (milliseconds since the epoch) and no longer needed;
    /// how many went.
    fn purge_batch<'a>(
        &'a self,
        pool: &'a Pool<DB>,
        older_than_ms: i64,
        batch: i64,
    ) -> ExtensionFuture<'a, Result<u64, sqlx::Error>>;
}
