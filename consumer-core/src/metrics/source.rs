//! What a source reports when metrics are collected: lag per partition,
//! queue depths, and the counters only the backend sees (rebalances,
//! commit failures, reconnects).
//!
//! A backend implements [`SourceGauges`] and returns it from
//! [`Source::gauges`](crate::source::Source::gauges); the runtime registers the
//! instruments (the names and units are core's: see
//! [`catalogue`]) and calls [`SourceGauges::observe`] at
//! each collection. Only what is observed is exported, so a partition that
//! is revoked stops being reported and its series go away.

use std::sync::{Arc, Weak};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{AsyncInstrument, Meter};

use super::attr;
use super::catalogue::{self, MetricSpec};

/// Reports a source's gauges; called on the collector's thread, so it
/// must only read what the source keeps up to date (atomics, a short
/// lock), never block or wait for the broker.
pub trait SourceGauges: Send + Sync + 'static {
    /// Appends the current readings.
    fn observe(&self, readings: &mut SourceReadings);
}

/// The role of a queue a source reads or retries through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueRole {
    /// Where deliveries come from.
    Work,
    /// Where retry copies wait for their due time.
    Delay,
    /// Where dead letters go.
    DeadLetter,
    /// Messages of the work queue taken by consumers and not settled yet,
    /// where the broker counts them (SQS's
    /// `ApproximateNumberOfMessagesNotVisible`).
    InFlight,
}

#[derive(Debug, Clone)]
struct Partition {
    destination: Arc<str>,
    partition: i32,
    lag: u64,
    oldest_age: Duration,
}

#[derive(Debug, Clone)]
struct Queue {
    name: Arc<str>,
    role: QueueRole,
    depth: u64,
}

/// What [`SourceGauges::observe`] fills in.
#[derive(Debug, Default)]
pub struct SourceReadings {
    partitions: Vec<Partition>,
    queues: Vec<Queue>,
    crashed: Vec<(Arc<str>, bool)>,
    rebalances: Option<[u64; 3]>,
    commit_failures: Option<u64>,
    reconnects: Option<(Arc<str>, u64)>,
}

impl SourceReadings {
    /// One assigned partition: `lag` records not yet settled by this
    /// consumer, and the age of the oldest one it holds unsettled
    /// (`Duration::ZERO` when it holds none).
    pub fn partition(
        &mut self,
        destination: Arc<str>,
        partition: i32,
        lag: u64,
        oldest_age: Duration,
    ) {
        self.partitions.push(Partition {
            destination,
            partition,
            lag,
            oldest_age,
        });
    }

    /// The messages in a queue.
    pub fn queue(&mut self, name: Arc<str>, role: QueueRole, depth: u64) {
        self.queues.push(Queue { name, role, depth });
    }

    /// Whether the broker reports `queue` (one the source consumes) as
    /// crashed: its messages are out of reach until an operator acts.
    pub fn queue_crashed(&mut self, queue: Arc<str>, crashed: bool) {
        self.crashed.push((queue, crashed));
    }

    /// Group membership changes since the source started.
    pub fn rebalances(&mut self, assigned: u64, revoked: u64, lost: u64) {
        self.rebalances = Some([assigned, revoked, lost]);
    }

    /// Offset commits that failed since the source started.
    pub fn commit_failures(&mut self, n: u64) {
        self.commit_failures = Some(n);
    }

    /// Times the consuming connection to `destination` was opened again.
    pub fn reconnects(&mut self, destination: Arc<str>, n: u64) {
        self.reconnects = Some((destination, n));
    }
}

/// The attributes every source series starts with.
#[derive(Clone)]
pub(crate) struct SourceSeries {
    pub(crate) system: &'static str,
    pub(crate) group: Option<Arc<str>>,
}

impl SourceSeries {
    fn base(&self) -> Vec<KeyValue> {
        let mut attrs = vec![KeyValue::new(attr::MESSAGING_SYSTEM, self.system)];
        if let Some(g) = &self.group {
            attrs.push(KeyValue::new(attr::CONSUMER_GROUP, Arc::clone(g)));
        }
        attrs
    }
}

/// Keeps the source's gauges alive while the consumer runs: the
/// instruments' callbacks hold them weakly, so once the consumer is done
/// they report nothing.
pub(crate) struct SourceInstruments {
    _gauges: Arc<dyn SourceGauges>,
    _handles: Vec<Box<dyn std::any::Any + Send + Sync>>,
}

