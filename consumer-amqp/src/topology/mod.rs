//! The queues and exchanges a consumer needs, declared idempotently at start.
//!
//! For a work queue `orders` the defaults are:
//!
//! | object | name | settings |
//! |---|---|---|
//! | work queue | `orders` | durable; classic or quorum; `x-dead-letter-exchange = orders.dlx`, `x-dead-letter-routing-key = orders` |
//! | dead-letter exchange | `orders.dlx` | durable, `direct` |
//! | dead-letter queue | `orders.dlq` | durable, same type as the work queue, bound to `orders.dlx` with key `orders` |
//! | delay queues | `orders.retry.16ms`, `orders.retry.32ms`, ... up to the longest delay the handlers ask for (none when they retry in place) | durable, same type as the work queue, no consumer; `x-dead-letter-exchange = ""` (the default exchange), `x-dead-letter-routing-key = orders` |
//!
//! **Dead letters.** The framework publishes its own dead letters (original
//! payload and headers plus the `x-dlq-*` context) to the dead-letter
//! exchange with routing key `orders`, with a publisher confirm. The work
//! queue's `x-dead-letter-exchange` catches what RabbitMQ itself
//! dead-letters: a message rejected without requeue by another client, or
//! one over a quorum queue's delivery limit; those carry RabbitMQ's
//! `x-death` header instead of the framework's context.
//!
//! **Delayed retries.** A retry copy is published to the delay queue whose
//! bucket (a power of two milliseconds, from 16 ms) is the smallest that
//! holds its delay, with a per-message `expiration` equal to the delay. When
//! it expires, RabbitMQ dead-letters it through the default exchange back to
//! the work queue. The buckets go up to the longest delay the consumer's
//! handlers can ask for, which the source learns before its first delivery
//! (a handler that retries in place needs none; a topology with
//! [`Topology::with_max_retry_delay`] declares every bucket up to it and
//! refuses a handler that asks for more); see `delays.rs` for how a
//! partitioned topology shares them. RabbitMQ only expires messages at the head of a queue,
//! so a copy can wait behind a longer one: bucketing bounds that, since
//! every copy in a bucket expires within one bucket width, a retry never
//! comes back early and at most twice as late as its delay (delays above
//! the largest bucket share it, and that bound does not hold for them).
//! Dead-lettering out of a classic delay queue is at-most-once in RabbitMQ:
//! if the work queue is unavailable at that instant (a node restart), the
//! copy is dropped; the dedup row is not written, so the producer (or a
//! replay from elsewhere) is what recovers it. With quorum queues the delay
//! queues are quorum queues too, dead-lettering *at least once*: RabbitMQ
//! keeps an expired copy in its delay queue until the work queue has
//! confirmed it, so a node restart or an unavailable work queue delays the
//! retry but cannot drop it (per-message TTL on quorum queues needs
//! RabbitMQ 3.10 or later). A copy that expired while the work queue was
//! down waits for RabbitMQ's dead-letter worker to try again, after its
//! publisher confirm timeout (`dead_letter_worker_publisher_confirm_timeout`,
//! 2 minutes by default): retries come back late after a restart, not lost. Use quorum queues, or in-place retries, for
//! messages that must not take the classic risk.
//!
//! **Quorum queues** (`QueueType::Quorum`), the rules relied on:
//!
//! * they are always durable and replicated; messages are persisted;
//! * `basic.nack` and `basic.reject` with `requeue = true` both return the
//!   message and both increment its `x-delivery-count`; so does a channel or
//!   connection that closes with the message unacked. The framework requeues
//!   only at shutdown, when an acker is dropped unsettled, and (through the
//!   channel closing) in a crash, so the count says how often a message was
//!   handed back, not how often the handler failed: the attempt count the
//!   retry policy reads travels in `x-consumer-attempt` instead;
//! * with a delivery limit ([`Topology::with_delivery_limit`], the
//!   `x-delivery-limit` argument), a message returned more often than that is
//!   dead-lettered by RabbitMQ to the dead-letter exchange (or dropped without
//!   one). The framework sets no limit unless told to: RabbitMQ 3.x has none by
//!   default, and RabbitMQ 4.0 and later default to 20. A limit guards against a
//!   message that crashes the consumer process every time; set it well above
//!   the number of restarts a message may live through;
//! * the work and delay queues dead-letter at least once
//!   (`x-dead-letter-strategy = at-least-once`, which RabbitMQ only honours
//!   with `x-overflow = reject-publish`: a queue at a length limit refuses
//!   publishes, which the publisher's confirm reports, instead of dropping
//!   its oldest message); the dead-letter queue has no dead-letter target.
//!
//! **Declaring** is idempotent and has a deadline
//! ([`Topology::with_declare_timeout`], 30 s by default): a declare RabbitMQ
//! does not answer in time ([`Error::NoAnswer`]) names the queue and
//! fails the start, instead of hanging it; so does a connection that is not
//! opened in time.
//!
//! Names are validated before they reach the broker: 1 to 255 bytes of
//! `[A-Za-z0-9._:-]`, and the `amq.` prefix (reserved by RabbitMQ) is refused.

