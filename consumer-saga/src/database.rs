//! [`SagaDatabase`]: the databases sagas run on, and which sagas a
//! listing returns ([`SagaFilter`]).

use super::status::SagaStatus;
use consumer_core::outbox::OutboxDatabase;
use consumer_core::store::StoreDatabase;

/// Which sagas [`SagaStore::list`](super::SagaStore::list) returns.
#[derive(Debug, Clone, Default)]
pub struct SagaFilter {
    pub(super) saga_type: Option<String>,
    pub(super) statuses: Vec<SagaStatus>,
    pub(super) started_before_ms: Option<i64>,
    pub(super) limit: Option<u32>,
}

impl SagaFilter {
    /// Every saga.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only sagas of this type.
    #[must_use]
    pub fn with_type(mut self, saga_type: impl Into<String>) -> Self {
        self.saga_type = Some(saga_type.into());
        self
    }

    /// Only sagas with this status (called again: or that one).
    #[must_use]
    pub fn with_status(mut self, status: SagaStatus) -> Self {
        if !self.statuses.contains(&status) {
            self.statuses.push(status);
        }
        self
    }

    /// Only active sagas: running or compensating.
    #[must_use]
    pub fn active(self) -> Self {
        self.with_status(SagaStatus::Running)
            .with_status(SagaStatus::Compensating)
    }

    /// Only sagas started before `instant` (with `running`: the ones active
    /// for longer than a threshold).
    #[must_use]
    pub fn with_started_before(mut self, instant: time::OffsetDateTime) -> Self {
        self.started_before_ms =
            Some(i64::try_from(instant.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX));
        self
    }

    /// At most `n` sagas, oldest first.
    #[must_use]
    pub fn with_limit(mut self, n: u32) -> Self {
        self.limit = Some(n);
        self
    }

    pub(super) fn limit(&self) -> i64 {
        self.limit.map_or(i64::MAX, i64::from)
    }

    /// The status condition, spliced into SQL: the names come from
    /// [`SagaStatus::as_str`], a closed set, never from input.
    pub(super) fn status_sql(&self) -> String {
        if self.statuses.is_empty() {
            return "TRUE".to_owned();
        }
        let names: Vec<String> = self
            .statuses
            .iter()
            .map(|s| format!("'{}'", s.as_str()))
            .collect();
        format!("status IN ({})", names.join(", "))
    }
}

/// What one saga type has open, for [`SagaMonitor`](super::SagaMonitor)'s
/// gauges.
#[derive(Debug, Clone, PartialEq, Eq)]
#[doc(hidden)]
pub struct OpenSagas {
    pub saga_type: String,
    /// Running or compensating.
    pub active: i64,
    /// In `compensation_failed`, waiting for an operator.
    pub compensation_failed: i64,
    /// When the oldest active one started (Unix ms).
    pub oldest_active_ms: Option<i64>,
}

/// A database sagas run on (PostgreSQL, SQLite): the store's and the
/// outbox's, so a transition's state, dedup row and outbox rows share one
/// transaction. Every such database is one; the statements are written
/// once, on the core's [SQL seam](consumer_core::sql).
pub trait SagaDatabase: StoreDatabase + OutboxDatabase {}

impl<DB: StoreDatabase + OutboxDatabase> SagaDatabase for DB {}
