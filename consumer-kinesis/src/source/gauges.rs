//! What a [`KinesisSource`](super::KinesisSource) reports at each metrics
//! collection, per shard it holds (reported as a partition: the number in
//! its id, `shardId-000000000003` being 3):
//!
//! * `consumer.lag`: the shard's records read from the oldest one not
//!   settled on (what a restart reads again; records not read yet are
//!   not counted: Kinesis says how far behind a reader is in time, not
//!   in records);
//! * `consumer.lag.age`: the age of the oldest record not settled: the
//!   oldest held, by its `ApproximateArrivalTimestamp`, or, when the reader
//!   is behind, the shard's `MillisBehindLatest` (how old the next unread
//!   record is), whichever is older. Kinesis keeps records 24 hours by
//!   default: this age reaching the retention period means loss.
//!
//! A shard whose lease ends leaves the readings, so its series go away.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, SystemTime};

use consumer_backend::{SourceGauges, SourceReadings};

use super::reader::Reading;

pub(super) struct KinesisGauges {
    pub(super) reading: Arc<Reading>,
    pub(super) stream: Arc<str>,
}

/// The number in a shard id (`shardId-000000000003`: 3), or -1.
pub(super) fn shard_number(shard_id: &str) -> i32 {
    shard_id
        .rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(-1)
}

impl SourceGauges for KinesisGauges {
    fn observe(&self, readings: &mut SourceReadings) {
        let now = SystemTime::now();
        let held = self
            .reading
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for (shard, session) in held {
            let (lag, oldest) = {
                let ledger = session.ledger();
                (ledger.len(), ledger.oldest_arrival())
            };
            let held_age = oldest
                .and_then(|at| now.duration_since(at).ok())
                .unwrap_or_default();
            let behind = Duration::from_millis(session.millis_behind.load(Ordering::Relaxed));
            readings.partition(
                Arc::clone(&self.stream),
                shard_number(&shard),
                lag as u64,
                held_age.max(behind),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_is_reported_by_the_number_in_its_id() {
        assert_eq!(shard_number("shardId-000000000003"), 3);
        assert_eq!(shard_number("shardId-000000000120"), 120);
        assert_eq!(shard_number("odd"), -1);
    }
}
