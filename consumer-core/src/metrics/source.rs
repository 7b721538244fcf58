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

    let partition_gauge = |spec: &MetricSpec, value: fn(&PartitionReading) -> f64| {
        let (weak, series) = (Arc::downgrade(gauges), series.clone());
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
                for q in r.queues_read() {
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
                    for (queue, crashed) in r.crashed_read() {
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
        let Some(counts) = r.rebalances_read() else {
            return;
        };
        for (event, n) in ["assigned", "revoked", "lost"].into_iter().zip(counts) {
            let mut attrs = base.to_vec();
            attrs.push(KeyValue::new(attr::REBALANCE_EVENT, event));
            out.observe(n, &attrs);
        }
    })));
    handles.push(Box::new(counter(
        &catalogue::COMMIT_FAILURES,
        |r, base, out| {
            if let Some(n) = r.commit_failures_read() {
                out.observe(n, base);
            }
        },
    )));
    handles.push(Box::new(counter(&catalogue::RECONNECTS, |r, base, out| {
        if let Some((destination, n)) = r.reconnects_read() {
            // The group is not among this metric's attributes.
            let mut attrs = vec![base[0].clone()];
            attrs.push(KeyValue::new(
                attr::DESTINATION_NAME,
                Arc::clone(destination),
            ));
            out.observe(n, &attrs);
        }
    })));
    SourceInstruments {
        _gauges: Arc::clone(gauges),
        _handles: handles,
    }
}
