//! The instruments of what a source reports when metrics are collected
//! ([`SourceGauges`], implemented by the backends): registered on the
//! consumer's meter with the names and units of the [`catalogue`], read at
//! each collection.

use std::sync::{Arc, Weak};

use opentelemetry::KeyValue;
use opentelemetry::metrics::{AsyncInstrument, Meter};

use consumer_backend::gauges::{PartitionReading, QueueRole, SourceGauges, SourceReadings};

use super::attr;
use super::catalogue::{self, MetricSpec};

/// The attributes every source series starts with.
#[derive(Clone)]
pub(crate) struct SourceSeries {
    pub(crate) system: &'static str,
    pub(crate) group: Option<Arc<str>>,
}

impl SourceSeries {
    pub(crate) fn base(&self) -> Vec<KeyValue> {
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

/// An instrument kept alive for as long as the consumer runs.
type Handle = Box<dyn std::any::Any + Send + Sync>;

/// Registers the source's instruments on `meter`. The callbacks hold the
/// gauges weakly: once the source is gone they report nothing.
pub(crate) fn register(
    meter: &Meter,
    series: &SourceSeries,
    gauges: &Arc<dyn SourceGauges>,
) -> SourceInstruments {
    let weak = Arc::downgrade(gauges);
    let mut handles: Vec<Handle> = Vec::new();
    handles.extend(partition_gauges(meter, series, &weak));
    handles.extend(queue_gauges(meter, series.system, &weak));
    handles.push(crashed_gauge(meter, series.system, &weak));
    handles.push(oldest_gauge(meter, series.system, &weak));
    handles.extend(counters(meter, series, &weak));
    SourceInstruments {
        _gauges: Arc::clone(gauges),
        _handles: handles,
    }
}

/// The source's readings now; `None` once the source is gone.
fn read(gauges: &Weak<dyn SourceGauges>) -> Option<SourceReadings> {
    let gauges = gauges.upgrade()?;
    let mut r = SourceReadings::default();
    gauges.observe(&mut r);
    Some(r)
}

/// Lag and the age of the oldest unsettled record, per partition.
fn partition_gauges(
    meter: &Meter,
    series: &SourceSeries,
    gauges: &Weak<dyn SourceGauges>,
) -> [Handle; 2] {
    let gauge = |spec: &MetricSpec, value: fn(&PartitionReading) -> f64| -> Handle {
        let (weak, series) = (gauges.clone(), series.clone());
        Box::new(
            meter
                .f64_observable_gauge(spec.name)
                .with_unit(spec.unit)
                .with_description(spec.description)
                .with_callback(move |out: &dyn AsyncInstrument<f64>| {
                    let Some(r) = read(&weak) else { return };
                    for p in r.partitions_read() {
                        let mut attrs = series.base();
                        attrs.push(KeyValue::new(
                            attr::DESTINATION_NAME,
                            Arc::clone(&p.destination),
                        ));
                        attrs.push(KeyValue::new(attr::PARTITION_ID, p.partition.to_string()));
                        out.observe(value(p), &attrs);
                    }
                })
                .build(),
        )
    };
    [
        gauge(&catalogue::LAG, |p| p.lag as f64),
        gauge(&catalogue::LAG_AGE, |p| p.oldest_age.as_secs_f64()),
    ]
}

/// Queue depths: the work, delay and in-flight ones, and the dead-letter
/// queue's under its own name.
fn queue_gauges(
    meter: &Meter,
    system: &'static str,
    gauges: &Weak<dyn SourceGauges>,
) -> [Handle; 2] {
    let gauge = |spec: &MetricSpec, dead_letter: bool| -> Handle {
        let weak = gauges.clone();
        Box::new(
            meter
                .u64_observable_gauge(spec.name)
                .with_unit(spec.unit)
                .with_description(spec.description)
                .with_callback(move |out: &dyn AsyncInstrument<u64>| {
                    let Some(r) = read(&weak) else { return };
                    for q in r.queues_read() {
                        if (q.role == QueueRole::DeadLetter) != dead_letter {
                            continue;
                        }
                        let mut attrs = vec![
                            KeyValue::new(attr::MESSAGING_SYSTEM, system),
                            KeyValue::new(attr::DESTINATION_NAME, Arc::clone(&q.name)),
                        ];
                        let role = match q.role {
                            QueueRole::Work => Some("work"),
                            QueueRole::Delay => Some("delay"),
                            QueueRole::Scheduled => Some("scheduled"),
                            QueueRole::InFlight => Some("in_flight"),
                            QueueRole::DeadLetter => None,
                        };
                        if let Some(role) = role {
                            attrs.push(KeyValue::new(attr::QUEUE_ROLE, role));
                        }
                        out.observe(q.depth, &attrs);
                    }
                })
                .build(),
        )
    };
    [
        gauge(&catalogue::QUEUE_DEPTH, false),
        gauge(&catalogue::DEAD_LETTER_QUEUE_DEPTH, true),
    ]
}

/// Whether each queue the source consumes is reported crashed.
fn crashed_gauge(meter: &Meter, system: &'static str, gauges: &Weak<dyn SourceGauges>) -> Handle {
    let weak = gauges.clone();
    let spec = &catalogue::QUEUE_CRASHED;
    Box::new(
        meter
            .u64_observable_gauge(spec.name)
            .with_unit(spec.unit)
            .with_description(spec.description)
            .with_callback(move |out: &dyn AsyncInstrument<u64>| {
                let Some(r) = read(&weak) else { return };
                for (queue, crashed) in r.crashed_read() {
                    let attrs = [
                        KeyValue::new(attr::MESSAGING_SYSTEM, system),
                        KeyValue::new(attr::DESTINATION_NAME, Arc::clone(queue)),
                    ];
                    out.observe(u64::from(*crashed), &attrs);
                }
            })
            .build(),
    )
}

/// The age of the oldest ready message per queue, where the source knows it.
fn oldest_gauge(meter: &Meter, system: &'static str, gauges: &Weak<dyn SourceGauges>) -> Handle {
    let weak = gauges.clone();
    let spec = &catalogue::QUEUE_OLDEST_AGE;
    Box::new(
        meter
            .f64_observable_gauge(spec.name)
            .with_unit(spec.unit)
            .with_description(spec.description)
            .with_callback(move |out: &dyn AsyncInstrument<f64>| {
                let Some(r) = read(&weak) else { return };
                for (queue, age) in r.oldest_read() {
                    let attrs = [
                        KeyValue::new(attr::MESSAGING_SYSTEM, system),
                        KeyValue::new(attr::DESTINATION_NAME, Arc::clone(queue)),
                    ];
                    out.observe(age.as_secs_f64(), &attrs);
                }
            })
            .build(),
    )
}

/// Rebalances, commit failures and reconnects: what only the backend counts.
fn counters(meter: &Meter, series: &SourceSeries, gauges: &Weak<dyn SourceGauges>) -> [Handle; 3] {
    let counter = |spec: &MetricSpec,
                   each: fn(&SourceReadings, &[KeyValue], &dyn AsyncInstrument<u64>)|
     -> Handle {
        let (weak, series) = (gauges.clone(), series.clone());
        Box::new(
            meter
                .u64_observable_counter(spec.name)
                .with_unit(spec.unit)
                .with_description(spec.description)
                .with_callback(move |out: &dyn AsyncInstrument<u64>| {
                    let Some(r) = read(&weak) else { return };
                    each(&r, &series.base(), out);
                })
                .build(),
        )
    };
    [
        counter(&catalogue::REBALANCES, |r, base, out| {
            let Some(counts) = r.rebalances_read() else {
                return;
            };
            for (event, n) in ["assigned", "revoked", "lost"].into_iter().zip(counts) {
                let mut attrs = base.to_vec();
                attrs.push(KeyValue::new(attr::REBALANCE_EVENT, event));
                out.observe(n, &attrs);
            }
        }),
        counter(&catalogue::COMMIT_FAILURES, |r, base, out| {
            if let Some(n) = r.commit_failures_read() {
                out.observe(n, base);
            }
        }),
        counter(&catalogue::RECONNECTS, |r, base, out| {
            if let Some((destination, n)) = r.reconnects_read() {
                // The group is not among this metric's attributes.
                let mut attrs = vec![base[0].clone()];
                attrs.push(KeyValue::new(
                    attr::DESTINATION_NAME,
                    Arc::clone(destination),
                ));
                out.observe(n, &attrs);
            }
        }),
    ]
}
