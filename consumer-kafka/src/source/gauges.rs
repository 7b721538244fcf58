//! What a [`KafkaSource`](super::KafkaSource) reports at each metrics
//! collection: per assigned partition its lag and the age of its oldest
//! pending record, the group's rebalances and failed commits, and the
//! broker connections lost. A revoked partition leaves the ledger, so its
//! series go away.

use std::sync::Arc;
use std::time::Duration;

use consumer_backend::observe::Counter;
use consumer_backend::{SourceGauges, SourceReadings};

use super::ledger::Ledger;
use super::poller::now_ms;

pub(super) struct KafkaGauges {
    pub(super) shared: Arc<Ledger>,
    /// The subscribed topic, the destination reconnects are reported under.
    pub(super) topic: Arc<str>,
}

impl SourceGauges for KafkaGauges {
    fn observe(&self, readings: &mut SourceReadings) {
        let now = now_ms();
        {
            let state = self.shared.lock();
            for (tp, p) in &state.partitions {
                // Behind the end of the partition: from the high watermark
                // librdkafka reported, else what is pending here.
                let lag = match (p.high_watermark, p.position().or(p.committed)) {
                    (Some(hw), Some(position)) => (hw - position).max(0),
                    _ => i64::try_from(p.pending.len()).unwrap_or(i64::MAX),
                };
                let age = p.oldest_pending_ms().map_or(Duration::ZERO, |at| {
                    Duration::from_millis(u64::try_from(now - at).unwrap_or(0))
                });
                readings.partition(
                    Arc::clone(&tp.topic),
                    tp.partition,
                    u64::try_from(lag).unwrap_or(0),
                    age,
                );
            }
        }
        let c = self.shared.observer.counters();
        readings.rebalances(
            c.get(Counter::Assigned),
            c.get(Counter::Revoked),
            c.get(Counter::Lost),
        );
        readings.commit_failures(c.get(Counter::CommitFailures));
        readings.reconnects(Arc::clone(&self.topic), c.get(Counter::Reconnects));
    }
}
