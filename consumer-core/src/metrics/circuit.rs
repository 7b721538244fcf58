//! The instruments of the handlers' circuits
//! ([`CircuitPolicy`](crate::runtime::CircuitPolicy)): which are open, and
//! every opening and closing.

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Meter, UpDownCounter};

use super::attr::{CIRCUIT_STATE, CONSUMER_GROUP, HANDLER, MESSAGING_SYSTEM};
use super::catalogue::{Instrument, MetricSpec};
use super::source::SourceSeries;

/// `consumer.circuit.open`: handlers whose circuit is open (1) or closed
/// (0); the consumer takes no deliveries while one is open.
pub const CIRCUIT_OPEN: MetricSpec = MetricSpec::new(
    "consumer.circuit.open",
    Instrument::UpDownCounter,
    "{circuit}",
    "Handlers whose circuit is open: different messages in a row failed transiently, and the consumer waits for a probe to succeed.",
    &[MESSAGING_SYSTEM, CONSUMER_GROUP, HANDLER],
);

/// `consumer.circuit.transitions`: circuits opened (again after a failed
/// probe included) and closed.
pub const CIRCUIT_TRANSITIONS: MetricSpec = MetricSpec::new(
    "consumer.circuit.transitions",
    Instrument::Counter,
    "{transition}",
    "Handler circuits opened (after a failed probe too) and closed.",
    &[MESSAGING_SYSTEM, CONSUMER_GROUP, HANDLER, CIRCUIT_STATE],
);

/// The two instruments, with the consumer's attributes.
pub(crate) struct CircuitInstruments {
    open: UpDownCounter<i64>,
    transitions: Counter<u64>,
    base: Vec<KeyValue>,
}

impl CircuitInstruments {
    pub(crate) fn new(meter: &Meter, series: &SourceSeries) -> Self {
        Self {
            open: CIRCUIT_OPEN.up_down_counter(meter),
            transitions: CIRCUIT_TRANSITIONS.counter(meter),
            base: series.base(),
        }
    }

    /// Records `handler`'s circuit going to `state` (`open`, `closed`),
    /// `open` added to the open circuits (1 when it opens, 0 when it opens
    /// again after a failed probe, -1 when it closes).
    pub(crate) fn record(&self, handler: &'static str, state: &'static str, open: i64) {
        let mut attrs = self.base.clone();
        attrs.push(KeyValue::new(HANDLER, handler));
        if open != 0 {
            self.open.add(open, &attrs);
        }
        attrs.push(KeyValue::new(CIRCUIT_STATE, state));
        self.transitions.add(1, &attrs);
    }
}
