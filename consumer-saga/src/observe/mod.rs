//! One observer of what happens to a saga's deliveries, in the shape of
//! the runtime's (`consumer_core`'s `runtime/observe`): each thing is
//! emitted once, where it happens, as a [`Happened`], and its listeners
//! record it, always in this order:
//!
//! 1. the OpenTelemetry instruments ([`instruments`]), created on the
//!    first event from the saga's meter;
//! 2. the log line ([`logs`]).
//!
//! A metric or a log field changes in its listener's file, and nowhere in
//! the handler. Spans are not listeners: the handler opens and fills them
//! around the work itself.

mod instruments;
mod logs;

use std::sync::OnceLock;

use opentelemetry::metrics::Meter;

use super::SagaStatus;
use super::metrics::Ignored;
use instruments::Instruments;

/// Something that happened to one of a saga type's deliveries.
pub(crate) enum Happened<'a> {
    /// Another transaction saved the saga first: the transition runs
    /// again, at once, on the new version.
    Conflict { saga_id: &'a str },
    /// A transition committed.
    Saved {
        saga_id: &'a str,
        /// It was the saga's first.
        started: bool,
        /// A timeout the saga waited for fired it.
        timed_out: bool,
        /// The status it left the saga in.
        status: SagaStatus,
    },
    /// An event was acked without a transition.
    Ignored {
        saga_id: &'a str,
        event_type: &'a str,
        message_id: &'a str,
        why: Ignored,
    },
    /// An event whose key is not its saga's id ran anyway: the saga
    /// accepts such keys.
    KeyMismatchAccepted {
        message_id: &'a str,
        error: &'a (dyn std::fmt::Display + Sync),
    },
}

/// The observer of one saga type: where its handler emits.
pub(crate) struct SagaObserver {
    saga: &'static str,
    meter: Option<Meter>,
    instruments: OnceLock<Instruments>,
}

impl SagaObserver {
    /// The observer of saga type `saga`, its instruments on `meter` (the
    /// global meter when `None`).
    pub(crate) fn new(saga: &'static str, meter: Option<Meter>) -> Self {
        Self {
            saga,
            meter,
            instruments: OnceLock::new(),
        }
    }

    /// Tells every listener, in order.
    pub(crate) fn emit(&self, what: &Happened<'_>) {
        self.instruments().on(what);
        logs::on(self.saga, what);
    }

    fn instruments(&self) -> &Instruments {
        self.instruments.get_or_init(|| {
            let meter = self
                .meter
                .clone()
                .unwrap_or_else(consumer_core::metrics::global_meter);
            Instruments::new(&meter, self.saga)
        })
    }
}
