//! Every metric this project emits: name, instrument, unit, description
//! and the attribute keys it may carry. Instruments are built only from
//! these specs, so what is documented here is what is exported, and the
//! committed snapshot (`tests/snapshots/metrics.txt`) turns a rename into
//! a visible change.

use std::fmt;

use opentelemetry::metrics::{Counter, Histogram, Meter, UpDownCounter};

use super::attr::*;

/// The kind of instrument behind a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Instrument {
    /// A monotonic sum (Prometheus: `counter`, name ending in `_total`).
    Counter,
    /// A sum that goes up and down (Prometheus: `gauge`).
    UpDownCounter,
    /// A value read at collection (Prometheus: `gauge`).
    Gauge,
    /// A distribution over explicit buckets (Prometheus: `histogram`).
    Histogram,
}

impl fmt::Display for Instrument {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Counter => "counter",
            Self::UpDownCounter => "updowncounter",
            Self::Gauge => "gauge",
            Self::Histogram => "histogram",
        })
    }
}

/// One metric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricSpec {
    /// OpenTelemetry name.
    pub name: &'static str,
    /// Instrument kind.
    pub instrument: Instrument,
    /// UCUM unit (`s`, `{message}`).
    pub unit: &'static str,
    /// What it measures.
    pub description: &'static str,
    /// Every attribute key it may carry.
    pub attributes: &'static [&'static str],
    /// Bucket boundaries of a histogram.
    pub boundaries: &'static [f64],
    /// Defined by the messaging semantic conventions (else our own).
    pub convention: bool,
}

/// The conventions' advised boundaries for messaging durations, in seconds.
pub const DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];

/// Boundaries for end-to-end ages (produced to settled, committed to
/// published), which run from milliseconds to hours during an incident.
pub const AGE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];

const CONSUMER_SERIES: &[&str] = &[MESSAGING_SYSTEM, CONSUMER_GROUP, DESTINATION_NAME];

impl MetricSpec {
    /// A metric of ours (not the conventions'): the parts built on the
    /// runtime (sagas) define theirs with it, and keep their own catalogue
    /// beside [`CATALOGUE`].
    pub const fn new(
        name: &'static str,
        instrument: Instrument,
        unit: &'static str,
        description: &'static str,
        attributes: &'static [&'static str],
    ) -> Self {
        Self {
            name,
            instrument,
            unit,
            description,
            attributes,
            boundaries: &[],
            convention: false,
        }
    }

    const fn convention(mut self) -> Self {
        self.convention = true;
        self
    }

    /// A histogram's bucket boundaries.
    pub const fn buckets(mut self, boundaries: &'static [f64]) -> Self {
        self.boundaries = boundaries;
        self
    }

    /// This spec's counter on `meter`.
    pub fn counter(&self, meter: &Meter) -> Counter<u64> {
        debug_assert_eq!(self.instrument, Instrument::Counter);
        meter
            .u64_counter(self.name)
            .with_unit(self.unit)
            .with_description(self.description)
            .build()
    }

    pub(crate) fn up_down_counter(&self, meter: &Meter) -> UpDownCounter<i64> {
        debug_assert_eq!(self.instrument, Instrument::UpDownCounter);
        meter
            .i64_up_down_counter(self.name)
            .with_unit(self.unit)
            .with_description(self.description)
            .build()
    }

    /// This spec's histogram on `meter`.
    pub fn histogram(&self, meter: &Meter) -> Histogram<f64> {
        debug_assert_eq!(self.instrument, Instrument::Histogram);
        meter
            .f64_histogram(self.name)
            .with_unit(self.unit)
            .with_description(self.description)
            .with_boundaries(self.boundaries.to_vec())
            .build()
    }
}

/// `messaging.process.duration`: one handler attempt, from the handler's
/// start to its outcome (the `process` span's duration).
pub const PROCESS_DURATION: MetricSpec = MetricSpec::new(
    "messaging.process.duration",
    Instrument::Histogram,
    "s",
    "Duration of processing operation.",
    &[
        OPERATION_NAME,
        MESSAGING_SYSTEM,
        ERROR_TYPE,
        CONSUMER_GROUP,
        DESTINATION_NAME,
        SERVER_ADDRESS,
        SERVER_PORT,
        HANDLER,
    ],
)
.convention()
.buckets(DURATION_BUCKETS);

