//! What an [`SqsSource`](super::SqsSource) reports at each metrics
//! collection: SQS's approximate counts of its queue (`ApproximateNumberOfMessages`
//! as the work queue's depth, `...NotVisible` as in flight, `...Delayed` as
//! delayed) and of its dead-letter queue.
//!
//! The counts need a `GetQueueAttributes` call each: a task reads them
//! every [`with_depth_interval`](super::SqsSourceBuilder::with_depth_interval)
//! and a collection reports the last reading, so a scrape never waits for
//! SQS. The task ends when the consumer does.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use consumer_backend::{QueueRole, SourceGauges, SourceReadings};

use crate::client::SqsApi;
use crate::topology::Resolved;

pub(super) struct SqsGauges {
    depths: Mutex<Vec<(Arc<str>, QueueRole, u64)>>,
}

impl SqsGauges {
    pub(super) fn start(api: Arc<dyn SqsApi>, queues: Resolved, every: Duration) -> Arc<Self> {
        let gauges = Arc::new(Self {
            depths: Mutex::default(),
        });
        tokio::spawn(refresh(Arc::downgrade(&gauges), api, queues, every));
        gauges
    }
}

async fn refresh(gauges: Weak<SqsGauges>, api: Arc<dyn SqsApi>, q: Resolved, every: Duration) {
    let (work, dlq) = (
        Arc::<str>::from(q.queue.name()),
        Arc::<str>::from(q.dead_letter.name()),
    );
    loop {
        if gauges.strong_count() == 0 {
            return;
        }
        let mut read = Vec::new();
        match api.queue_attributes(&q.queue_url).await {
            Ok(a) => {
                for (name, role) in [
                    ("ApproximateNumberOfMessages", QueueRole::Work),
                    ("ApproximateNumberOfMessagesNotVisible", QueueRole::InFlight),
                    ("ApproximateNumberOfMessagesDelayed", QueueRole::Delay),
                ] {
                    if let Some(n) = a.get(name).and_then(|v| v.parse().ok()) {
                        read.push((Arc::clone(&work), role, n));
                    }
                }
            }
            Err(e) => {
                tracing::debug!(target: "consumer::sqs", error = %e, "could not read the queue's counts");
            }
        }
        match api.queue_attributes(&q.dead_letter_url).await {
            Ok(a) => {
                if let Some(n) = a
                    .get("ApproximateNumberOfMessages")
                    .and_then(|v| v.parse().ok())
                {
                    read.push((Arc::clone(&dlq), QueueRole::DeadLetter, n));
                }
            }
            Err(e) => {
                tracing::debug!(target: "consumer::sqs", error = %e, "could not read the dead-letter queue's count");
            }
        }
        let Some(g) = gauges.upgrade() else { return };
        if !read.is_empty() {
            *g.depths.lock().unwrap_or_else(PoisonError::into_inner) = read;
        }
        drop(g);
        tokio::time::sleep(every).await;
    }
}

impl SourceGauges for SqsGauges {
    fn observe(&self, readings: &mut SourceReadings) {
        for (name, role, n) in self
            .depths
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            readings.queue(Arc::clone(name), *role, *n);
        }
    }
}