mod declare;
mod delays;
mod depths;
mod partitioned;
mod teardown;
mod upgrade;

use std::fmt;
use std::time::Duration;

pub(crate) use delays::DelayQueues;
pub use depths::Depths;
pub use partitioned::PartitionedTopology;

use crate::error::{Error, Result};
use crate::names::validate_name;

/// How long a declare may take before the start fails, by default.
pub const DEFAULT_DECLARE_TIMEOUT: Duration = Duration::from_secs(30);

/// Classic or quorum work queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueueType {
    /// A classic queue (single node, durable).
    #[default]
    Classic,
    /// A quorum queue (replicated Raft log); see the module docs for the
    /// rules it brings.
    Quorum,
}

impl QueueType {
    fn as_str(self) -> &'static str {
        match self {
            Self::Classic => "classic",
            Self::Quorum => "quorum",
        }
    }
}

/// The queues and exchanges of one consumer; see the module docs.
#[derive(Debug, Clone)]
pub struct Topology {
    queue: String,
    queue_type: QueueType,
    dead_letter_exchange: String,
    dead_letter_queue: String,
    delays: DelayQueues,
    delivery_limit: Option<u32>,
    expires: Option<Duration>,
    single_active_consumer: bool,
    declare_timeout: Duration,
}

impl Topology {
    /// The topology of work queue `queue`, with derived names:
    /// `<queue>.dlx`, `<queue>.dlq`, `<queue>.retry.<n>ms`.
    pub fn new(queue: impl Into<String>) -> Result<Self> {
        let queue = queue.into();
        validate_name("queue", &queue)?;
        Ok(Self::fresh(queue))
    }

    /// The defaults for `queue`, names not checked yet.
    fn fresh(queue: String) -> Self {
        Self {
            dead_letter_exchange: format!("{queue}.dlx"),
            dead_letter_queue: format!("{queue}.dlq"),
            delays: DelayQueues::new(format!("{queue}.retry"), false),
            queue,
            queue_type: QueueType::Classic,
            delivery_limit: None,
            expires: None,
            single_active_consumer: false,
            declare_timeout: DEFAULT_DECLARE_TIMEOUT,
        }
    }

    /// Classic (default) or quorum work, dead-letter and delay queues.
    pub fn with_queue_type(mut self, queue_type: QueueType) -> Self {
        self.queue_type = queue_type;
        self
    }

    /// Names the dead-letter exchange (default `<queue>.dlx`).
    pub fn with_dead_letter_exchange(mut self, name: impl Into<String>) -> Self {
        self.dead_letter_exchange = name.into();
        self
    }

    /// Names the dead-letter queue (default `<queue>.dlq`).
    pub fn with_dead_letter_queue(mut self, name: impl Into<String>) -> Self {
        self.dead_letter_queue = name.into();
        self
    }

