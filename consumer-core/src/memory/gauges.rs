//! What a [`MemorySource`](super::MemorySource) reports at each metrics
//! collection: the lag of each partition it owns (or may take).

use std::sync::Arc;

use tokio::time::Instant;

use super::MemoryBroker;
use crate::metrics::{SourceGauges, SourceReadings};

pub(super) struct MemoryGauges {
    pub(super) broker: MemoryBroker,
    pub(super) topic: Arc<str>,
    /// The topic's index in the broker.
    pub(super) index: usize,
    pub(super) source: u64,
}

impl SourceGauges for MemoryGauges {
    fn observe(&self, readings: &mut SourceReadings) {
        let now = Instant::now();
        let state = self.broker.lock();
        let Some(topic) = state.topics.get(self.index) else {
            return;
        };
        for (index, p) in topic.partitions.iter().enumerate() {
            if p.owner.is_some_and(|o| o != self.source) {
                continue;
            }
            let age = p.oldest().map(|at| now.saturating_duration_since(at));
            readings.partition(
                Arc::clone(&self.topic),
                i32::try_from(index).unwrap_or(i32::MAX),
                p.depth() as u64,
                age.unwrap_or_default(),
            );
        }
    }
}