/// `messaging.client.operation.duration`: settle operations (ack,
/// release, dead letter, retry copy) and the relay's sends, each until the
/// broker confirmed.
pub const CLIENT_OPERATION_DURATION: MetricSpec = MetricSpec::new(
    "messaging.client.operation.duration",
    Instrument::Histogram,
    "s",
    "Duration of messaging operation initiated by a producer or consumer client.",
    &[
        OPERATION_NAME,
        OPERATION_TYPE,
        MESSAGING_SYSTEM,
        ERROR_TYPE,
        CONSUMER_GROUP,
        DESTINATION_NAME,
        SERVER_ADDRESS,
        SERVER_PORT,
    ],
)
.convention()
.buckets(DURATION_BUCKETS);

/// `messaging.client.consumed.messages`: deliveries handed to the runtime.
pub const CONSUMED_MESSAGES: MetricSpec = MetricSpec::new(
    "messaging.client.consumed.messages",
    Instrument::Counter,
    "{message}",
    "Number of messages that were delivered to the application.",
    &[
        OPERATION_NAME,
        MESSAGING_SYSTEM,
        CONSUMER_GROUP,
        DESTINATION_NAME,
        SERVER_ADDRESS,
        SERVER_PORT,
    ],
)
.convention();

/// `messaging.client.sent.messages`: events the relay attempted to send,
/// failed ones with `error.type`.
pub const SENT_MESSAGES: MetricSpec = MetricSpec::new(
    "messaging.client.sent.messages",
    Instrument::Counter,
    "{message}",
    "Number of messages producer attempted to send to the broker.",
    &[
        OPERATION_NAME,
        MESSAGING_SYSTEM,
        ERROR_TYPE,
        DESTINATION_NAME,
        SERVER_ADDRESS,
        SERVER_PORT,
    ],
)
.convention();

/// `consumer.lag`: records of a partition not yet settled by this
/// consumer (high watermark minus the position it resumes from).
pub const LAG: MetricSpec = MetricSpec::new(
    "consumer.lag",
    Instrument::Gauge,
    "{message}",
    "Records of an assigned partition behind its end: not yet settled by this consumer.",
    &[
        MESSAGING_SYSTEM,
        CONSUMER_GROUP,
        DESTINATION_NAME,
        PARTITION_ID,
    ],
);

/// `consumer.lag.age`: how long the oldest record this consumer holds
/// unsettled on a partition has waited since it was produced (0 when none).
pub const LAG_AGE: MetricSpec = MetricSpec::new(
    "consumer.lag.age",
    Instrument::Gauge,
    "s",
    "Age of the oldest record of an assigned partition that is received and not yet settled.",
    &[
        MESSAGING_SYSTEM,
        CONSUMER_GROUP,
        DESTINATION_NAME,
        PARTITION_ID,
    ],
);

/// `consumer.queue.depth`: ready messages in a work or delay queue.
pub const QUEUE_DEPTH: MetricSpec = MetricSpec::new(
    "consumer.queue.depth",
    Instrument::Gauge,
    "{message}",
    "Messages in a queue the consumer reads or retries through, by role: ready (work), waiting for their retry delay (delay), scheduled for later (scheduled), taken and not settled (in_flight).",
    &[MESSAGING_SYSTEM, DESTINATION_NAME, QUEUE_ROLE],
);

/// `consumer.queue.oldest.age`: how long the oldest ready message of a
/// queue (due, taken by no consumer) has waited since it became ready; 0
/// when none is ready. Reported where the source can read it (the job
/// queue).
pub const QUEUE_OLDEST_AGE: MetricSpec = MetricSpec::new(
    "consumer.queue.oldest.age",
    Instrument::Gauge,
    "s",
    "How long the oldest ready message of a queue has waited for a consumer since it became ready (0 when none is ready).",
    &[MESSAGING_SYSTEM, DESTINATION_NAME],
);

/// `consumer.dead_letter_queue.depth`: messages in a dead-letter queue.
pub const DEAD_LETTER_QUEUE_DEPTH: MetricSpec = MetricSpec::new(
    "consumer.dead_letter_queue.depth",
    Instrument::Gauge,
    "{message}",
    "Messages in a dead-letter queue, waiting for inspection or replay.",
    &[MESSAGING_SYSTEM, DESTINATION_NAME],
);

