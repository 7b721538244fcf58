//! The instruments of one saga type: what its transitions did, recorded
//! once their transaction committed.

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Meter};

use super::SagaStatus;
use crate::metrics::attr;
use crate::metrics::catalogue;

/// Why a saga event was acked without a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ignored {
    /// Its saga finished (a tombstone).
    Finished,
    /// A timeout the saga no longer waits for.
    StaleTimeout,
    /// No saga, and its policy ignores that (or a timeout of a saga gone).
    NotFound,
}

impl Ignored {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Finished => "finished",
            Self::StaleTimeout => "stale_timeout",
            Self::NotFound => "not_found",
        }
    }
}

pub(super) struct SagaMetrics {
    kind: [KeyValue; 1],
    started: Counter<u64>,
    finished: Counter<u64>,
    timed_out: Counter<u64>,
    ignored: Counter<u64>,
    conflicts: Counter<u64>,
}

impl SagaMetrics {
    pub(super) fn new(meter: &Meter, saga_type: &'static str) -> Self {
        Self {
            kind: [KeyValue::new(attr::SAGA_TYPE, saga_type)],
            started: catalogue::SAGA_STARTED.counter(meter),
            finished: catalogue::SAGA_FINISHED.counter(meter),
            timed_out: catalogue::SAGA_TIMED_OUT.counter(meter),
            ignored: catalogue::SAGA_IGNORED.counter(meter),
            conflicts: catalogue::SAGA_CONFLICTS.counter(meter),
        }
    }

    /// A transition committed.
    pub(super) fn saved(&self, started: bool, timed_out: bool, status: SagaStatus) {
        if started {
            self.started.add(1, &self.kind);
        }
        if timed_out {
            self.timed_out.add(1, &self.kind);
        }
        if !status.is_active() {
            self.finished.add(
                1,
                &[
                    self.kind[0].clone(),
                    KeyValue::new(attr::SAGA_STATUS, status.as_str()),
                ],
            );
        }
    }

    pub(super) fn ignored(&self, why: Ignored) {
        self.ignored.add(
            1,
            &[
                self.kind[0].clone(),
                KeyValue::new(attr::SAGA_IGNORED_REASON, why.as_str()),
            ],
        );
    }

    pub(super) fn conflict(&self) {
        self.conflicts.add(1, &self.kind);
    }
}
