//! [`JobTables`]: the job queue's table in the store's database, as a
//! [`StoreExtension`]: migrated by [`Store::migrate`].

use consumer_core::store::{ExtensionFuture, StoreExtension};
use sqlx::Pool;

use super::{JobDatabase, statements};

#[cfg(doc)]
use consumer_core::Store;

/// The job queue's table, `consumer_jobs`, registered with the store:
/// `Store::new(pool).with_extension(JobTables)`; then [`Store::migrate`]
/// creates it (tracked in [`MIGRATIONS_TABLE`](super::MIGRATIONS_TABLE),
/// apart from the store's own migrations). [`Store::purge`] deletes the
/// unique keys whose window has ended ([`Job::unique_for`](crate::Job::unique_for)); a finished
/// job's row is deleted when it is acked.
#[derive(Debug, Clone, Copy, Default)]
pub struct JobTables;

impl<DB: JobDatabase> StoreExtension<DB> for JobTables {
    fn name(&self) -> &'static str {
        "jobs"
    }

    fn migrate<'a>(
        &'a self,
        pool: &'a Pool<DB>,
    ) -> ExtensionFuture<'a, Result<(), consumer_core::Error>> {
        Box::pin(statements::migrate(pool))
    }

    fn purge_batch<'a>(
        &'a self,
        pool: &'a Pool<DB>,
        _older_than_ms: i64,
        batch: i64,
    ) -> ExtensionFuture<'a, Result<u64, sqlx::Error>> {
        // An ended window is needed by nothing, whatever the retention.
        Box::pin(statements::purge_uniques(pool, batch))
    }
}