/// `consumer.queue.crashed`: 1 for a queue the source consumes that the
/// broker reports crashed (RabbitMQ: `NOT_FOUND … has crashed and failed to
/// restart`), 0 once it consumes it again. Nothing in such a queue can be
/// consumed until an operator acts; the source keeps trying with backoff.
pub const QUEUE_CRASHED: MetricSpec = MetricSpec::new(
    "consumer.queue.crashed",
    Instrument::Gauge,
    "{queue}",
    "1 while the broker reports a queue this consumer reads as crashed, else 0.",
    &[MESSAGING_SYSTEM, DESTINATION_NAME],
);

/// `consumer.delivery.duration`: from the runtime taking a delivery to
/// its settlement (ack, dead letter), retries in place and the wait in its
/// key's lane included: the standard's "dequeue to acknowledgment", whose
/// p99 the alerts watch (the buckets reach past its 30 s threshold).
pub const DELIVERY_DURATION: MetricSpec = MetricSpec::new(
    "consumer.delivery.duration",
    Instrument::Histogram,
    "s",
    "Time from a delivery's receipt to its settlement, retries in place included.",
    CONSUMER_SERIES,
)
.buckets(AGE_BUCKETS);

/// `consumer.in_flight`: deliveries held by the runtime (queued in a lane,
/// running, or waiting for an in-place retry).
pub const IN_FLIGHT: MetricSpec = MetricSpec::new(
    "consumer.in_flight",
    Instrument::UpDownCounter,
    "{message}",
    "Deliveries received and not yet settled or released.",
    CONSUMER_SERIES,
);

/// `consumer.dead_letters`: deliveries dead-lettered, by reason.
pub const DEAD_LETTERS: MetricSpec = MetricSpec::new(
    "consumer.dead_letters",
    Instrument::Counter,
    "{message}",
    "Deliveries dead-lettered (to the dead-letter destination or the store's table).",
    &[
        MESSAGING_SYSTEM,
        CONSUMER_GROUP,
        DESTINATION_NAME,
        HANDLER,
        DEAD_LETTER_REASON,
    ],
);

/// `consumer.retries`: retries scheduled, by how they run.
pub const RETRIES: MetricSpec = MetricSpec::new(
    "consumer.retries",
    Instrument::Counter,
    "{message}",
    "Retries scheduled after a transient failure.",
    &[
        MESSAGING_SYSTEM,
        CONSUMER_GROUP,
        DESTINATION_NAME,
        HANDLER,
        RETRY_MODE,
    ],
);

/// `consumer.duplicates`: deliveries skipped because their key was
/// committed before.
pub const DUPLICATES: MetricSpec = MetricSpec::new(
    "consumer.duplicates",
    Instrument::Counter,
    "{message}",
    "Deliveries skipped because their idempotency key was committed before.",
    &[MESSAGING_SYSTEM, CONSUMER_GROUP, DESTINATION_NAME, HANDLER],
);

/// `consumer.released`: deliveries given back unsettled (shutdown, or no
/// settle step could complete).
pub const RELEASED: MetricSpec = MetricSpec::new(
    "consumer.released",
    Instrument::Counter,
    "{message}",
    "Deliveries given back to the broker unsettled, to be delivered again.",
    CONSUMER_SERIES,
);

/// `consumer.settle.fallbacks`: settle steps that could not succeed and
/// took their fallback.
pub const SETTLE_FALLBACKS: MetricSpec = MetricSpec::new(
    "consumer.settle.fallbacks",
    Instrument::Counter,
    "{message}",
    "Settle steps the broker or the store refused, by the fallback taken instead.",
    &[
        MESSAGING_SYSTEM,
        CONSUMER_GROUP,
        DESTINATION_NAME,
        SETTLE_FALLBACK,
    ],
);

/// `consumer.unknown_types`: deliveries a router acked unhandled because
/// it was told to ignore types no handler takes.
pub const UNKNOWN_TYPES: MetricSpec = MetricSpec::new(
    "consumer.unknown_types",
    Instrument::Counter,
    "{message}",
    "Deliveries acked unhandled because no handler takes their event type.",
    CONSUMER_SERIES,
);

