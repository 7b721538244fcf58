//! The instruments of one consumer, recorded by the runtime.

use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use opentelemetry::metrics::{Counter, Histogram, Meter, UpDownCounter};
use opentelemetry::{KeyValue, Value};
use smallvec::SmallVec;

use super::attr::{self, operation};
use super::catalogue;
use super::circuit::CircuitInstruments;
use super::held::HeldInstruments;
use super::paused::PausedInstruments;
use super::source::{SourceInstruments, SourceSeries};
use crate::envelope::Envelope;

type Attrs = SmallVec<[KeyValue; 8]>;

/// What the runtime records for one consumer (all its handlers).
pub(crate) struct ConsumerMetrics {
    series: SourceSeries,
    server: Option<(Value, i64)>,
    /// The attribute sets of the first destination seen, built once and
    /// read without a lock: most consumers read one destination, and every
    /// delivery looks its sets up several times.
    first: OnceLock<Series>,
    /// The attribute sets of the other destinations (a consumer reads a
    /// handful of destinations: a scan beats hashing).
    destinations: RwLock<Vec<Series>>,
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
    circuits: CircuitInstruments,
    held: HeldInstruments,
    paused: PausedInstruments,
    _source: Option<SourceInstruments>,
}

/// The attribute sets of one destination that every delivery records
/// with, built once so the hot path borrows them: no allocation, no
/// reference counting per message.
struct Series {
    destination: Box<str>,
    /// `messaging.system`, the group, the destination.
    base: Box<[KeyValue]>,
    /// `base`, the server, `messaging.operation.name = receive`.
    received: Box<[KeyValue]>,
    /// `base`, the server, `ack`, `settle`: a successful ack.
    acked: Box<[KeyValue]>,
    /// `base`, the server, `process`, and the first handler seen: a
    /// successful attempt, read without a lock.
    processed_first: OnceLock<HandlerSet>,
    /// The same for each other handler.
    processed: RwLock<Vec<HandlerSet>>,
}

