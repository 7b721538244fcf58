//! The instruments of one relay as a listener: what it sent, how long
//! events waited, and what waits in its table.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{AsyncInstrument, Counter, Histogram, Meter};

use super::{Backlog, Happened};
use crate::metrics::attr::{self, operation};
use crate::metrics::catalogue::{self, MetricSpec};

pub(super) fn on(m: &RelayMetrics, what: &Happened<'_>) {
    match *what {
        Happened::BacklogRead(backlog) => m.set_backlog(backlog),
        Happened::RoundFailed { .. } => m.round_failed(),
        Happened::Sent {
            destination,
            took,
            waited,
            error,
        } => m.sent(destination, took, waited, error),
        Happened::GaveUp { row, .. } => m.failed(&row.destination),
        Happened::BacklogNotRead { .. }
        | Happened::RoundEnded { .. }
        | Happened::ClaimingAgain { .. }
        | Happened::Retrying { .. } => {}
    }
}

/// How long a published event waited for the broker's confirmation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::outbox) enum Waited {
    /// Since its transaction committed (an event enqueued to go at once).
    SinceCommit(Duration),
    /// Since it fell due (a scheduled event).
    SinceDue(Duration),
}

/// Recorded by the relay as it publishes.
pub(in crate::outbox) struct RelayMetrics {
    /// `db.system.name`, `consumer.outbox.table`.
    table: [KeyValue; 2],
    system: &'static str,
    sent: Counter<u64>,
    operation: Histogram<f64>,
    latency: Histogram<f64>,
    lateness: Histogram<f64>,
    failed: Counter<u64>,
    round_failures: Counter<u64>,
    backlog: Arc<Mutex<Option<Backlog>>>,
    _gauges: Vec<Box<dyn std::any::Any + Send + Sync>>,
}

impl RelayMetrics {
    pub(in crate::outbox) fn new(
        meter: &Meter,
        db: &'static str,
        table: &str,
        system: &'static str,
    ) -> Self {
        let table = [
            KeyValue::new(attr::DB_SYSTEM, db),
            KeyValue::new(attr::OUTBOX_TABLE, table.to_owned()),
        ];
        let backlog: Arc<Mutex<Option<Backlog>>> = Arc::default();
        let gauge = |spec: &MetricSpec, read: fn(&Backlog) -> f64| {
            let (weak, attrs): (Weak<Mutex<Option<Backlog>>>, _) =
                (Arc::downgrade(&backlog), table.clone());
            meter
                .f64_observable_gauge(spec.name)
                .with_unit(spec.unit)
                .with_description(spec.description)
                .with_callback(move |out: &dyn AsyncInstrument<f64>| {
                    let Some(b) = weak.upgrade() else { return };
                    let last = *b.lock().unwrap_or_else(PoisonError::into_inner);
                    if let Some(last) = last {
                        out.observe(read(&last), &attrs);
                    }
                })
                .build()
        };
        let gauges: Vec<Box<dyn std::any::Any + Send + Sync>> = vec![
            Box::new(gauge(&catalogue::OUTBOX_PENDING, |b| b.pending as f64)),
            Box::new(gauge(&catalogue::OUTBOX_OLDEST_AGE, |b| {
                b.oldest_ms.map_or(0.0, |at| {
                    let age_ms = crate::store::now_ms().saturating_sub(at).max(0);
                    Duration::from_millis(age_ms.cast_unsigned()).as_secs_f64()
                })
            })),
            Box::new(gauge(&catalogue::OUTBOX_BLOCKED_AGGREGATES, |b| {
                b.blocked as f64
            })),
            Box::new(gauge(&catalogue::OUTBOX_SCHEDULED, |b| b.scheduled as f64)),
        ];
        Self {
            system,
            sent: catalogue::SENT_MESSAGES.counter(meter),
            operation: catalogue::CLIENT_OPERATION_DURATION.histogram(meter),
            latency: catalogue::OUTBOX_PUBLISH_LATENCY.histogram(meter),
            lateness: catalogue::OUTBOX_SCHEDULED_LATENESS.histogram(meter),
            failed: catalogue::OUTBOX_FAILED.counter(meter),
            round_failures: catalogue::OUTBOX_ROUND_FAILURES.counter(meter),
            table,
            backlog,
            _gauges: gauges,
        }
    }

    /// The last reading of the table, for the gauges.
    fn set_backlog(&self, backlog: Backlog) {
        *self.backlog.lock().unwrap_or_else(PoisonError::into_inner) = Some(backlog);
    }

    fn send_attrs(&self, destination: &str, error: Option<&'static str>) -> Vec<KeyValue> {
        let mut a = vec![
            KeyValue::new(attr::OPERATION_NAME, operation::SEND),
            KeyValue::new(attr::MESSAGING_SYSTEM, self.system),
            KeyValue::new(attr::DESTINATION_NAME, destination.to_owned()),
        ];
        if let Some(e) = error {
            a.push(KeyValue::new(attr::ERROR_TYPE, e));
        }
        a
    }

    /// One event was sent and confirmed (`error` `None`) or refused, after
    /// waiting `took` for the broker; `waited` is how long it had been
    /// waiting to go out: the publish latency of an enqueued event, the
    /// lateness of a scheduled one.
    fn sent(&self, destination: &str, took: Duration, waited: Waited, error: Option<&'static str>) {
        let mut a = self.send_attrs(destination, error);
        self.sent.add(1, &a);
        a.push(KeyValue::new(attr::OPERATION_TYPE, "send"));
        self.operation.record(took.as_secs_f64(), &a);
        if error.is_none() {
            let mut l = self.table.to_vec();
            l.push(KeyValue::new(attr::MESSAGING_SYSTEM, self.system));
            l.push(KeyValue::new(
                attr::DESTINATION_NAME,
                destination.to_owned(),
            ));
            match waited {
                Waited::SinceCommit(d) => self.latency.record(d.as_secs_f64(), &l),
                Waited::SinceDue(d) => self.lateness.record(d.as_secs_f64(), &l),
            }
        }
    }

    /// An event was marked failed: its aggregate is blocked.
    fn failed(&self, destination: &str) {
        let mut l = self.table.to_vec();
        l.push(KeyValue::new(attr::MESSAGING_SYSTEM, self.system));
        l.push(KeyValue::new(
            attr::DESTINATION_NAME,
            destination.to_owned(),
        ));
        self.failed.add(1, &l);
    }

    /// A round failed before publishing.
    fn round_failed(&self) {
        self.round_failures.add(1, &self.table);
    }
}
