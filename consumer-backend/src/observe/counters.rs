//! [`SourceCounters`], the counters of a source, as a listener: which event
//! counts what. Relaxed atomics in fixed arrays: an event costs one or two
//! `fetch_add`s (or a `store` for a level), never an allocation.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::{Happened, Revoke};

macro_rules! named {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident,)+ }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vm])* $variant,)+
        }

        impl $name {
            /// Every one, in order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];
        }
    };
}

named! {
    /// What a source counts, each from zero when it starts.
    Counter {
        /// Deliveries taken from the broker and handed to the runtime.
        Received,
        /// Of those, flagged redelivered by the broker.
        Redelivered,
        /// Read calls made to the broker.
        Polls,
        /// Read calls the broker throttled.
        Throttled,
        /// Other read calls that failed.
        ReceiveErrors,
        /// Acks the broker confirmed.
        Acked,
        /// Acks that failed for good.
        AckFailures,
        /// Deliveries no longer held (acked, released or dropped).
        Left,
        /// Deliveries given back unprocessed.
        Released,
        /// Leases (visibility) extended.
        Extended,
        /// Lease extensions that failed.
        ExtensionFailures,
        /// Retries served by the broker's own redelivery.
        RetriedByBroker,
        /// Dead letters the destination confirmed.
        DeadLetters,
        /// Consuming connections lost and opened again, or broker
        /// connections the client lost (it reconnects by itself).
        Reconnects,
        /// Group assignments received.
        Assigned,
        /// Group revocations received (lost ones included).
        Revoked,
        /// Assignments lost.
        Lost,
        /// Revokes that gave partitions up with records still running.
        RevokeTimeouts,
        /// Offset commits that failed.
        CommitFailures,
        /// Closes that returned before the consumer left its group.
        CloseTimeouts,
        /// Shard iterators obtained again.
        IteratorsRenewed,
        /// Shards read again from their checkpoint.
        Rewinds,
        /// Checkpoints written.
        Checkpoints,
        /// Shards read and checkpointed to their end.
        ShardsEnded,
        /// Leases taken.
        LeasesTaken,
        /// Leases lost.
        LeasesLost,
    }
}

named! {
    /// What a source reports as it is now (set, not added to).
    Level {
        /// Deliveries received and not settled.
        InFlight,
        /// Of those, waiting in the source, not handed out yet.
        Waiting,
        /// Leases held.
        LeasesHeld,
        /// How far behind the newest record the last read was, in
        /// milliseconds.
        MillisBehindLatest,
    }
}

const COUNTERS: usize = Counter::ALL.len();
const LEVELS: usize = Level::ALL.len();

/// The live counters and levels of one source.
#[derive(Debug)]
pub struct SourceCounters {
    counts: [AtomicU64; COUNTERS],
    levels: [AtomicU64; LEVELS],
}

impl Default for SourceCounters {
    fn default() -> Self {
        Self {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            levels: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl SourceCounters {
    /// One counter now.
    pub fn get(&self, counter: Counter) -> u64 {
        self.counts[counter as usize].load(Relaxed)
    }

    /// One level now.
    pub fn level(&self, level: Level) -> u64 {
        self.levels[level as usize].load(Relaxed)
    }

    /// Every counter and level now.
    pub fn snapshot(&self) -> SourceSnapshot {
        SourceSnapshot {
            counts: std::array::from_fn(|i| self.counts[i].load(Relaxed)),
            levels: std::array::from_fn(|i| self.levels[i].load(Relaxed)),
        }
    }

    fn add(&self, counter: Counter, n: u64) {
        self.counts[counter as usize].fetch_add(n, Relaxed);
    }

    fn set(&self, level: Level, n: u64) {
        self.levels[level as usize].store(n, Relaxed);
    }
}

/// A reading of [`SourceCounters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceSnapshot {
    counts: [u64; COUNTERS],
    levels: [u64; LEVELS],
}

impl SourceSnapshot {
    /// One counter.
    pub fn get(&self, counter: Counter) -> u64 {
        self.counts[counter as usize]
    }

    /// One level.
    pub fn level(&self, level: Level) -> u64 {
        self.levels[level as usize]
    }
}

pub(super) fn on(s: &SourceCounters, what: &Happened<'_>) {
    use Counter as C;
    match *what {
        Happened::Received { count, redelivered } => {
            s.add(C::Received, count);
            if redelivered {
                s.add(C::Redelivered, count);
            }
        }
        Happened::Polled => s.add(C::Polls, 1),
        Happened::ReceiveFailed { throttled, .. } => s.add(
            if throttled {
                C::Throttled
            } else {
                C::ReceiveErrors
            },
            1,
        ),
        Happened::Acked => s.add(C::Acked, 1),
        Happened::AckFailed { .. } => s.add(C::AckFailures, 1),
        Happened::Left => s.add(C::Left, 1),
        Happened::Released { count, .. } => s.add(C::Released, count),
        Happened::Extended { count } => s.add(C::Extended, count),
        Happened::ExtensionRefused { .. } => s.add(C::ExtensionFailures, 1),
        Happened::ExtensionsFailed { count, .. } => s.add(C::ExtensionFailures, count),
        Happened::RetriedByBroker => s.add(C::RetriedByBroker, 1),
        Happened::DeadLettered => s.add(C::DeadLetters, 1),
        Happened::Reconnecting { .. } => s.add(C::Reconnects, 1),
        Happened::BrokersDisconnected { lost, .. } => s.add(C::Reconnects, lost),
        Happened::Assigned { .. } => s.add(C::Assigned, 1),
        Happened::Revoking { .. } => s.add(C::Revoked, 1),
        Happened::Revoked { how, .. } => {
            if how == Revoke::Lost {
                s.add(C::Lost, 1);
            }
        }
        Happened::RevokeTimedOut { .. } => s.add(C::RevokeTimeouts, 1),
        Happened::CommitFailed { .. } => s.add(C::CommitFailures, 1),
        Happened::CloseTimedOut { .. } => s.add(C::CloseTimeouts, 1),
        Happened::IteratorRenewed => s.add(C::IteratorsRenewed, 1),
        Happened::Rewound => s.add(C::Rewinds, 1),
        Happened::Checkpointed { shard_end } => {
            s.add(C::Checkpoints, 1);
            if shard_end {
                s.add(C::ShardsEnded, 1);
            }
        }
        Happened::LeaseTaken { .. } => s.add(C::LeasesTaken, 1),
        Happened::LeaseLost { .. } => s.add(C::LeasesLost, 1),
        Happened::Holding { in_flight, waiting } => {
            s.set(Level::InFlight, in_flight);
            s.set(Level::Waiting, waiting);
        }
        Happened::LeasesHeld(n) => s.set(Level::LeasesHeld, n),
        Happened::BehindLatest(d) => s.set(
            Level::MillisBehindLatest,
            u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
        ),
        Happened::RetryCutShort { .. }
        | Happened::DeadLetterRefused { .. }
        | Happened::ReleaseFailed { .. } => {}
    }
}
