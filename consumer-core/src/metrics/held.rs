//! The instruments of sequenced dead letters
//! ([`OnDeadLetter::HoldKey`](crate::store::held::OnDeadLetter)): keys held
//! and messages parked behind them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use opentelemetry::KeyValue;
use opentelemetry::metrics::{AsyncInstrument, Counter, Meter, ObservableGauge};

use super::attr::{CONSUMER_GROUP, HANDLER, MESSAGING_SYSTEM};
use super::catalogue::{Instrument, MetricSpec};
use super::source::SourceSeries;
use crate::store::held::HeldCount;

/// `consumer.held_keys.holds`: keys held because one of their messages
/// was dead-lettered (held again after a drained message failed included).
pub const HELD_KEYS_HOLDS: MetricSpec = MetricSpec::new(
    "consumer.held_keys.holds",
    Instrument::Counter,
    "{key}",
    "Keys held because one of their messages was dead-lettered: their later messages are parked until an operator releases or skips the head.",
    &[MESSAGING_SYSTEM, CONSUMER_GROUP, HANDLER],
);

/// `consumer.held_keys.parked`: messages parked behind a held key.
pub const HELD_KEYS_PARKED: MetricSpec = MetricSpec::new(
    "consumer.held_keys.parked",
    Instrument::Counter,
    "{message}",
    "Messages parked behind a held key, acked on the broker and kept in the store until the key is released.",
    &[MESSAGING_SYSTEM, CONSUMER_GROUP, HANDLER],
);

/// `consumer.held_keys`: keys of a handler held now, waiting for an
/// operator (read from the store by each consumer of a handler that holds
/// keys, about every 15 s).
pub const HELD_KEYS: MetricSpec = MetricSpec::new(
    "consumer.held_keys",
    Instrument::Gauge,
    "{key}",
    "Keys of a handler held now, waiting for an operator to release or skip their dead-lettered head (read from the store).",
    &[MESSAGING_SYSTEM, CONSUMER_GROUP, HANDLER],
);

/// `consumer.held_keys.oldest.age`: how long the oldest held key of a
/// handler has waited (0 when none is held).
pub const HELD_KEYS_OLDEST_AGE: MetricSpec = MetricSpec::new(
    "consumer.held_keys.oldest.age",
    Instrument::Gauge,
    "s",
    "How long the oldest held key of a handler has waited for an operator (0 when none is held).",
    &[MESSAGING_SYSTEM, CONSUMER_GROUP, HANDLER],
);

/// What the store said of each handler's held keys, last time it was read.
type Readings = Arc<Mutex<BTreeMap<String, HeldCount>>>;

/// The instruments, with the consumer's attributes.
pub(crate) struct HeldInstruments {
    held: Counter<u64>,
    parked: Counter<u64>,
    readings: Readings,
    base: Vec<KeyValue>,
    _gauges: [ObservableGauge<f64>; 2],
}

impl HeldInstruments {
    pub(crate) fn new(meter: &Meter, series: &SourceSeries) -> Self {
        let readings = Readings::default();
        let base = series.base();
        let gauge = |spec: &MetricSpec, read: fn(&HeldCount) -> f64| {
            let weak = Arc::downgrade(&readings);
            let base = base.clone();
            meter
                .f64_observable_gauge(spec.name)
                .with_unit(spec.unit)
                .with_description(spec.description)
                .with_callback(move |out: &dyn AsyncInstrument<f64>| {
                    let Some(readings) = weak.upgrade() else {
                        return;
                    };
                    let read_now = readings.lock().unwrap_or_else(PoisonError::into_inner);
                    for (handler, count) in read_now.iter() {
                        let mut attrs = base.clone();
                        attrs.push(KeyValue::new(HANDLER, handler.clone()));
                        out.observe(read(count), &attrs);
                    }
                })
                .build()
        };
        let gauges = [
            gauge(&HELD_KEYS, |c| c.held as f64),
            gauge(&HELD_KEYS_OLDEST_AGE, |c| {
                c.oldest.map_or(0.0, |at| {
                    (crate::store::clock::now() - at).as_seconds_f64().max(0.0)
                })
            }),
        ];
        Self {
            held: HELD_KEYS_HOLDS.counter(meter),
            parked: HELD_KEYS_PARKED.counter(meter),
            readings,
            base,
            _gauges: gauges,
        }
    }

    /// What the store says of `handler`'s held keys now.
    pub(crate) fn counted(&self, handler: &str, count: HeldCount) {
        self.readings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(handler.to_owned(), count);
    }

    fn with_handler(&self, handler: &str) -> Vec<KeyValue> {
        let mut attrs = self.base.clone();
        attrs.push(KeyValue::new(HANDLER, handler.to_owned()));
        attrs
    }

    /// A key of `handler` was held.
    pub(crate) fn held(&self, handler: &str) {
        self.held.add(1, &self.with_handler(handler));
    }

    /// A message of `handler` was parked.
    pub(crate) fn parked(&self, handler: &str) {
        self.parked.add(1, &self.with_handler(handler));
    }
}
