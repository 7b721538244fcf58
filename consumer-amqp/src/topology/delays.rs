//! [`DelayQueues`]: where a retry copy waits out its delay, how it comes
//! back, and how many such queues a topology needs.
//!
//! A copy waits in the queue of the smallest bucket that holds its delay (a
//! power of two milliseconds, from 16 ms), with a per-message `expiration`
//! equal to its delay; when it expires, RabbitMQ dead-letters it through the
//! default exchange back to the work queue.
//!
//! **How many buckets.** As many as the longest delay the topology's
//! handlers can ask for needs: the consumer tells the source every
//! handler's retry policy before the first delivery, and the source sizes
//! its delay queues to the longest one before it takes any. A topology whose
//! handlers retry in place has none. An explicit
//! [`Topology::with_max_retry_delay`](super::Topology::with_max_retry_delay)
//! declares every bucket up to it and refuses a handler that asks for more.
//!
//! **Own or shared.** A [`Topology`](super::Topology)'s delay queues are its
//! own: a copy is published to its bucket's queue, which dead-letters with
//! the work queue as routing key. A
//! [`PartitionedTopology`](super::PartitionedTopology)'s are shared by its
//! partitions, so that the queue count does not grow with the partition
//! count: each bucket is a queue bound to a `fanout` exchange of the same
//! name, a copy is published to that exchange with its partition queue as
//! routing key, and the delay queue has no dead-letter routing key of its
//! own, so RabbitMQ dead-letters the copy with the routing key it was
//! published with: back to its partition.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use lapin::types::FieldTable;

use crate::names::long;

/// The smallest bucket: retries shorter than this wait this long.
pub(crate) const MIN_BUCKET_MS: u64 = 16;

/// More buckets than this would overflow the milliseconds (16 ms x 2^40 is
/// about 560 years).
const MAX_TIERS: u32 = 40;

/// The delay queues of a topology: see the module docs.
#[derive(Debug, Clone)]
pub(crate) struct DelayQueues {
    prefix: String,
    shared: bool,
    cap: Option<Duration>,
    /// How many buckets are needed (shared by every clone: the partitions,
    /// the ackers and the gauges see one sizing).
    tiers: Arc<AtomicU32>,
}

impl DelayQueues {
    /// No buckets yet; `shared` for a partitioned topology's.
    pub(crate) fn new(prefix: String, shared: bool) -> Self {
        Self {
            prefix,
            shared,
            cap: None,
            tiers: Arc::default(),
        }
    }

    /// Every bucket up to `cap`, and none beyond.
    pub(crate) fn with_cap(mut self, cap: Duration) -> Self {
        self.cap = Some(cap);
        self.tiers = Arc::new(AtomicU32::new(tiers_for(cap)));
        self
    }

    /// The same buckets under another name prefix.
    pub(crate) fn renamed(mut self, prefix: String) -> Self {
        self.prefix = prefix;
        self
    }

    /// The name prefix: `<prefix>.<n>ms`.
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether the partitions of a partitioned topology share these.
    pub(crate) fn shared(&self) -> bool {
        self.shared
    }

    /// How many buckets the topology needs now.
    pub(crate) fn tiers(&self) -> u32 {
        self.tiers.load(Ordering::Acquire)
    }

    /// The longest delay the buckets hold.
    pub(crate) fn longest(&self) -> Duration {
        bucket(self.tiers().saturating_sub(1))
    }

    /// Why retries of up to `longest` cannot be held (an explicit cap below
    /// them), in one sentence; `None` when they can.
    pub(crate) fn refusal(&self, longest: Duration, queue: &str) -> Option<String> {
        let cap = self.cap?;
        let held = bucket(tiers_for(cap).saturating_sub(1));
        (longest > held).then(|| {
            format!(
                "retries may wait up to {longest:?}, but the longest delay queue of `{queue}` holds \
                 {held:?} (a copy would come back early): raise with_max_retry_delay to at least \
                 {longest:?} (or leave it unset: the delay queues are then sized to the handlers), \
                 or lower the handler's max_delay"
            )
        })
    }

    /// [`refusal`](Self::refusal) as a `Result`.
    pub(crate) fn check(&self, longest: Duration, queue: &str) -> Result<(), String> {
        self.refusal(longest, queue).map_or(Ok(()), Err)
    }

    /// Makes room for retries of up to `longest`; see
    /// [`refusal`](Self::refusal) for when it cannot.
    pub(crate) fn size_for(&self, longest: Duration) {
        self.tiers.fetch_max(tiers_for(longest), Ordering::AcqRel);
    }

    /// Every bucket with its queue, shortest first.
    pub(crate) fn buckets(&self) -> Vec<(Duration, String)> {
        (0..self.tiers())
            .map(|i| (bucket(i), self.name(bucket(i))))
            .collect()
    }

    /// The bucket a retry of `delay` waits in: the smallest that holds it,
    /// else the largest there is (with none sized, the one it would need).
    pub(crate) fn bucket_for(&self, delay: Duration) -> Duration {
        let needed = tiers_for(delay);
        let tiers = match self.tiers() {
            0 => needed,
            n => needed.min(n),
        };
        bucket(tiers.saturating_sub(1))
    }

    /// The queue a retry of `delay` waits in.
    pub(crate) fn queue_for(&self, delay: Duration) -> String {
        self.name(self.bucket_for(delay))
    }

