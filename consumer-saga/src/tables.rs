//! [`SagaTables`]: the sagas' tables in the store's database, as a
//! [`StoreExtension`]: migrated by [`Store::migrate`] and its tombstones
//! purged by [`Store::purge`].

use consumer_core::store::{ExtensionFuture, StoreExtension};
use sqlx::Pool;

use super::SagaDatabase;
use super::statements;

#[cfg(doc)]
use consumer_core::Store;

/// The sagas' tables, `consumer_sagas` and their history's
/// `consumer_saga_history`, registered with the store that runs the sagas:
/// `Store::new(pool).with_extension(SagaTables)`. Then [`Store::migrate`]
/// creates them (tracked in
/// [`MIGRATIONS_TABLE`](super::MIGRATIONS_TABLE), apart from the store's
/// own migrations), and [`Store::purge`] deletes the tombstones of sagas
/// that finished before the store's retention, with their history and the
/// dedup rows of the same age (never a saga whose compensation failed: an operator settles
/// it).
#[derive(Debug, Clone, Copy, Default)]
pub struct SagaTables;

impl<DB: SagaDatabase> StoreExtension<DB> for SagaTables {
    fn name(&self) -> &'static str {
        "sagas"
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
        older_than_ms: i64,
        batch: i64,
    ) -> ExtensionFuture<'a, Result<u64, sqlx::Error>> {
        Box::pin(statements::purge_tombstones(pool, older_than_ms, batch))
    }
}
