//! One observer of what happens at a source.
//!
//! A backend emits each thing that happens at its source once, where it
//! happens, as a [`Happened`], through its [`SourceObserver`] (one cheap
//! handle, cloned into its ackers and tasks). The listeners record it,
//! always in this order:
//!
//! 1. the counters ([`SourceCounters`], in [`counters`]): relaxed atomics,
//!    read by the backend's stats view and its [`SourceGauges`](crate::SourceGauges);
//! 2. the log line (`logs.rs`), under the backend's target
//!    (`consumer::amqp`, `consumer::kafka`, ...), which reads the counters
//!    when a line reports a total.
//!
//! The counters come first so that whoever waits on them (a test, a
//! health probe) and then reads the logs finds the line written. What a
//! listener does with an event is in its own file: a counter or a log
//! field changes there, and nowhere in a backend. Emitting allocates
//! nothing: events borrow what they name.
//!
//! This is the shape of the runtime's observer in `consumer-core`, for
//! what only a backend sees (broker calls, leases, rebalances, commits);
//! what happens to a delivery in the runtime is the runtime's to observe.

pub mod counters;
mod logs;

use std::fmt::{Debug, Display};
use std::sync::Arc;
use std::time::Duration;

pub use counters::{Counter, Level, SourceCounters, SourceSnapshot};

/// The broker a source reads: which log target its lines go under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Broker {
    /// RabbitMQ (`consumer::amqp`).
    Amqp,
    /// Apache Kafka (`consumer::kafka`).
    Kafka,
    /// Amazon SQS (`consumer::sqs`).
    Sqs,
    /// Amazon Kinesis (`consumer::kinesis`).
    Kinesis,
    /// Any other backend (`consumer::source`).
    Other,
}

/// An error as an event names it.
pub type ErrorRef<'a> = &'a (dyn Display + Sync);

/// Why deliveries were given back unprocessed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Release {
    /// The runtime released it (shutdown, or a settle that failed for good).
    Asked,
    /// Its acker was dropped without settling it.
    Dropped,
    /// An earlier message of its group is retried through the broker: it
    /// goes back so the group keeps its order (SQS FIFO).
    GroupRetried,
    /// It waited in the source, not handed out yet, when the source closed.
    Closing,
}

/// Which offset commit failed (Kafka).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Commit {
    /// An auto-commit of `offsets` partitions: the next carries the same
    /// offsets.
    Auto {
        /// The partitions it carried.
        offsets: usize,
    },
    /// The commit on revoke.
    Revoke,
    /// The final commit on close.
    Close,
}

/// How a group gave partitions up (Kafka).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Revoke {
    /// Revoked in a rebalance, their offsets committed.
    Committed,
    /// The assignment was lost (session timeout): nothing committed.
    Lost,
    /// Released as the consumer leaves its group on close.
    OnClose,
}