    /// Prefix of the delay queues (default `<queue>.retry`).
    pub fn with_delay_queue_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.delays = self.delays.renamed(prefix.into());
        self
    }

    /// The longest retry delay to expect: every delay queue up to the first
    /// power-of-two bucket at or above it is declared, and a handler whose
    /// retries may wait longer is refused at start. Unset (the default), the
    /// delay queues go up to the longest delay the consumer's handlers can
    /// ask for, and there are none when they all retry in place.
    pub fn with_max_retry_delay(mut self, delay: Duration) -> Self {
        self.delays = self.delays.with_cap(delay);
        self
    }

    /// How long each step of a source's start may take (default
    /// [`DEFAULT_DECLARE_TIMEOUT`]): opening the connection, each declare.
    /// One RabbitMQ does not answer in time fails with [`Error::NoAnswer`],
    /// naming the queue or exchange.
    pub fn with_declare_timeout(mut self, timeout: Duration) -> Self {
        self.declare_timeout = timeout;
        self
    }

    /// Sets a quorum queue's `x-delivery-limit` (ignored for classic queues).
    pub fn with_delivery_limit(mut self, limit: u32) -> Self {
        self.delivery_limit = Some(limit);
        self
    }

    /// Sets `x-expires` on every queue: RabbitMQ deletes a queue, with its
    /// messages, once it has had no consumer and no declare for that long.
    /// For throwaway topologies (tests, demos); must exceed the largest
    /// delay bucket.
    pub fn with_expires(mut self, after: Duration) -> Self {
        self.expires = Some(after);
        self
    }

    /// Declares the work queue with `x-single-active-consumer`: of all the
    /// consumers of the queue RabbitMQ delivers to one at a time, and hands
    /// the queue to the next (in subscription order) when that one cancels
    /// or its channel closes. A queue declared earlier without it conflicts
    /// (RabbitMQ compares the argument): [`Error::Topology`].
    pub fn with_single_active_consumer(mut self) -> Self {
        self.single_active_consumer = true;
        self
    }

    /// Whether the work queue has a single active consumer.
    pub fn single_active_consumer(&self) -> bool {
        self.single_active_consumer
    }

    /// The work queue.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The queue type.
    pub fn queue_type(&self) -> QueueType {
        self.queue_type
    }

    /// The dead-letter exchange.
    pub fn dead_letter_exchange(&self) -> &str {
        &self.dead_letter_exchange
    }

    /// The dead-letter queue.
    pub fn dead_letter_queue(&self) -> &str {
        &self.dead_letter_queue
    }

    /// Every delay queue with its bucket, shortest first: as many as the
    /// longest delay asked for needs (see the module docs).
    pub fn delay_queues(&self) -> Vec<(Duration, String)> {
        self.delays.buckets()
    }

    /// The delay queue a retry of `delay` goes to: the smallest bucket that
    /// holds it, or the largest one.
    pub fn delay_queue_for(&self, delay: Duration) -> String {
        self.delays.queue_for(delay)
    }

    /// Where a retry copy of `delay` is published: `(exchange, routing key)`.
    pub(crate) fn retry_route(&self, delay: Duration) -> (String, String) {
        self.delays.route(delay, &self.queue)
    }

    pub(crate) fn delays(&self) -> &DelayQueues {
        &self.delays
    }

    /// Makes the delay queues hold retries of up to `longest` (before they
    /// are declared); `Err` says in one sentence why they cannot.
    pub(crate) fn size_delays_for(&self, longest: Duration) -> std::result::Result<(), String> {
        if let Some(why) = self.delays.refusal(longest, &self.queue) {
            return Err(why);
        }
        if let Some(expires) = self.expires {
            let bucket = self.delays.bucket_for(longest).max(self.delays.longest());
            if expires <= bucket {
                return Err(format!(
                    "retries may wait up to {longest:?}, which needs a delay queue of {bucket:?}, but the queues of `{}` expire after {expires:?} (with_expires): raise it above {bucket:?}",
                    self.queue
                ));
            }
        }
        self.delays.size_for(longest);
        Ok(())
    }

    /// Checks every name, the derived ones included.
    pub fn validate(&self) -> Result<()> {
        validate_name("queue", &self.queue)?;
        validate_name("exchange", &self.dead_letter_exchange)?;
        validate_name("queue", &self.dead_letter_queue)?;
        // The longest name a bucket can have, whatever the handlers ask.
        validate_name("queue", &format!("{}.{}ms", self.delays.prefix(), u64::MAX))?;
        if let Some(expires) = self.expires {
            let largest = self.delay_queues().last().map_or(Duration::ZERO, |q| q.0);
            if expires <= largest {
                return Err(Error::InvalidName {
                    what: "x-expires of queue",
                    name: self.queue.clone(),
                    reason: "must exceed the largest delay bucket, or delayed retries are deleted with their queue",
                });
            }
        }
        Ok(())
    }
}