    /// Where a retry of `delay` of a delivery from `work_queue` is
    /// published: `(exchange, routing key)`.
    pub(crate) fn route(&self, delay: Duration, work_queue: &str) -> (String, String) {
        let queue = self.queue_for(delay);
        if self.shared {
            (queue, work_queue.to_owned())
        } else {
            (String::new(), queue)
        }
    }

    /// The dead-letter arguments of a delay queue: expired copies go through
    /// the default exchange, to `work_queue` (own), or to the queue they were
    /// published for (shared).
    pub(crate) fn dead_letter_args(&self, args: &mut FieldTable, work_queue: &str) {
        args.insert("x-dead-letter-exchange".into(), long(""));
        if !self.shared {
            args.insert("x-dead-letter-routing-key".into(), long(work_queue));
        }
    }

    fn name(&self, bucket: Duration) -> String {
        bucket_name(&self.prefix, bucket)
    }
}

/// Every bucket queue there can be under `prefix`, shortest first,
/// whatever the handlers ask for: what a teardown deletes, and what the
/// look for an older layout walks.
pub(crate) fn every_bucket(prefix: &str) -> impl Iterator<Item = String> + '_ {
    (0..=MAX_TIERS).map(move |i| bucket_name(prefix, bucket(i)))
}

/// The queue of `bucket` under `prefix`: `<prefix>.<n>ms`.
fn bucket_name(prefix: &str, bucket: Duration) -> String {
    format!("{prefix}.{}ms", bucket.as_millis())
}

/// Bucket `i`: 16 ms x 2^i.
fn bucket(i: u32) -> Duration {
    Duration::from_millis(MIN_BUCKET_MS << i.min(MAX_TIERS))
}

/// How many buckets hold a delay of `d`: up to the first at or above it.
fn tiers_for(d: Duration) -> u32 {
    let mut i = 0;
    while bucket(i) < d && i < MAX_TIERS {
        i += 1;
    }
    i + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn buckets_are_sized_to_the_longest_delay_asked_for() {
        let d = DelayQueues::new("q.retry".into(), false);
        assert!(d.buckets().is_empty(), "none until a handler asks");
        d.size_for(ms(200));
        let names: Vec<String> = d.buckets().into_iter().map(|b| b.1).collect();
        assert_eq!(
            names,
            [
                "q.retry.16ms",
                "q.retry.32ms",
                "q.retry.64ms",
                "q.retry.128ms",
                "q.retry.256ms"
            ]
        );
        d.size_for(ms(20));
        assert_eq!(d.tiers(), 5, "a shorter policy does not shrink them");
        assert_eq!(d.queue_for(Duration::ZERO), "q.retry.16ms");
        assert_eq!(d.queue_for(ms(33)), "q.retry.64ms");
        assert_eq!(d.queue_for(ms(64)), "q.retry.64ms");
        assert_eq!(
            d.queue_for(ms(9000)),
            "q.retry.256ms",
            "the largest there is"
        );
        assert_eq!(d.longest(), ms(256));
    }

    #[test]
    fn an_explicit_cap_declares_every_bucket_to_it_and_refuses_longer_delays() {
        let d = DelayQueues::new("q.retry".into(), false).with_cap(Duration::from_secs(3600));
        assert_eq!(d.tiers(), 19, "16 ms to 4 194 304 ms");
        assert!(d.refusal(Duration::from_secs(3600), "q").is_none());
        let why = d
            .refusal(Duration::from_secs(5000), "q")
            .expect("longer than the cap's largest bucket");
        assert!(why.contains("with_max_retry_delay"), "{why}");
        let open = DelayQueues::new("q.retry".into(), false);
        assert!(open.refusal(Duration::from_secs(86_400), "q").is_none());
    }

    #[test]
    fn shared_buckets_route_through_their_exchange_with_the_partition_as_key() {
        let shared = DelayQueues::new("orders.retry".into(), true);
        shared.size_for(ms(100));
        assert_eq!(
            shared.route(ms(100), "orders.p3"),
            ("orders.retry.128ms".to_owned(), "orders.p3".to_owned())
        );
        let own = DelayQueues::new("orders.retry".into(), false);
        own.size_for(ms(100));
        assert_eq!(
            own.route(ms(100), "orders"),
            (String::new(), "orders.retry.128ms".to_owned())
        );
        let mut args = FieldTable::default();
        shared.dead_letter_args(&mut args, "orders.p3");
        assert!(!args.inner().contains_key("x-dead-letter-routing-key"));
    }

    #[test]
    fn every_bucket_there_can_be_is_named_as_the_sized_ones_are() {
        let d = DelayQueues::new("q.retry".into(), true).with_cap(Duration::from_secs(3600));
        let every: Vec<String> = every_bucket("q.retry").collect();
        assert_eq!(every.len(), 41, "16 ms x 2^0 .. 2^40");
        let sized: Vec<String> = d.buckets().into_iter().map(|b| b.1).collect();
        assert_eq!(every[..sized.len()], sized[..]);
    }

    #[test]
    fn clones_share_one_sizing() {
        let d = DelayQueues::new("q.retry".into(), true);
        let partition = d.clone();
        d.size_for(ms(1000));
        assert_eq!(partition.tiers(), d.tiers());
    }
}
