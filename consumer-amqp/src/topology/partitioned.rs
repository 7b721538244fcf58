//! [`PartitionedTopology`]: one logical queue as N partition queues, so that
//! several instances share it and each key stays in order.
//!
//! For a logical queue `orders` with 4 partitions:
//!
//! | object | name | settings |
//! |---|---|---|
//! | partition queues | `orders.p0` .. `orders.p3` | as a [`Topology`] work queue, with `x-single-active-consumer` |
//! | delay queues | `orders.retry.16ms`, ... up to the handlers' longest delay | shared by the partitions, each behind a `fanout` exchange of the same name: a retry copy is published there with its partition queue as routing key, and comes back to that partition when it expires |
//! | dead-letter exchange and queue | `orders.dlx`, `orders.dlq` | shared, bound once per partition queue |
//! | members exchange | `orders.members` | `fanout`, not durable: the instances' heartbeats |
//! | declare lock | `orders.declaring` | exclusive, auto-deleted: held by the instance that declares |
//!
//! **What it costs the broker.** With quorum queues each queue is a Raft
//! group with its own log and processes: a partitioned topology of N
//! partitions holds N + B + 1 of them (B delay buckets, 5 for handlers whose
//! longest delay is 200 ms), whatever N is for the delay queues.
//! `benches/amqp_footprint.rs` prints the queues and the broker memory of
//! each layout. The delay queues of the layout before they were shared
//! (`orders.p3.retry.16ms`, ...) are left where an upgrade finds them,
//! draining back into their partitions, and reported at start (`upgrade.rs`);
//! [`delete`](PartitionedTopology::delete) takes a topology down.
//!
//! **Declaring gently.** The instances of a topology that start together do
//! not all declare at once: the first takes the declare lock (an exclusive
//! queue, which RabbitMQ deletes with its connection should that instance
//! die), declares, and lets it go; the others wait for it (at most the
//! declare timeout), then check the same declarations, which find
//! everything in place.
//!
//! **Which partition.** The publishers ([`AmqpPublisherBuilder::with_partitions`],
//! and so the outbox relay that publishes through it) send a message for
//! `orders` to `orders.p{partition_for(key, 4)}`, Kafka's partitioner
//! ([`partition_for`](consumer_backend::partition_for)); no plugin is involved, so no broker
//! restart or binding change can move a key.
//!
//! **The count is checked, never assumed.** The partition queues on the
//! broker are the record of N: before declaring anything, a source or a
//! publisher looks for `orders.p{N}` (there must be none) and
//! `orders.p{N-1}` (there must be one, unless `orders.p0` is missing too and
//! this is the first start), and looks again once it has declared (partitions
//! are declared highest first, so a check during another instance's first
//! declare sees a consistent picture). A mismatch is
//! [`Error::PartitionCount`]: the process refuses to start and says what it
//! found.
//!
//! **Quorum queues by default.** The partition queues (and their delay
//! queues and the dead-letter queue) are quorum queues unless
//! [`with_queue_type`](PartitionedTopology::with_queue_type) says
//! `Classic`: the whole scheme rests on single active consumer, which quorum
//! queues keep in their replicated state machine, while RabbitMQ 3.10 and
//! 3.11 classic queues crash under consumers that come and go
//! (rabbitmq-server#5460: `{badmatch,false}` in
//! `rabbit_queue_consumers:deliver_to_consumer`, and the queue does not
//! restart). Queues that exist with the other type are not converted: the
//! declare fails with [`Error::QueueTypeMismatch`], which says how to
//! migrate.
//!
//! [`AmqpPublisherBuilder::with_partitions`]: crate::AmqpPublisherBuilder::with_partitions

use std::time::Duration;

