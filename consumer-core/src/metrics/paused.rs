//! The instrument of operator pauses
//! ([`PausedHandlers`](crate::store::paused::PausedHandlers)): which
//! handlers are paused.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use opentelemetry::KeyValue;
use opentelemetry::metrics::{AsyncInstrument, Meter, ObservableGauge};

use super::attr::{CONSUMER_GROUP, HANDLER, MESSAGING_SYSTEM};
use super::catalogue::{Instrument, MetricSpec};
use super::source::SourceSeries;

/// `consumer.handler.paused`: 1 while an operator has paused the handler
/// (its deliveries wait), 0 while it runs; as its consumer last read the
/// store (about every second).
pub const HANDLER_PAUSED: MetricSpec = MetricSpec::new(
    "consumer.handler.paused",
    Instrument::Gauge,
    "{handler}",
    "1 while an operator has paused the handler (its deliveries wait, spending no attempt), 0 while it runs.",
    &[MESSAGING_SYSTEM, CONSUMER_GROUP, HANDLER],
);

/// Each handler's state, as last read.
type States = Arc<Mutex<BTreeMap<&'static str, bool>>>;

/// The gauge, with the consumer's attributes.
pub(crate) struct PausedInstruments {
    states: States,
    _gauge: ObservableGauge<i64>,
}

impl PausedInstruments {
    pub(crate) fn new(meter: &Meter, series: &SourceSeries) -> Self {
        let states = States::default();
        let weak = Arc::downgrade(&states);
        let base = series.base();
        let gauge = meter
            .i64_observable_gauge(HANDLER_PAUSED.name)
            .with_unit(HANDLER_PAUSED.unit)
            .with_description(HANDLER_PAUSED.description)
            .with_callback(move |out: &dyn AsyncInstrument<i64>| {
                let Some(states) = weak.upgrade() else {
                    return;
                };
                let now = states.lock().unwrap_or_else(PoisonError::into_inner);
                for (handler, paused) in now.iter() {
                    let mut attrs = base.clone();
                    attrs.push(KeyValue::new(HANDLER, *handler));
                    out.observe(i64::from(*paused), &attrs);
                }
            })
            .build();
        Self {
            states,
            _gauge: gauge,
        }
    }

    /// `handler` is paused now, or not.
    pub(crate) fn set(&self, handler: &'static str, paused: bool) {
        self.states
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(handler, paused);
    }
}