/// `consumer.critical_time`: from the message's CloudEvents `time` (the
/// outbox sets it in the producing transaction) to its settlement.
pub const CRITICAL_TIME: MetricSpec = MetricSpec::new(
    "consumer.critical_time",
    Instrument::Histogram,
    "s",
    "Time from a message's production to its settlement by this consumer.",
    CONSUMER_SERIES,
)
.buckets(AGE_BUCKETS);

/// `consumer.rebalances`: group rebalances this member took part in.
pub const REBALANCES: MetricSpec = MetricSpec::new(
    "consumer.rebalances",
    Instrument::Counter,
    "{rebalance}",
    "Partition assignments, revocations and lost assignments of this group member.",
    &[MESSAGING_SYSTEM, CONSUMER_GROUP, REBALANCE_EVENT],
);

/// `consumer.commit.failures`: offset commits that failed or went
/// unanswered.
pub const COMMIT_FAILURES: MetricSpec = MetricSpec::new(
    "consumer.commit.failures",
    Instrument::Counter,
    "{commit}",
    "Offset commits that failed or went unanswered.",
    &[MESSAGING_SYSTEM, CONSUMER_GROUP],
);

/// `consumer.reconnects`: connections or channels lost and opened again.
pub const RECONNECTS: MetricSpec = MetricSpec::new(
    "consumer.reconnects",
    Instrument::Counter,
    "{reconnect}",
    "Times the consuming connection or channel was lost and opened again.",
    &[MESSAGING_SYSTEM, DESTINATION_NAME],
);

const OUTBOX_SERIES: &[&str] = &[DB_SYSTEM, OUTBOX_TABLE];

/// `consumer.outbox.pending`: events committed and not yet published
/// (scheduled ones once due).
pub const OUTBOX_PENDING: MetricSpec = MetricSpec::new(
    "consumer.outbox.pending",
    Instrument::Gauge,
    "{event}",
    "Outbox events committed and not yet published.",
    OUTBOX_SERIES,
);

/// `consumer.outbox.oldest.age`: how long the oldest unpublished event
/// has waited since its transaction committed, or since it fell due for a
/// scheduled one (0 when none).
pub const OUTBOX_OLDEST_AGE: MetricSpec = MetricSpec::new(
    "consumer.outbox.oldest.age",
    Instrument::Gauge,
    "s",
    "Age of the oldest outbox event not yet published.",
    OUTBOX_SERIES,
);

/// `consumer.outbox.blocked_aggregates`: aggregates whose relay stopped at
/// an event marked failed, until an operator retries it.
pub const OUTBOX_BLOCKED_AGGREGATES: MetricSpec = MetricSpec::new(
    "consumer.outbox.blocked_aggregates",
    Instrument::Gauge,
    "{aggregate}",
    "Aggregates blocked by an outbox event marked failed.",
    OUTBOX_SERIES,
);

/// `consumer.outbox.scheduled`: scheduled events not yet due (those due
/// and waiting for a relay count in `consumer.outbox.pending`).
pub const OUTBOX_SCHEDULED: MetricSpec = MetricSpec::new(
    "consumer.outbox.scheduled",
    Instrument::Gauge,
    "{event}",
    "Scheduled outbox events not yet due.",
    OUTBOX_SERIES,
);

/// `consumer.outbox.publish.latency`: from an event's commit to the
/// broker's confirmation of it (events enqueued to go at once; scheduled
/// ones are in `consumer.outbox.scheduled.lateness`).
pub const OUTBOX_PUBLISH_LATENCY: MetricSpec = MetricSpec::new(
    "consumer.outbox.publish.latency",
    Instrument::Histogram,
    "s",
    "Time from an outbox event's commit to the broker's confirmation.",
    &[DB_SYSTEM, OUTBOX_TABLE, MESSAGING_SYSTEM, DESTINATION_NAME],
)
.buckets(AGE_BUCKETS);

/// `consumer.outbox.scheduled.lateness`: from the time a scheduled event
/// fell due to the broker's confirmation of it: how late it went out.
pub const OUTBOX_SCHEDULED_LATENESS: MetricSpec = MetricSpec::new(
    "consumer.outbox.scheduled.lateness",
    Instrument::Histogram,
    "s",
    "Time from a scheduled outbox event's due time to the broker's confirmation.",
    &[DB_SYSTEM, OUTBOX_TABLE, MESSAGING_SYSTEM, DESTINATION_NAME],
)
.buckets(AGE_BUCKETS);

