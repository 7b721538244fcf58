//! The instruments of one consumer, recorded by the runtime.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use opentelemetry::metrics::{Counter, Histogram, Meter, UpDownCounter};
use opentelemetry::{KeyValue, Value};
use smallvec::SmallVec;
use time::OffsetDateTime;

use super::attr::{self, operation};
use super::catalogue;
use super::source::{SourceInstruments, SourceSeries};
use crate::envelope::Envelope;

type Attrs = SmallVec<[KeyValue; 8]>;

/// What the runtime records for one consumer (all its handlers).
pub(crate) struct ConsumerMetrics {
    series: SourceSeries,
    server: Option<(Value, i64)>,
    destinations: RwLock<HashMap<Box<str>, Value>>,
    process: Histogram<f64>,
    operation: Histogram<f64>,
    consumed: Counter<u64>,
    in_flight: UpDownCounter<i64>,
    delivery: Histogram<f64>,
    dead_letters: Counter<u64>,
    retries: Counter<u64>,
    duplicates: Counter<u64>,
    released: Counter<u64>,
    fallbacks: Counter<u64>,
    unknown_types: Counter<u64>,
    critical_time: Histogram<f64>,
    _source: Option<SourceInstruments>,
}

/// Why a settle operation failed, for `error.type`.
pub(crate) type ErrorType = &'static str;

impl ConsumerMetrics {
    pub(crate) fn new(
        meter: &Meter,
        system: &'static str,
        group: Option<&str>,
        server: Option<(&str, u16)>,
        gauges: Option<Arc<dyn super::SourceGauges>>,
    ) -> Self {
        let series = SourceSeries {
            system,
            group: group.map(Arc::from),
        };
        let source = gauges.map(|g| super::source::register(meter, &series, &g));
        Self {
            server: server.map(|(a, p)| (Value::from(a.to_owned()), i64::from(p))),
            destinations: RwLock::default(),
            process: catalogue::PROCESS_DURATION.histogram(meter),
            operation: catalogue::CLIENT_OPERATION_DURATION.histogram(meter),
            consumed: catalogue::CONSUMED_MESSAGES.counter(meter),
            in_flight: catalogue::IN_FLIGHT.up_down_counter(meter),
            delivery: catalogue::DELIVERY_DURATION.histogram(meter),
            dead_letters: catalogue::DEAD_LETTERS.counter(meter),
            retries: catalogue::RETRIES.counter(meter),
            duplicates: catalogue::DUPLICATES.counter(meter),
            released: catalogue::RELEASED.counter(meter),
            fallbacks: catalogue::SETTLE_FALLBACKS.counter(meter),
            unknown_types: catalogue::UNKNOWN_TYPES.counter(meter),
            critical_time: catalogue::CRITICAL_TIME.histogram(meter),
            _source: source,
            series,
        }
    }

    /// The destination's name as an attribute value, made once per
    /// destination (a consumer reads a handful).
    fn destination(&self, name: &str) -> Value {
        if let Some(v) = self
            .destinations
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(name)
        {
            return v.clone();
        }
        let v = Value::from(Arc::<str>::from(name));
        self.destinations
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(name.into())
            .or_insert(v)
            .clone()
    }

    /// `messaging.system`, the group, the destination.
    fn base(&self, envelope: &Envelope) -> Attrs {
        let mut a = Attrs::new();
        a.push(KeyValue::new(attr::MESSAGING_SYSTEM, self.series.system));
        if let Some(g) = &self.series.group {
            a.push(KeyValue::new(attr::CONSUMER_GROUP, Arc::clone(g)));
        }
        a.push(KeyValue::new(
            attr::DESTINATION_NAME,
            self.destination(&envelope.origin.destination),
        ));
        a
    }

    fn with_server(&self, mut a: Attrs) -> Attrs {
        if let Some((address, port)) = &self.server {
            a.push(KeyValue::new(attr::SERVER_ADDRESS, address.clone()));
            a.push(KeyValue::new(attr::SERVER_PORT, *port));
        }
        a
    }

    pub(crate) fn received(&self, envelope: &Envelope) {
        let base = self.base(envelope);
        self.in_flight.add(1, &base);
        let mut a = self.with_server(base);
        a.push(KeyValue::new(attr::OPERATION_NAME, operation::RECEIVE));
        self.consumed.add(1, &a);
    }

    /// The delivery left the runtime: settled after `took` since it was
    /// received, or released (`None`).
    pub(crate) fn left(&self, envelope: &Envelope, took: Option<Duration>) {
        let base = self.base(envelope);
        self.in_flight.add(-1, &base);
        let Some(took) = took else { return };
        self.delivery.record(took.as_secs_f64(), &base);
        if let Some(produced) = envelope.time {
            let age = (OffsetDateTime::now_utc() - produced).as_seconds_f64();
            self.critical_time.record(age.max(0.0), &base);
        }
    }

    /// One handler attempt ended, failed with `error` or not.
    pub(crate) fn processed(
        &self,
        envelope: &Envelope,
        handler: &'static str,
        took: Duration,
        error: Option<ErrorType>,
    ) {
        let mut a = self.with_server(self.base(envelope));
        a.push(KeyValue::new(attr::OPERATION_NAME, operation::PROCESS));
        a.push(KeyValue::new(attr::HANDLER, handler));
        if let Some(e) = error {
            a.push(KeyValue::new(attr::ERROR_TYPE, e));
        }
        self.process.record(took.as_secs_f64(), &a);
    }

    /// A settle operation (`ack`, `release`, `dead_letter`, `retry`) ended.
    pub(crate) fn settle_operation(
        &self,
        envelope: &Envelope,
        op: &'static str,
        took: Duration,
        error: Option<ErrorType>,
    ) {
        let mut a = self.with_server(self.base(envelope));
        a.push(KeyValue::new(attr::OPERATION_NAME, op));
        a.push(KeyValue::new(attr::OPERATION_TYPE, "settle"));
        if let Some(e) = error {
            a.push(KeyValue::new(attr::ERROR_TYPE, e));
        }
        self.operation.record(took.as_secs_f64(), &a);
    }

    pub(crate) fn duplicate(&self, envelope: &Envelope, handler: &'static str) {
        let mut a = self.base(envelope);
        a.push(KeyValue::new(attr::HANDLER, handler));
        self.duplicates.add(1, &a);
    }

    pub(crate) fn retry(&self, envelope: &Envelope, handler: &'static str, mode: &'static str) {
        let mut a = self.base(envelope);
        a.push(KeyValue::new(attr::HANDLER, handler));
        a.push(KeyValue::new(attr::RETRY_MODE, mode));
        self.retries.add(1, &a);
    }

    pub(crate) fn dead_letter(&self, envelope: &Envelope, handler: &str, reason: &'static str) {
        let mut a = self.base(envelope);
        a.push(KeyValue::new(attr::HANDLER, handler.to_owned()));
        a.push(KeyValue::new(attr::DEAD_LETTER_REASON, reason));
        self.dead_letters.add(1, &a);
    }

    pub(crate) fn released(&self, envelope: &Envelope) {
        self.released.add(1, &self.base(envelope));
    }

    pub(crate) fn fallback(&self, envelope: &Envelope, fallback: &'static str) {
        let mut a = self.base(envelope);
        a.push(KeyValue::new(attr::SETTLE_FALLBACK, fallback));
        self.fallbacks.add(1, &a);
    }

    pub(crate) fn unknown_type(&self, envelope: &Envelope) {
        self.unknown_types.add(1, &self.base(envelope));
    }
}