impl fmt::Display for Topology {
    /// The topology as a short table, for logs and examples.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "work queue        {} ({}, x-dead-letter-exchange={})",
            self.queue,
            self.queue_type.as_str(),
            self.dead_letter_exchange
        )?;
        writeln!(
            f,
            "dead letters      exchange {} (direct) -> queue {} (key {})",
            self.dead_letter_exchange, self.dead_letter_queue, self.queue
        )?;
        let delays = self.delay_queues();
        match (delays.first(), delays.last()) {
            (Some(first), Some(last)) => write!(
                f,
                "delayed retries   {} queues, {} .. {}, expired -> default exchange -> {}",
                delays.len(),
                first.1,
                last.1,
                self.queue
            ),
            _ => write!(
                f,
                "delayed retries   none yet (sized to the handlers' longest delay at start)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use lapin::types::{AMQPValue, FieldTable};

    use super::*;

    #[test]
    fn names_are_validated() {
        assert!(Topology::new("orders").is_ok());
        assert!(Topology::new("orders.v2:eu-west_1").is_ok());
        for bad in ["", "has space", "slash/y", "ünïcode", "amq.gen-x"] {
            assert!(Topology::new(bad).is_err(), "{bad:?} accepted");
        }
        assert!(Topology::new("x".repeat(256)).is_err());
        assert!(Topology::new("x".repeat(255)).is_ok());
        let derived_too_long = Topology::new("x".repeat(250)).expect("queue name fits");
        assert!(
            derived_too_long.validate().is_err(),
            "derived names are checked"
        );
        let bad_dlx = Topology::new("q")
            .expect("valid")
            .with_dead_letter_exchange("no spaces");
        assert!(bad_dlx.validate().is_err());
    }

    fn arg<'a>(args: &'a FieldTable, key: &str) -> Option<&'a AMQPValue> {
        args.inner().get(key)
    }

    #[test]
    fn quorum_topologies_dead_letter_at_least_once_out_of_quorum_delay_queues() {
        let long = |v: &str| Some(AMQPValue::LongString(v.into()));
        let q = Topology::new("q")
            .expect("valid")
            .with_queue_type(QueueType::Quorum);
        for args in [q.work_queue_args(), q.delay_queue_args()] {
            assert_eq!(arg(&args, "x-queue-type").cloned(), long("quorum"));
            assert_eq!(
                arg(&args, "x-dead-letter-strategy").cloned(),
                long("at-least-once")
            );
            assert_eq!(
                arg(&args, "x-overflow").cloned(),
                long("reject-publish"),
                "RabbitMQ falls back to at-most-once without it"
            );
        }
        let c = Topology::new("q").expect("valid");
        for args in [c.work_queue_args(), c.delay_queue_args()] {
            assert_eq!(arg(&args, "x-queue-type").cloned(), long("classic"));
            assert_eq!(arg(&args, "x-dead-letter-strategy"), None);
            assert_eq!(arg(&args, "x-overflow"), None);
        }
    }

    #[test]
    fn without_a_cap_the_delay_queues_follow_the_handlers() {
        let t = Topology::new("q").expect("valid");
        assert!(t.delay_queues().is_empty(), "none before a handler asks");
        t.size_delays_for(Duration::from_millis(200))
            .expect("no cap to exceed");
        assert_eq!(t.delay_queues().len(), 5, "16 ms to 256 ms");
        let short_lived = Topology::new("q")
            .expect("valid")
            .with_expires(Duration::from_secs(1));
        let why = short_lived
            .size_delays_for(Duration::from_secs(5))
            .expect_err("the queues would expire before the copies");
        assert!(why.contains("with_expires"), "{why}");
    }

    #[test]
    fn delays_go_to_the_smallest_bucket_that_holds_them() {
        let t = Topology::new("q")
            .expect("valid")
            .with_max_retry_delay(Duration::from_millis(100));
        let names: Vec<String> = t.delay_queues().into_iter().map(|d| d.1).collect();
        assert_eq!(
            names,
            [
                "q.retry.16ms",
                "q.retry.32ms",
                "q.retry.64ms",
                "q.retry.128ms"
            ]
        );
        assert_eq!(t.delay_queue_for(Duration::ZERO), "q.retry.16ms");
        assert_eq!(t.delay_queue_for(Duration::from_millis(33)), "q.retry.64ms");
        assert_eq!(t.delay_queue_for(Duration::from_millis(64)), "q.retry.64ms");
        assert_eq!(t.delay_queue_for(Duration::from_secs(9)), "q.retry.128ms");
    }

    #[test]
    fn expiry_shorter_than_a_delay_is_refused() {
        let t = Topology::new("q")
            .expect("valid")
            .with_max_retry_delay(Duration::from_secs(10))
            .with_expires(Duration::from_secs(5));
        assert!(t.validate().is_err());
    }
}
