//! The sagas' metrics: their catalogue (beside the runtime's, in the same
//! form and under the same snapshot). The saga observer's instruments
//! listener (`observe/instruments.rs`) records them, once their
//! transaction committed.
//!
//! | name | instrument | unit | what |
//! |---|---|---|---|
//! | `consumer.saga.started` | counter | {saga} | sagas started, by `consumer.saga.type` |
//! | `consumer.saga.finished` | counter | {saga} | sagas finished, by type and `consumer.saga.status` |
//! | `consumer.saga.timed_out` | counter | {timeout} | timeouts that fired into a waiting saga |
//! | `consumer.saga.ignored` | counter | {message} | saga events acked without a transition, by reason |
//! | `consumer.saga.conflicts` | counter | {conflict} | version conflicts, retried at once |
//! | `consumer.saga.active` | gauge | {saga} | running or compensating (`SagaMonitor`) |
//! | `consumer.saga.oldest_active.age` | gauge | s | the oldest active saga's age (`SagaMonitor`) |
//! | `consumer.saga.compensation_failed` | gauge | {saga} | waiting for an operator (`SagaMonitor`) |

use consumer_core::metrics::attr::DB_SYSTEM;
use consumer_core::metrics::catalogue::{Instrument, MetricSpec};

use attr::{SAGA_IGNORED_REASON, SAGA_STATUS, SAGA_TYPE};

/// The attributes only saga metrics carry.
pub mod attr {
    /// `consumer.saga.type`: the saga type (from code, never from input).
    pub const SAGA_TYPE: &str = "consumer.saga.type";
    /// `consumer.saga.status`: how a saga finished: `completed`,
    /// `compensated`, `failed`, `compensation_failed`.
    pub const SAGA_STATUS: &str = "consumer.saga.status";
    /// `consumer.saga.ignored.reason`: why a saga event was acked without a
    /// transition: `finished`, `stale_timeout`, `not_found`,
    /// `out_of_status`.
    pub const SAGA_IGNORED_REASON: &str = "consumer.saga.ignored.reason";
}

/// `consumer.saga.started`: sagas started (their first transition
/// committed).
pub const SAGA_STARTED: MetricSpec = MetricSpec::new(
    "consumer.saga.started",
    Instrument::Counter,
    "{saga}",
    "Sagas started: their first transition committed.",
    &[SAGA_TYPE],
);

/// `consumer.saga.finished`: sagas finished, by the status they ended in.
pub const SAGA_FINISHED: MetricSpec = MetricSpec::new(
    "consumer.saga.finished",
    Instrument::Counter,
    "{saga}",
    "Sagas finished, by how: completed, compensated, failed, compensation_failed.",
    &[SAGA_TYPE, SAGA_STATUS],
);

/// `consumer.saga.timed_out`: timeouts that fired into a saga waiting for
/// them (stale ones count in `consumer.saga.ignored`).
pub const SAGA_TIMED_OUT: MetricSpec = MetricSpec::new(
    "consumer.saga.timed_out",
    Instrument::Counter,
    "{timeout}",
    "Saga timeouts that fired and ran their transition.",
    &[SAGA_TYPE],
);

/// `consumer.saga.ignored`: saga events acked without a transition: late
/// (the saga finished), stale timeouts, events whose policy ignores a
/// missing saga.
pub const SAGA_IGNORED: MetricSpec = MetricSpec::new(
    "consumer.saga.ignored",
    Instrument::Counter,
    "{message}",
    "Saga events acked without a transition, by reason.",
    &[SAGA_TYPE, SAGA_IGNORED_REASON],
);

/// `consumer.saga.conflicts`: version conflicts (another transaction
/// changed the saga first), each retried at once.
pub const SAGA_CONFLICTS: MetricSpec = MetricSpec::new(
    "consumer.saga.conflicts",
    Instrument::Counter,
    "{conflict}",
    "Saga version conflicts, each retried at once on the new version.",
    &[SAGA_TYPE],
);

/// `consumer.saga.active`: sagas running or compensating (read from the
/// store by a `SagaMonitor`).
pub const SAGA_ACTIVE: MetricSpec = MetricSpec::new(
    "consumer.saga.active",
    Instrument::Gauge,
    "{saga}",
    "Sagas running or compensating.",
    &[DB_SYSTEM, SAGA_TYPE],
);

/// `consumer.saga.oldest_active.age`: how long ago the oldest active saga
/// started (0 when none): a saga stuck waiting shows here.
pub const SAGA_OLDEST_ACTIVE_AGE: MetricSpec = MetricSpec::new(
    "consumer.saga.oldest_active.age",
    Instrument::Gauge,
    "s",
    "Age of the oldest saga still running or compensating.",
    &[DB_SYSTEM, SAGA_TYPE],
);

/// `consumer.saga.compensation_failed`: sagas whose compensation failed,
/// waiting for an operator to resume or abandon them.
pub const SAGA_COMPENSATION_FAILED: MetricSpec = MetricSpec::new(
    "consumer.saga.compensation_failed",
    Instrument::Gauge,
    "{saga}",
    "Sagas whose compensation failed, waiting for an operator.",
    &[DB_SYSTEM, SAGA_TYPE],
);

/// Every saga metric, in documentation order.
pub const CATALOGUE: &[MetricSpec] = &[
    SAGA_STARTED,
    SAGA_FINISHED,
    SAGA_TIMED_OUT,
    SAGA_IGNORED,
    SAGA_CONFLICTS,
    SAGA_ACTIVE,
    SAGA_OLDEST_ACTIVE_AGE,
    SAGA_COMPENSATION_FAILED,
];

/// Why a saga event was acked without a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ignored {
    /// Its saga finished (a tombstone).
    Finished,
    /// A timeout the saga no longer waits for.
    StaleTimeout,
    /// No saga, and its policy ignores that (or a timeout of a saga gone).
    NotFound,
    /// Its registration does not run in the saga's status (a forward
    /// step's reply while it compensates, or the reverse).
    OutOfStatus(super::SagaStatus),
}

impl Ignored {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Finished => "finished",
            Self::StaleTimeout => "stale_timeout",
            Self::NotFound => "not_found",
            Self::OutOfStatus(_) => "out_of_status",
        }
    }
}
