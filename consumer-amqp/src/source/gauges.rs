//! What an [`AmqpSource`](super::AmqpSource) reports at each metrics
//! collection: the depths of its work, delay and dead-letter queues, which
//! of the queues it consumes RabbitMQ reports crashed, and how often its
//! channel was opened again.
//!
//! Depths come from passive declares, which need the broker: a task reads
//! them every [`AmqpSourceBuilder::with_depth_interval`](super::AmqpSourceBuilder::with_depth_interval)
//! and a collection reports the last reading, so a scrape never waits for
//! RabbitMQ. The task ends when the consumer does.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use consumer_backend::observe::Counter;
use consumer_backend::{QueueRole, SourceGauges, SourceReadings};

use super::stats::StatsInner;
use crate::topology::Topology;

pub(super) struct AmqpGauges {
    metrics: Arc<StatsInner>,
    /// The queues read: one topology, or every partition of a partitioned
    /// one (whose shared dead-letter queue is reported once).
    topologies: Vec<Arc<Topology>>,
    work_queue: Arc<str>,
    depths: Mutex<Vec<(Arc<str>, QueueRole, u64)>>,
}

impl AmqpGauges {
    /// The gauges of `metrics`' own topology, with the task that keeps their
    /// depths fresh.
    pub(super) fn start(metrics: Arc<StatsInner>, every: Duration) -> Arc<Self> {
        let topologies = vec![Arc::clone(&metrics.topology)];
        let name = Arc::from(metrics.topology.queue());
        Self::start_for(metrics, topologies, name, every)
    }

    /// The gauges of `topologies`, reconnects reported under `name`.
    pub(super) fn start_for(
        metrics: Arc<StatsInner>,
        topologies: Vec<Arc<Topology>>,
        name: Arc<str>,
        every: Duration,
    ) -> Arc<Self> {
        let gauges = Arc::new(Self {
            work_queue: name,
            topologies,
            metrics,
            depths: Mutex::default(),
        });
        tokio::spawn(refresh(Arc::downgrade(&gauges), every));
        gauges
    }
}

async fn refresh(gauges: Weak<AmqpGauges>, every: Duration) {
    loop {
        let Some(g) = gauges.upgrade() else { return };
        let read = read_all(&g).await;
        match read {
            Ok(queues) => {
                *g.depths.lock().unwrap_or_else(PoisonError::into_inner) = queues
                    .into_iter()
                    .map(|(name, role, n)| (Arc::from(name), role, n))
                    .collect();
            }
            // The last reading stays; the source reconnects on its own.
            Err(e) => {
                tracing::debug!(target: "consumer::amqp", error = %e, "could not read the queue depths")
            }
        }
        drop(g);
        tokio::time::sleep(every).await;
    }
}

/// Every topology's queue depths, each queue once.
async fn read_all(g: &AmqpGauges) -> crate::error::Result<Vec<(String, QueueRole, u64)>> {
    let mut all: Vec<(String, QueueRole, u64)> = Vec::new();
    for t in &g.topologies {
        let channel = g.metrics.publisher.side_channel().await?;
        for q in t.queue_depths(channel).await? {
            if !all.iter().any(|(name, _, _)| *name == q.0) {
                all.push(q);
            }
        }
    }
    Ok(all)
}

impl SourceGauges for AmqpGauges {
    fn observe(&self, readings: &mut SourceReadings) {
        for (name, role, n) in self
            .depths
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            readings.queue(Arc::clone(name), *role, *n);
        }
        for (queue, crashed) in self
            .metrics
            .crashed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            readings.queue_crashed(Arc::clone(queue), *crashed);
        }
        readings.reconnects(
            Arc::clone(&self.work_queue),
            self.metrics.observer.counters().get(Counter::Reconnects),
        );
    }
}
