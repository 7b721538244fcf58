//! Metrics through the OpenTelemetry metrics API, named by the messaging
//! semantic conventions (v1.44.0) where they have a name, and under the
//! `consumer.` prefix where they do not.
//!
//! This crate depends on the API only: without a meter provider every
//! instrument is a no-op. The application (or [`Service`](crate::Service)
//! with its Prometheus endpoint) installs a provider and its exporter;
//! consumers and relays take their meter from the global provider when
//! they start running (so install it before `run`), or from
//! `with_meter`.
//!
//! | metric | instrument | unit | what |
//! |---|---|---|---|
//! | `messaging.process.duration` | histogram | s | one handler attempt; `error.type` = `poison`, `terminal`, `transient`, `panic` |
//! | `messaging.client.operation.duration` | histogram | s | settle operations (`ack`, `release`, `dead_letter`, `retry`) and the relay's `send` |
//! | `messaging.client.consumed.messages` | counter | {message} | deliveries handed to the runtime |
//! | `messaging.client.sent.messages` | counter | {message} | events the relay sent (failed ones with `error.type`) |
//! | `consumer.lag` | gauge | {message} | per assigned partition: records not yet settled |
//! | `consumer.lag.age` | gauge | s | per assigned partition: age of the oldest record held unsettled |
//! | `consumer.queue.depth` | gauge | {message} | RabbitMQ work and delay queues; SQS; the job queue (work: ready, delay: retrying, scheduled, in_flight: running) |
//! | `consumer.queue.oldest.age` | gauge | s | the job queue: how long its oldest ready job has waited |
//! | `consumer.dead_letter_queue.depth` | gauge | {message} | RabbitMQ dead-letter queue |
//! | `consumer.queue.crashed` | gauge | {queue} | 1 while RabbitMQ reports a consumed queue crashed, else 0 |
//! | `consumer.delivery.duration` | histogram | s | received to settled, retries in place included (the p99 alert) |
//! | `consumer.in_flight` | updowncounter | {message} | deliveries held |
//! | `consumer.dead_letters` | counter | {message} | by `consumer.dead_letter.reason` |
//! | `consumer.retries` | counter | {message} | by `consumer.retry.mode` |
//! | `consumer.duplicates` | counter | {message} | skipped by the dedup table |
//! | `consumer.released` | counter | {message} | given back unsettled |
//! | `consumer.settle.fallbacks` | counter | {message} | by `consumer.settle.fallback` |
//! | `consumer.unknown_types` | counter | {message} | acked unhandled by a router told to ignore them |
//! | `consumer.critical_time` | histogram | s | produced (CloudEvents `time`) to settled |
//! | `consumer.rebalances` | counter | {rebalance} | Kafka: by `consumer.rebalance.event` |
//! | `consumer.commit.failures` | counter | {commit} | Kafka offset commits that failed |
//! | `consumer.reconnects` | counter | {reconnect} | RabbitMQ channel re-opened; Kafka broker connections lost (librdkafka reopens them) |
//! | `consumer.outbox.pending` | gauge | {event} | committed (scheduled: and due), not yet published |
//! | `consumer.outbox.oldest.age` | gauge | s | the oldest unpublished event's age (scheduled: since due) |
//! | `consumer.outbox.blocked_aggregates` | gauge | {aggregate} | stopped at a failed event |
//! | `consumer.outbox.scheduled` | gauge | {event} | scheduled, not yet due |
//! | `consumer.outbox.publish.latency` | histogram | s | commit to broker confirmation |
//! | `consumer.outbox.scheduled.lateness` | histogram | s | a scheduled event's due time to broker confirmation |
//! | `consumer.outbox.failed` | counter | {event} | marked failed |
//! | `consumer.outbox.round.failures` | counter | {round} | relay rounds that failed |
//! | `consumer.circuit.open` | updowncounter | {circuit} | handlers whose circuit is open |
//! | `consumer.circuit.transitions` | counter | {transition} | circuits opened and closed, by `consumer.circuit.state` |
//! | `consumer.held_keys.holds` | counter | {key} | keys held by a dead-lettered message |
//! | `consumer.held_keys.parked` | counter | {message} | messages parked behind a held key |
//! | `consumer.held_keys` | gauge | {key} | keys held now (read from the store) |
//! | `consumer.held_keys.oldest.age` | gauge | s | how long the oldest held key has waited |
//! | `consumer.handler.paused` | gauge | {handler} | 1 while an operator has paused the handler, else 0 |
//!
//! Sagas add theirs (`consumer.saga.*`, in `consumer-saga`).
//!
//! The attributes of each are in [`catalogue`]; their keys and closed sets
//! of values in [`attr`]. None carries a message id, key or offset.

pub mod attr;
pub mod catalogue;
pub mod circuit;
pub(crate) mod consumer;
pub mod held;
pub mod paused;
pub mod source;

use opentelemetry::InstrumentationScope;
use opentelemetry::metrics::Meter;

pub use catalogue::{CATALOGUE, Instrument, MetricSpec};
pub use consumer_backend::gauges::{QueueRole, SourceGauges, SourceReadings};

/// The instrumentation scope of every instrument: `consumer`, this
/// crate's version, and the conventions' schema.
pub fn scope() -> InstrumentationScope {
    InstrumentationScope::builder("consumer")
        .with_version(env!("CARGO_PKG_VERSION"))
        .with_schema_url("https://opentelemetry.io/schemas/1.44.0")
        .build()
}

/// The meter from the global provider, as installed now.
pub fn global_meter() -> Meter {
    opentelemetry::global::meter_with_scope(scope())
}

#[cfg(test)]
mod tests {
    /// The table above names every metric of the catalogue, with its
    /// instrument and unit, and nothing else: a metric added to one and not
    /// the other fails here.
    #[test]
    fn the_module_table_is_the_catalogue() {
        let rows: Vec<(String, String, String)> = include_str!("mod.rs")
            .lines()
            .filter_map(|l| l.strip_prefix("//! | `"))
            .filter_map(|l| {
                let cells: Vec<&str> = l.split(" | ").collect();
                Some((
                    cells.first()?.trim_end_matches('`').to_owned(),
                    (*cells.get(1)?).to_owned(),
                    (*cells.get(2)?).to_owned(),
                ))
            })
            .collect();
        let catalogue: Vec<(String, String, String)> = super::CATALOGUE
            .iter()
            .map(|m| {
                (
                    m.name.to_owned(),
                    m.instrument.to_string(),
                    m.unit.to_owned(),
                )
            })
            .collect();
        assert_eq!(rows, catalogue);
    }
}