/// Registers the source's instruments on `meter`. The callbacks hold the
/// gauges weakly: once the source is gone they report nothing.
pub(crate) fn register(
    meter: &Meter,
    series: &SourceSeries,
    gauges: &Arc<dyn SourceGauges>,
) -> SourceInstruments {
    fn read(gauges: &Weak<dyn SourceGauges>) -> Option<SourceReadings> {
        let gauges = gauges.upgrade()?;
        let mut r = SourceReadings::default();
        gauges.observe(&mut r);
        Some(r)
    }
    let mut handles: Vec<Box<dyn std::any::Any + Send + Sync>> = Vec::new();

    let partition_gauge = |spec: &MetricSpec, value: fn(&Partition) -> f64| {
        let (weak, series) = (Arc::downgrade(gauges), series.clone());
        meter
            .f64_observable_gauge(spec.name)
            .with_unit(spec.unit)
            .with_description(spec.description)
            .with_callback(move |out: &dyn AsyncInstrument<f64>| {
                let Some(r) = read(&weak) else { return };
                for p in &r.partitions {
                    let mut attrs = series.base();
                    attrs.push(KeyValue::new(
                        attr::DESTINATION_NAME,
                        Arc::clone(&p.destination),
                    ));
                    attrs.push(KeyValue::new(attr::PARTITION_ID, p.partition.to_string()));
                    out.observe(value(p), &attrs);
                }
            })
            .build()
    };
    handles.push(Box::new(partition_gauge(&catalogue::LAG, |p| p.lag as f64)));
    handles.push(Box::new(partition_gauge(&catalogue::LAG_AGE, |p| {
        p.oldest_age.as_secs_f64()
    })));

    let queue_gauge = |spec: &MetricSpec, dead_letter: bool| {
        let (weak, system) = (Arc::downgrade(gauges), series.system);
        meter
            .u64_observable_gauge(spec.name)
            .with_unit(spec.unit)
            .with_description(spec.description)
            .with_callback(move |out: &dyn AsyncInstrument<u64>| {
                let Some(r) = read(&weak) else { return };
                for q in &r.queues {
                    if (q.role == QueueRole::DeadLetter) != dead_letter {
                        continue;
                    }
                    let mut attrs = vec![
                        KeyValue::new(attr::MESSAGING_SYSTEM, system),
                        KeyValue::new(attr::DESTINATION_NAME, Arc::clone(&q.name)),
                    ];
                    match q.role {
                        QueueRole::Work => attrs.push(KeyValue::new(attr::QUEUE_ROLE, "work")),
                        QueueRole::Delay => attrs.push(KeyValue::new(attr::QUEUE_ROLE, "delay")),
                        QueueRole::InFlight => {
                            attrs.push(KeyValue::new(attr::QUEUE_ROLE, "in_flight"));
                        }
                        QueueRole::DeadLetter => {}
                    }
                    out.observe(q.depth, &attrs);
                }
            })
            .build()
    };
    handles.push(Box::new(queue_gauge(&catalogue::QUEUE_DEPTH, false)));
    handles.push(Box::new(queue_gauge(
        &catalogue::DEAD_LETTER_QUEUE_DEPTH,
        true,
    )));
    {
        let (weak, system) = (Arc::downgrade(gauges), series.system);
        let spec = &catalogue::QUEUE_CRASHED;
        handles.push(Box::new(
            meter
                .u64_observable_gauge(spec.name)
                .with_unit(spec.unit)
                .with_description(spec.description)
                .with_callback(move |out: &dyn AsyncInstrument<u64>| {
                    let Some(r) = read(&weak) else { return };
                    for (queue, crashed) in &r.crashed {
                        let attrs = [
                            KeyValue::new(attr::MESSAGING_SYSTEM, system),
                            KeyValue::new(attr::DESTINATION_NAME, Arc::clone(queue)),
                        ];
                        out.observe(u64::from(*crashed), &attrs);
                    }
                })
                .build(),
        ));
    }

    let counter =
        |spec: &MetricSpec, each: fn(&SourceReadings, &[KeyValue], &dyn AsyncInstrument<u64>)| {
            let (weak, series) = (Arc::downgrade(gauges), series.clone());
            meter
                .u64_observable_counter(spec.name)
                .with_unit(spec.unit)
                .with_description(spec.description)
                .with_callback(move |out: &dyn AsyncInstrument<u64>| {
                    let Some(r) = read(&weak) else { return };
                    each(&r, &series.base(), out);
                })
                .build()
        };
    handles.push(Box::new(counter(&catalogue::REBALANCES, |r, base, out| {
        let Some(counts) = r.rebalances else { return };
        for (event, n) in ["assigned", "revoked", "lost"].into_iter().zip(counts) {
            let mut attrs = base.to_vec();
            attrs.push(KeyValue::new(attr::REBALANCE_EVENT, event));
            out.observe(n, &attrs);
        }
    })));
    handles.push(Box::new(counter(
        &catalogue::COMMIT_FAILURES,
        |r, base, out| {
            if let Some(n) = r.commit_failures {
                out.observe(n, base);
            }
        },
    )));
    handles.push(Box::new(counter(&catalogue::RECONNECTS, |r, base, out| {
        if let Some((destination, n)) = &r.reconnects {
            // The group is not among this metric's attributes.
            let mut attrs = vec![base[0].clone()];
            attrs.push(KeyValue::new(
                attr::DESTINATION_NAME,
                Arc::clone(destination),
            ));
            out.observe(*n, &attrs);
        }
    })));
    SourceInstruments {
        _gauges: Arc::clone(gauges),
        _handles: handles,
    }
}
