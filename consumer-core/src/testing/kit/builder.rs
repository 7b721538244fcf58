//! Setting a [`TestKit`] up: the store's extensions, the timeout, the
//! broker's partitions; then the clock paused, the database opened and
//! migrated.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::sqlite::SqlitePoolOptions;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::published::Recording;
use super::{KitError, TestKit, clock};
use crate::testing::Faults;
use crate::{MemoryBroker, SqliteStore};

/// The default wall-clock bound on each wait.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Sets a [`TestKit`] up: its store's extensions (a saga's tables), its
/// timeout.
#[must_use = "a builder does nothing until `start` is awaited"]
pub struct TestKitBuilder {
    store: Box<dyn FnOnce(SqliteStore) -> SqliteStore + Send>,
    timeout: Duration,
    partitions: usize,
}

impl Default for TestKitBuilder {
    fn default() -> Self {
        Self {
            store: Box::new(|store| store),
            timeout: DEFAULT_TIMEOUT,
            partitions: 4,
        }
    }
}

impl TestKitBuilder {
    /// Shapes the store before it is migrated: register extensions here,
    /// as `|store| store.with_extension(consumer::saga::SagaTables)`.
    pub fn with_store(
        mut self,
        shape: impl FnOnce(SqliteStore) -> SqliteStore + Send + 'static,
    ) -> Self {
        self.store = Box::new(shape);
        self
    }

    /// The wall-clock bound on each of the kit's waits (default 10 s).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Partitions per topic of the memory broker (default 4).
    pub fn with_partitions(mut self, partitions: usize) -> Self {
        self.partitions = partitions;
        self
    }

    /// Pauses the clock, opens the database (one connection: an in-memory
    /// SQLite database lives in its connection) and migrates the store
    /// (dedup, outbox and the extensions' tables).
    ///
    /// # Panics
    ///
    /// Outside a current-thread Tokio runtime (use `#[tokio::test]`), where
    /// time cannot be paused.
    pub async fn start(self) -> Result<TestKit, KitError> {
        // Before any query: the ticker keeps the paused clock from jumping
        // to a pool timeout while SQLite's thread works.
        let ticker = clock::pause();
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(24 * 3600))
            .idle_timeout(None)
            .max_lifetime(None)
            .connect("sqlite::memory:")
            .await
            .map_err(crate::Error::from)?;
        let store = (self.store)(SqliteStore::new(pool.clone()));
        store.migrate().await?;
        let broker = MemoryBroker::new(self.partitions);
        let relay_faults = Faults::new();
        Ok(TestKit {
            recording: Recording::new(broker.clone(), relay_faults.clone()),
            relay_faults,
            faults: Faults::new(),
            broker,
            pool,
            store,
            tracker: Arc::default(),
            relays: Vec::new(),
            topics: Vec::new(),
            consumers: JoinSet::new(),
            stop: watch::channel(false).0,
            timeout: self.timeout,
            outbox_seen: Mutex::default(),
            _ticker: ticker,
        })
    }
}