use lapin::options::{QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;

use super::{DEFAULT_DECLARE_TIMEOUT, DelayQueues, QueueType, Topology};
use crate::error::{Error, Result};
use crate::names::{short, validate_name};
use crate::publisher::AmqpPublisher;

/// The most partitions a logical queue may have.
pub const MAX_PARTITIONS: u32 = 1024;

/// One logical queue as N partition queues; see the module docs.
#[derive(Debug, Clone)]
pub struct PartitionedTopology {
    name: String,
    partitions: u32,
    queue_type: QueueType,
    delays: DelayQueues,
    delivery_limit: Option<u32>,
    expires: Option<Duration>,
    declare_timeout: Duration,
}

impl PartitionedTopology {
    /// The logical queue `name` as `partitions` partition queues
    /// (1 to 1 024).
    pub fn new(name: impl Into<String>, partitions: u32) -> Result<Self> {
        let name = name.into();
        validate_name("queue", &name)?;
        if partitions == 0 || partitions > MAX_PARTITIONS {
            return Err(Error::InvalidName {
                what: "partition count of queue",
                name,
                reason: "must be between 1 and 1024",
            });
        }
        let t = Self {
            delays: DelayQueues::new(format!("{name}.retry"), true),
            name,
            partitions,
            queue_type: QueueType::Quorum,
            delivery_limit: None,
            expires: None,
            declare_timeout: DEFAULT_DECLARE_TIMEOUT,
        };
        for p in 0..partitions {
            t.partition(p).validate()?;
        }
        Ok(t)
    }

    /// Quorum (default) or classic queues, as [`Topology::with_queue_type`];
    /// see the module docs for why classic ones are a risk.
    pub fn with_queue_type(mut self, queue_type: QueueType) -> Self {
        self.queue_type = queue_type;
        self
    }

    /// As [`Topology::with_max_retry_delay`], for the shared delay queues.
    pub fn with_max_retry_delay(mut self, delay: Duration) -> Self {
        self.delays = self.delays.with_cap(delay);
        self
    }

    /// As [`Topology::with_declare_timeout`], for every declare.
    pub fn with_declare_timeout(mut self, timeout: Duration) -> Self {
        self.declare_timeout = timeout;
        self
    }

    /// The shared delay queues with their buckets, shortest first (as many
    /// as the longest delay asked for needs).
    pub fn delay_queues(&self) -> Vec<(Duration, String)> {
        self.delays.buckets()
    }

    /// The shared delay queues.
    pub(super) fn delays(&self) -> &DelayQueues {
        &self.delays
    }

    /// The exclusive queue whose holder declares the topology.
    pub fn declare_lock(&self) -> String {
        format!("{}.declaring", self.name)
    }

    /// As [`Topology::with_delivery_limit`], for every partition.
    pub fn with_delivery_limit(mut self, limit: u32) -> Self {
        self.delivery_limit = Some(limit);
        self
    }

    /// As [`Topology::with_expires`], for every queue (tests, demos).
    pub fn with_expires(mut self, after: Duration) -> Self {
        self.expires = Some(after);
        self
    }

    /// The logical queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many partitions.
    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// The queue of partition `p`: `<name>.p<p>`.
    pub fn partition_queue(&self, p: u32) -> String {
        format!("{}.p{p}", self.name)
    }

    /// The partition queue a message with `key` goes to.
    pub fn queue_for_key(&self, key: &[u8]) -> String {
        self.partition_queue(consumer_backend::partition_for(key, self.partitions))
    }

    /// The fanout exchange the instances' heartbeats go through.
    pub fn members_exchange(&self) -> String {
        format!("{}.members", self.name)
    }

    /// The shared dead-letter queue.
    pub fn dead_letter_queue(&self) -> String {
        format!("{}.dlq", self.name)
    }

    /// The topology of partition `p`: its queue with a single active
    /// consumer, the shared delay queues, the shared dead-letter exchange
    /// and queue.
    pub fn partition(&self, p: u32) -> Topology {
        let mut t = Topology {
            dead_letter_exchange: format!("{}.dlx", self.name),
            dead_letter_queue: self.dead_letter_queue(),
            delays: self.delays.clone(),
            declare_timeout: self.declare_timeout,
            ..Topology::fresh(self.partition_queue(p))
        }
        .with_queue_type(self.queue_type)
        .with_single_active_consumer();
        if let Some(l) = self.delivery_limit {
            t = t.with_delivery_limit(l);
        }
        if let Some(e) = self.expires {
            t = t.with_expires(e);
        }
        t
    }

    /// Declares every partition's topology and the shared delay queues on
    /// `channel`, as [`Topology::declare`] does; idempotent. The sources
    /// declare through their own start, which first checks the partition
    /// count and takes the declare lock; this is for tools and tests that
    /// need the queues before any source runs (a producer that publishes
    /// to the partition queues).
    pub async fn declare(&self, channel: &lapin::Channel) -> Result<()> {
        for p in (0..self.partitions).rev() {
            self.partition(p)
                .declare(channel)
                .await
                .map_err(|e| self.in_partitioned_words(e))?;
        }
        self.partition(0)
            .declare_delays(channel, 0)
            .await
            .map_err(|e| self.in_partitioned_words(e))?;
        Ok(())
    }

    /// A channel of `publisher`'s connection (which it opens when it has
    /// none), within the declare deadline.
    async fn side_channel(&self, publisher: &AmqpPublisher) -> Result<lapin::Channel> {
        tokio::time::timeout(self.declare_timeout, publisher.side_channel())
            .await
            .map_err(|_| Error::NoAnswer {
                what: "a channel on the connection for the declares of",
                name: self.name.clone(),
                after: self.declare_timeout,
            })?
    }

    /// How long each step of a source's start may take.
    pub(crate) fn declare_timeout(&self) -> Duration {
        self.declare_timeout
    }

    /// Makes the shared delay queues hold retries of up to `longest`; as
    /// [`Topology`]'s.
    pub(crate) fn size_delays_for(&self, longest: Duration) -> std::result::Result<(), String> {
        self.partition(0).size_delays_for(longest)
    }

    /// Checks the partition count against the broker's queues (see the
    /// module docs), then, holding the declare lock, declares every
    /// partition's topology and the shared delay queues on channels of
    /// `publisher`'s connection. Returns the partitions whose declare met a
    /// queue RabbitMQ reports crashed (they are left as they are: the
    /// sources report them and try again) and how many delay buckets are
    /// declared; any other refusal is an error.
    pub(crate) async fn check_and_declare(
        &self,
        publisher: &AmqpPublisher,
    ) -> Result<(Vec<u32>, u32)> {
        self.check_partition_count(publisher).await?;
        let lock = self.take_declare_lock(publisher).await?;
        let declared = self.declare_all(publisher).await;
        if let Some(channel) = lock {
            let _ = channel
                .queue_delete(short(&self.declare_lock())?, QueueDeleteOptions::default())
                .await;
            let _ = channel.close(200, "declared".into()).await;
        }
        let declared = declared?;
        // Two first starts with different counts at the same moment could
        // both see nothing: checking again after declaring catches it (the
        // smaller count then finds the larger one's queues).
        self.check_partition_count(publisher).await?;
        self.report_old_delay_queues(publisher).await;
        Ok(declared)
    }

    /// Declares the shared delay queues from bucket `from` on; how many are
    /// declared.
    pub(crate) async fn declare_delays(&self, publisher: &AmqpPublisher, from: u32) -> Result<u32> {
        let channel = self.side_channel(publisher).await?;
        let n = self.partition(0).declare_delays(&channel, from).await;
        let _ = channel.close(200, "delay queues declared".into()).await;
        n
    }

    /// Takes the declare lock (an exclusive queue on a channel of
    /// `publisher`'s connection, which RabbitMQ deletes with that connection),
    /// waiting while another instance holds it; after the declare timeout
    /// it goes on without it (`None`), as it does where RabbitMQ refuses the
    /// lock for another reason.
    async fn take_declare_lock(&self, publisher: &AmqpPublisher) -> Result<Option<lapin::Channel>> {
        let name = self.declare_lock();
        let deadline = tokio::time::Instant::now() + self.declare_timeout;
        loop {
            let channel = self.side_channel(publisher).await?;
            let options = QueueDeclareOptions {
                exclusive: true,
                auto_delete: true,
                ..QueueDeclareOptions::default()
            };
            let taken = tokio::time::timeout_at(
                deadline,
                channel.queue_declare(short(&name)?, options, FieldTable::default()),
            )
            .await;
            match taken {
                Ok(Ok(_)) => return Ok(Some(channel)),
                Ok(Err(e)) if crate::error::is_locked(&e) => {}
                Ok(Err(e)) => {
                    tracing::warn!(target: "consumer::amqp", queue = %self.name, error = %e, "could not take the declare lock; declaring without it");
                    return Ok(None);
                }
                Err(_) => {
                    return Err(Error::NoAnswer {
                        what: "the declare of queue",
                        name,
                        after: self.declare_timeout,
                    });
                }
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(target: "consumer::amqp", queue = %self.name, "another instance held the declare lock for the whole declare timeout; declaring anyway");
                return Ok(None);
            }
            // Polled: RabbitMQ sends no event when an exclusive queue goes.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    async fn declare_all(&self, publisher: &AmqpPublisher) -> Result<(Vec<u32>, u32)> {
        let mut channel = self.side_channel(publisher).await?;
        let mut crashed = Vec::new();
        // Highest first: an instance checking while another declares sees
        // the last partition (all there is to see) or nothing at all.
        for p in (0..self.partitions).rev() {
            match self.partition(p).declare(&channel).await {
                Ok(()) => {}
                // The refusal closed the channel.
                Err(Error::QueueCrashed { .. }) => {
                    crashed.push(p);
                    channel = self.side_channel(publisher).await?;
                }
                Err(e) => return Err(self.in_partitioned_words(e)),
            }
        }
        let delays = self
            .partition(0)
            .declare_delays(&channel, 0)
            .await
            .map_err(|e| self.in_partitioned_words(e))?;
        let _ = channel.close(200, "partitions declared".into()).await;
        Ok((crashed, delays))
    }

    /// `e`, with a migration's instructions naming every queue of this
    /// topology rather than one partition's.
    pub(crate) fn in_partitioned_words(&self, e: Error) -> Error {
        match e {
            Error::QueueTypeMismatch {
                queue,
                declared,
                found,
                ..
            } => Error::QueueTypeMismatch {
                queue,
                declared,
                found,
                queues: format!(
                    "the partition queues `{name}.p0` .. `{name}.p{last}`, the delay queues \
                     `{name}.retry.*` and the shared dead-letter queue `{dlq}`",
                    name = self.name,
                    last = self.partitions - 1,
                    dlq = self.dead_letter_queue(),
                ),
            },
            e => e,
        }
    }

    /// [`Error::PartitionCount`] when the broker holds another number of
    /// partition queues than configured; `Ok` when it holds exactly as many,
    /// or none (a first start).
    pub(crate) async fn check_partition_count(&self, publisher: &AmqpPublisher) -> Result<()> {
        let n = self.partitions;
        let mismatch = |found| Error::PartitionCount {
            queue: self.name.clone(),
            configured: n,
            found,
        };
        if self.exists(publisher, n).await? {
            let mut found = n + 1;
            while found < n + MAX_PARTITIONS && self.exists(publisher, found).await? {
                found += 1;
            }
            return Err(mismatch(found));
        }
        if self.exists(publisher, n - 1).await? {
            return Ok(());
        }
        if !self.exists(publisher, 0).await? {
            return Ok(());
        }
        let mut found = 1;
        while found < n - 1 && self.exists(publisher, found).await? {
            found += 1;
        }
        Err(mismatch(found))
    }

    /// Whether partition queue `p` exists.
    async fn exists(&self, publisher: &AmqpPublisher, p: u32) -> Result<bool> {
        let found = self.find(publisher, &self.partition_queue(p)).await?;
        Ok(!matches!(found, Found::Missing))
    }

    /// What the broker holds of queue `name`: a passive declare on a
    /// channel of its own (a missing queue closes the channel).
    pub(crate) async fn find(&self, publisher: &AmqpPublisher, name: &str) -> Result<Found> {
        let channel = self.side_channel(publisher).await?;
        let found = tokio::time::timeout(
            self.declare_timeout,
            channel.queue_declare(
                short(name)?,
                QueueDeclareOptions::durable().passive(),
                FieldTable::default(),
            ),
        )
        .await
        .map_err(|_| Error::NoAnswer {
            what: "the passive declare of queue",
            name: name.to_owned(),
            after: self.declare_timeout,
        })?;
        match found {
            Ok(queue) => {
                let _ = channel.close(200, "probe done".into()).await;
                Ok(Found::Holding(queue.message_count()))
            }
            Err(e) if crate::error::is_not_found(&e) => Ok(Found::Missing),
            // It exists; the sources report it when they consume it.
            Err(e) if crate::error::crashed_reply(&e).is_some() => Ok(Found::Crashed),
            Err(source) => Err(Error::Amqp {
                context: "passive queue declare",
                source,
            }),
        }
    }
}

/// What a passive declare found of a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// No such queue.
    Missing,
    /// The queue, with this many messages ready.
    Holding(u32),
    /// The queue, which RabbitMQ reports crashed (its count unknown).
    Crashed,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_share_dead_letters_and_delay_queues() {
        let t = PartitionedTopology::new("orders", 4).expect("valid");
        let p2 = t.partition(2);
        assert_eq!(p2.queue(), "orders.p2");
        assert_eq!(
            p2.queue_type(),
            QueueType::Quorum,
            "quorum unless told otherwise"
        );
        assert!(p2.single_active_consumer());
        assert_eq!(p2.dead_letter_exchange(), "orders.dlx");
        assert_eq!(p2.dead_letter_queue(), "orders.dlq");
        t.size_delays_for(Duration::from_millis(200))
            .expect("no cap");
        assert_eq!(
            p2.delay_queues(),
            t.partition(5).delay_queues(),
            "one set of delay queues for every partition"
        );
        assert_eq!(p2.delay_queues().len(), 5);
        assert_eq!(
            p2.retry_route(Duration::from_millis(100)),
            ("orders.retry.128ms".to_owned(), "orders.p2".to_owned()),
            "a copy waits in the shared queue and comes back to its partition"
        );
        assert_eq!(t.members_exchange(), "orders.members");
    }

    #[test]
    fn a_key_always_goes_to_the_same_partition_queue() {
        let t = PartitionedTopology::new("orders", 8).expect("valid");
        let q = t.queue_for_key(b"order-17");
        assert_eq!(q, t.queue_for_key(b"order-17"));
        let p = consumer_backend::partition_for(b"order-17", 8);
        assert_eq!(q, format!("orders.p{p}"));
    }

    /// The examples docs/guide/rabbitmq_partitions.md gives outside producers.
    #[test]
    fn the_documented_examples_hold() {
        let t = PartitionedTopology::new("orders", 8).expect("valid");
        for (key, queue) in [
            ("order-0", "orders.p4"),
            ("order-1", "orders.p6"),
            ("order-17", "orders.p1"),
            ("customer-42", "orders.p1"),
        ] {
            assert_eq!(t.queue_for_key(key.as_bytes()), queue, "{key}");
        }
    }

    #[test]
    fn counts_and_names_are_checked() {
        assert!(PartitionedTopology::new("orders", 0).is_err());
        assert!(PartitionedTopology::new("orders", MAX_PARTITIONS + 1).is_err());
        assert!(PartitionedTopology::new("bad name", 2).is_err());
        assert!(
            PartitionedTopology::new("x".repeat(240), 2).is_err(),
            "derived names too long"
        );
    }
}