/// A handler's name and its attribute set.
type HandlerSet = (&'static str, Box<[KeyValue]>);

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
            first: OnceLock::new(),
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
            circuits: CircuitInstruments::new(meter, &series),
            held: HeldInstruments::new(meter, &series),
            paused: PausedInstruments::new(meter, &series),
            _source: source,
            series,
        }
    }

    /// Runs `f` with the attribute sets of `destination`, building them
    /// the first time it is seen.
    fn with_series<T>(&self, destination: &str, f: impl FnOnce(&Series) -> T) -> T {
        let first = self.first.get_or_init(|| self.new_series(destination));
        if &*first.destination == destination {
            return f(first);
        }
        {
            let all = self
                .destinations
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(s) = all.iter().find(|s| &*s.destination == destination) {
                return f(s);
            }
        }
        let mut all = self
            .destinations
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !all.iter().any(|s| &*s.destination == destination) {
            let series = self.new_series(destination);
            all.push(series);
        }
        let s = all
            .iter()
            .find(|s| &*s.destination == destination)
            .unwrap_or_else(|| unreachable!("pushed above"));
        f(s)
    }

    fn new_series(&self, destination: &str) -> Series {
        let mut base = Attrs::new();
        base.push(KeyValue::new(attr::MESSAGING_SYSTEM, self.series.system));
        if let Some(g) = &self.series.group {
            base.push(KeyValue::new(attr::CONSUMER_GROUP, Arc::clone(g)));
        }
        base.push(KeyValue::new(
            attr::DESTINATION_NAME,
            Value::from(Arc::<str>::from(destination)),
        ));
        let mut received = self.with_server(base.clone());
        received.push(KeyValue::new(attr::OPERATION_NAME, operation::RECEIVE));
        let mut acked = self.with_server(base.clone());
        acked.push(KeyValue::new(attr::OPERATION_NAME, operation::ACK));
        acked.push(KeyValue::new(attr::OPERATION_TYPE, "settle"));
        Series {
            destination: destination.into(),
            base: base.into_iter().collect(),
            received: received.into_iter().collect(),
            acked: acked.into_iter().collect(),
            processed_first: OnceLock::new(),
            processed: RwLock::default(),
        }
    }

    /// `messaging.system`, the group, the destination: to extend.
    fn base(&self, envelope: &Envelope) -> Attrs {
        self.with_series(&envelope.origin.channel, |s| {
            s.base.iter().cloned().collect()
        })
    }

    fn with_server(&self, mut a: Attrs) -> Attrs {
        if let Some((address, port)) = &self.server {
            a.push(KeyValue::new(attr::SERVER_ADDRESS, address.clone()));
            a.push(KeyValue::new(attr::SERVER_PORT, *port));
        }
        a
    }

    pub(crate) fn received(&self, envelope: &Envelope) {
        self.with_series(&envelope.origin.channel, |s| {
            self.in_flight.add(1, &s.base);
            self.consumed.add(1, &s.received);
        });
    }

    /// The delivery left the runtime: settled after `took` since it was
    /// received, or released (`None`).
    pub(crate) fn left(&self, envelope: &Envelope, took: Option<Duration>) {
        self.with_series(&envelope.origin.channel, |s| {
            self.in_flight.add(-1, &s.base);
            let Some(took) = took else { return };
            self.delivery.record(took.as_secs_f64(), &s.base);
            if let Some(produced) = envelope.time {
                // In Unix nanoseconds: `OffsetDateTime::now_utc` and its
                // calendar arithmetic cost several times a clock read.
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                let age_ns =
                    i128::try_from(now).unwrap_or(i128::MAX) - produced.unix_timestamp_nanos();
                // Through u64: converting an i128 to f64 is a library call
                // that costs more than the clock read.
                let age_ns = u64::try_from(age_ns.max(0)).unwrap_or(u64::MAX);
                #[allow(clippy::cast_precision_loss)]
                let age = age_ns as f64 / 1e9;
                self.critical_time.record(age, &s.base);
            }
        });
    }

    /// One handler attempt ended, failed with `error` or not.
    pub(crate) fn processed(
        &self,
        envelope: &Envelope,
        handler: &'static str,
        took: Duration,
        error: Option<ErrorType>,
    ) {
        let took = took.as_secs_f64();
        let Some(e) = error else {
            self.with_series(&envelope.origin.channel, |s| {
                self.record_processed(s, handler, took);
            });
            return;
        };
        let mut a = self.with_server(self.base(envelope));
        a.push(KeyValue::new(attr::OPERATION_NAME, operation::PROCESS));
        a.push(KeyValue::new(attr::HANDLER, handler));
        a.push(KeyValue::new(attr::ERROR_TYPE, e));
        self.process.record(took, &a);
    }

    /// A successful attempt of `handler`, on the set built for it.
    fn record_processed(&self, s: &Series, handler: &'static str, took: f64) {
        let (first, a) = s
            .processed_first
            .get_or_init(|| (handler, self.processed_set(s, handler)));
        if *first == handler {
            self.process.record(took, a);
            return;
        }
        {
            let sets = s
                .processed
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some((_, a)) = sets.iter().find(|(h, _)| *h == handler) {
                self.process.record(took, a);
                return;
            }
        }
        let a = self.processed_set(s, handler);
        self.process.record(took, &a);
        let mut sets = s
            .processed
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !sets.iter().any(|(h, _)| *h == handler) {
            sets.push((handler, a));
        }
    }

    /// The attribute set of a successful attempt of `handler`.
    fn processed_set(&self, s: &Series, handler: &'static str) -> Box<[KeyValue]> {
        let mut a = self.with_server(s.base.iter().cloned().collect());
        a.push(KeyValue::new(attr::OPERATION_NAME, operation::PROCESS));
        a.push(KeyValue::new(attr::HANDLER, handler));
        a.into_iter().collect()
    }

    /// A settle operation (`ack`, `release`, `dead_letter`, `retry`) ended.
    pub(crate) fn settle_operation(
        &self,
        envelope: &Envelope,
        op: &'static str,
        took: Duration,
        error: Option<ErrorType>,
    ) {
        if op == operation::ACK && error.is_none() {
            self.with_series(&envelope.origin.channel, |s| {
                self.operation.record(took.as_secs_f64(), &s.acked);
            });
            return;
        }
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

    pub(crate) fn circuit(&self, handler: &'static str, state: &'static str, open: i64) {
        self.circuits.record(handler, state, open);
    }

    pub(crate) fn paused(&self, handler: &'static str, paused: bool) {
        self.paused.set(handler, paused);
    }

    pub(crate) fn key_held(&self, handler: &str) {
        self.held.held(handler);
    }

    pub(crate) fn parked(&self, handler: &str) {
        self.held.parked(handler);
    }

    pub(crate) fn held_counted(&self, handler: &str, count: crate::store::held::HeldCount) {
        self.held.counted(handler, count);
    }
}