/// `consumer.outbox.failed`: events marked failed after their last
/// attempt (their aggregate is blocked).
pub const OUTBOX_FAILED: MetricSpec = MetricSpec::new(
    "consumer.outbox.failed",
    Instrument::Counter,
    "{event}",
    "Outbox events marked failed after the broker refused every attempt.",
    &[DB_SYSTEM, OUTBOX_TABLE, MESSAGING_SYSTEM, DESTINATION_NAME],
);

/// `consumer.outbox.round.failures`: relay rounds that failed (database
/// down, ...).
pub const OUTBOX_ROUND_FAILURES: MetricSpec = MetricSpec::new(
    "consumer.outbox.round.failures",
    Instrument::Counter,
    "{round}",
    "Relay rounds that failed before publishing (the database is down, ...).",
    OUTBOX_SERIES,
);

/// Every metric, in documentation order.
pub const CATALOGUE: &[MetricSpec] = &[
    PROCESS_DURATION,
    CLIENT_OPERATION_DURATION,
    CONSUMED_MESSAGES,
    SENT_MESSAGES,
    LAG,
    LAG_AGE,
    QUEUE_DEPTH,
    QUEUE_OLDEST_AGE,
    DEAD_LETTER_QUEUE_DEPTH,
    QUEUE_CRASHED,
    DELIVERY_DURATION,
    IN_FLIGHT,
    DEAD_LETTERS,
    RETRIES,
    DUPLICATES,
    RELEASED,
    SETTLE_FALLBACKS,
    UNKNOWN_TYPES,
    CRITICAL_TIME,
    REBALANCES,
    COMMIT_FAILURES,
    RECONNECTS,
    OUTBOX_PENDING,
    OUTBOX_OLDEST_AGE,
    OUTBOX_BLOCKED_AGGREGATES,
    OUTBOX_SCHEDULED,
    OUTBOX_PUBLISH_LATENCY,
    OUTBOX_SCHEDULED_LATENESS,
    OUTBOX_FAILED,
    OUTBOX_ROUND_FAILURES,
    super::circuit::CIRCUIT_OPEN,
    super::circuit::CIRCUIT_TRANSITIONS,
    super::held::HELD_KEYS_HOLDS,
    super::held::HELD_KEYS_PARKED,
    super::held::HELD_KEYS,
    super::held::HELD_KEYS_OLDEST_AGE,
    super::paused::HANDLER_PAUSED,
];

/// The spec named `name`.
pub fn spec(name: &str) -> Option<&'static MetricSpec> {
    CATALOGUE.iter().find(|s| s.name == name)
}

/// The catalogue as the committed snapshot holds it: one line per metric,
/// `name instrument unit attribute,attribute,...` (attributes sorted).
pub fn snapshot() -> String {
    snapshot_of(CATALOGUE)
}

/// `specs` as the committed snapshot holds them (see [`snapshot`]): for a
/// part with a catalogue of its own.
pub fn snapshot_of(specs: &[MetricSpec]) -> String {
    let mut out = String::new();
    for s in specs {
        let mut attrs = s.attributes.to_vec();
        attrs.sort_unstable();
        out.push_str(&format!(
            "{} {} {} {}\n",
            s.name,
            s.instrument,
            s.unit,
            attrs.join(",")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_ours_carry_the_prefix() {
        for (i, s) in CATALOGUE.iter().enumerate() {
            assert!(
                CATALOGUE[i + 1..].iter().all(|o| o.name != s.name),
                "{} twice",
                s.name
            );
            if s.convention {
                assert!(s.name.starts_with("messaging."), "{}", s.name);
            } else {
                assert!(s.name.starts_with("consumer."), "{}", s.name);
            }
            assert_eq!(
                s.instrument == Instrument::Histogram,
                !s.boundaries.is_empty(),
                "{}: histograms and only histograms have buckets",
                s.name
            );
            assert!(s.boundaries.windows(2).all(|w| w[0] < w[1]), "{}", s.name);
        }
    }
}