/// Something that happened at a source: to a delivery it holds, to a call
/// it made to the broker, or to its place in a group.
#[derive(Clone, Copy)]
#[non_exhaustive]
pub enum Happened<'a> {
    /// `count` deliveries were taken from the broker and handed to the
    /// runtime; `redelivered`: the broker says each was handed out before.
    Received {
        /// How many.
        count: u64,
        /// Whether the broker flagged them redelivered.
        redelivered: bool,
    },
    /// A read call went to the broker (Kinesis `GetRecords`).
    Polled,
    /// A read call failed. `retry_in`: the source tries again by itself
    /// after that (logged here); `None`: the runtime is told (and logs it).
    ReceiveFailed {
        /// What was read (a shard, a queue).
        at: &'a str,
        /// The call.
        operation: &'static str,
        /// Why.
        error: ErrorRef<'a>,
        /// The broker throttled the call.
        throttled: bool,
        /// When the source tries again by itself.
        retry_in: Option<Duration>,
    },
    /// The broker confirmed an ack: it forgets the delivery.
    Acked,
    /// An ack failed for good: the broker redelivers the message, and
    /// dedup skips it.
    AckFailed {
        /// Why.
        error: ErrorRef<'a>,
    },
    /// A delivery the source handed out is no longer held: acked, released
    /// or dropped.
    Left,
    /// `count` deliveries were given back to the broker unprocessed.
    Released {
        /// How many.
        count: u64,
        /// Why.
        why: Release,
    },
    /// Giving a delivery back failed: the broker redelivers it when its
    /// lease (visibility) ends.
    ReleaseFailed {
        /// Why it was given back.
        why: Release,
        /// Why that failed.
        error: ErrorRef<'a>,
    },
    /// The leases (SQS visibility) of `count` held deliveries were extended.
    Extended {
        /// How many.
        count: u64,
    },
    /// The broker refused to extend one delivery's lease (settled
    /// meanwhile, or its receipt expired).
    ExtensionRefused {
        /// The broker's code.
        code: &'a str,
        /// The broker's message.
        message: &'a str,
    },
    /// The call extending `count` leases failed: tried again at the next
    /// tick.
    ExtensionsFailed {
        /// How many.
        count: u64,
        /// Why.
        error: ErrorRef<'a>,
    },
    /// A retry went back through the broker's own redelivery (SQS's
    /// visibility): the message comes back after the delay.
    RetriedByBroker,
    /// A retry's delay is past what the broker can hold the message for:
    /// it comes back after `left`.
    RetryCutShort {
        /// The delay asked for.
        delay: Duration,
        /// The longest the broker can hold it.
        left: Duration,
    },
    /// The dead-letter destination confirmed a letter.
    DeadLettered,
    /// The dead-letter destination refused a letter.
    DeadLetterRefused {
        /// The destination.
        destination: &'a str,
        /// Why.
        error: ErrorRef<'a>,
    },
    /// The consuming connection (or channel) to `queue` was lost; the
    /// source opens it again on the next receive.
    Reconnecting {
        /// The queue consumed.
        queue: &'a str,
        /// Why it was lost.
        reason: &'a str,
    },
    /// Connections to brokers were lost (the client reconnects by itself).
    BrokersDisconnected {
        /// The consumer group.
        group: &'a str,
        /// The brokers.
        brokers: &'a [&'a str],
        /// Connections lost since the last reading.
        lost: u64,
    },
    /// The group assigned `partitions` partitions to this member.
    Assigned {
        /// How many.
        partitions: usize,
    },
    /// The group asks for `partitions` partitions back: the source starts
    /// giving them up (waiting for the records it handed out from them).
    Revoking {
        /// How many.
        partitions: usize,
    },
    /// The source gave `partitions` revoked partitions up.
    Revoked {
        /// How many.
        partitions: usize,
        /// How.
        how: Revoke,
    },
    /// A revoke gave partitions up with `held` records still running.
    RevokeTimedOut {
        /// Records still running.
        held: usize,
        /// The revoke timeout.
        timeout: Duration,
    },
    /// An offset commit failed or went unanswered.
    CommitFailed {
        /// Which commit.
        commit: Commit,
        /// Why.
        error: ErrorRef<'a>,
    },
    /// The consumer could not leave its group within `timeout` on close.
    CloseTimedOut {
        /// The close timeout.
        timeout: Duration,
    },
    /// A shard iterator was obtained again: expired, or about to (Kinesis).
    IteratorRenewed,
    /// A shard is read again from its checkpoint after a record was given
    /// back (Kinesis).
    Rewound,
    /// A checkpoint was written; `shard_end`: the shard is read and
    /// settled to its end.
    Checkpointed {
        /// It was the shard's end.
        shard_end: bool,
    },
    /// This instance took a shard's lease (`steal`: from an instance over
    /// its share); reading starts at `start`.
    LeaseTaken {
        /// The shard.
        shard: &'a str,
        /// Taken from another instance.
        steal: bool,
        /// Where reading starts.
        start: &'a (dyn Debug + Sync),
    },
    /// This instance lost a shard's lease to another or to expiry.
    LeaseLost {
        /// The shard.
        shard: &'a str,
    },
    /// The source holds `in_flight` deliveries, `waiting` of them not
    /// handed out yet.
    Holding {
        /// Received and not settled.
        in_flight: u64,
        /// Of those, not handed to the runtime yet.
        waiting: u64,
    },
    /// The source holds `n` leases.
    LeasesHeld(u64),
    /// The last read was this far behind the newest record.
    BehindLatest(Duration),
}

/// The one handle a source emits through; cheap to clone (an `Arc`).
#[derive(Clone, Debug)]
pub struct SourceObserver {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    broker: Broker,
    counters: SourceCounters,
}

impl SourceObserver {
    /// An observer of a `broker` source, its counters at zero.
    pub fn new(broker: Broker) -> Self {
        Self {
            inner: Arc::new(Inner {
                broker,
                counters: SourceCounters::default(),
            }),
        }
    }

    /// Records `what` with every listener, in the module's order.
    pub fn emit(&self, what: Happened<'_>) {
        counters::on(&self.inner.counters, &what);
        logs::on(self.inner.broker, &self.inner.counters, &what);
    }

    /// The counters as they are now.
    pub fn counters(&self) -> &SourceCounters {
        &self.inner.counters
    }

    /// A reading of every counter and level.
    pub fn snapshot(&self) -> SourceSnapshot {
        self.inner.counters.snapshot()
    }
}

#[cfg(test)]
mod tests;
