//! What an [`AmqpSource`](super::AmqpSource) reports at each metrics
//! collection: the depths of its work, delay and dead-letter queues, and
//! how often its channel was opened again.
//!
//! Depths come from passive declares, which need the broker: a task reads
//! them every [`AmqpSource::with_depth_interval`](super::AmqpSource::with_depth_interval)
//! and a collection reports the last reading, so a scrape never waits for
//! RabbitMQ. The task ends when the consumer does.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use consumer_core::metrics::{QueueRole, SourceGauges, SourceReadings};

use super::metrics::MetricsInner;

pub(super) struct AmqpGauges {
    metrics: Arc<MetricsInner>,
    work_queue: Arc<str>,
    depths: Mutex<Vec<(Arc<str>, QueueRole, u64)>>,
}

impl AmqpGauges {
    /// The gauges, with the task that keeps their depths fresh.
    pub(super) fn start(metrics: Arc<MetricsInner>, every: Duration) -> Arc<Self> {
        let gauges = Arc::new(Self {
            work_queue: Arc::from(metrics.topology.queue()),
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
        let read = match g.metrics.publisher.side_channel().await {
            Ok(channel) => g.metrics.topology.queue_depths(channel).await,
            Err(e) => Err(e),
        };
        match read {
            Ok(queues) => {
                *g.depths.lock().unwrap_or_else(PoisonError::into_inner) = queues
                    .into_iter()
                    .map(|(name, role, n)| (Arc::from(name), role, n))
                    .collect();
            }
            // The last reading stays; the source reconnects on its own.
            Err(e) => {
                tracing::debug!(target: "consumer_amqp", error = %e, "could not read the queue depths")
            }
        }
        drop(g);
        tokio::time::sleep(every).await;
    }
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
        readings.reconnects(
            Arc::clone(&self.work_queue),
            self.metrics.reconnects.load(Ordering::Relaxed),
        );
    }
}
