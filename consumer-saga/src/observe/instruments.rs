//! The saga metrics as a listener: which event moves which instrument
//! (their specs are in [`metrics`](crate::metrics)).

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Meter};

use super::Happened;
use crate::metrics::attr::{SAGA_IGNORED_REASON, SAGA_STATUS, SAGA_TYPE};
use crate::metrics::{SAGA_CONFLICTS, SAGA_FINISHED, SAGA_IGNORED, SAGA_STARTED, SAGA_TIMED_OUT};

/// One saga type's counters.
pub(super) struct Instruments {
    kind: [KeyValue; 1],
    started: Counter<u64>,
    finished: Counter<u64>,
    timed_out: Counter<u64>,
    ignored: Counter<u64>,
    conflicts: Counter<u64>,
}

impl Instruments {
    pub(super) fn new(meter: &Meter, saga_type: &'static str) -> Self {
        Self {
            kind: [KeyValue::new(SAGA_TYPE, saga_type)],
            started: SAGA_STARTED.counter(meter),
            finished: SAGA_FINISHED.counter(meter),
            timed_out: SAGA_TIMED_OUT.counter(meter),
            ignored: SAGA_IGNORED.counter(meter),
            conflicts: SAGA_CONFLICTS.counter(meter),
        }
    }

    pub(super) fn on(&self, what: &Happened<'_>) {
        match *what {
            Happened::Conflict { .. } => self.conflicts.add(1, &self.kind),
            Happened::Saved {
                started,
                timed_out,
                status,
                ..
            } => {
                if started {
                    self.started.add(1, &self.kind);
                }
                if timed_out {
                    self.timed_out.add(1, &self.kind);
                }
                if !status.is_active() {
                    let with_status = [
                        self.kind[0].clone(),
                        KeyValue::new(SAGA_STATUS, status.as_str()),
                    ];
                    self.finished.add(1, &with_status);
                }
            }
            Happened::Ignored { why, .. } => {
                let with_reason = [
                    self.kind[0].clone(),
                    KeyValue::new(SAGA_IGNORED_REASON, why.as_str()),
                ];
                self.ignored.add(1, &with_reason);
            }
            Happened::KeyMismatchAccepted { .. } => {}
        }
    }
}
