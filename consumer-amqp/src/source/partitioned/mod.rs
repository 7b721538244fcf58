//! [`PartitionedSource`]: one instance among several consuming a
//! [`PartitionedTopology`], each partition by one instance at a time.

mod builder;
mod lease;
mod membership;
mod session;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use consumer_backend::observe::Happened;
use consumer_backend::{Envelope, Source};
use tokio::sync::{Notify, watch};

pub(crate) use lease::InFlightGuard;
use lease::Item;
use membership::Membership;
use session::{Partitions, Session};

pub use builder::PartitionedSourceBuilder;

use super::acker::AmqpAcker;
use super::options::SourceOptions;
use super::stats::AmqpStats;
use crate::error::{Error, Result};
use crate::headers;
use crate::publisher::AmqpPublisher;
use crate::topology::{PartitionedTopology, Topology};

/// The longest [`close`](Source::close) waits for deliveries in flight
/// before closing the connection anyway (RabbitMQ then requeues them).
pub const CLOSE_DRAIN: Duration = Duration::from_secs(10);

/// Consumes the partition queues of a [`PartitionedTopology`] that this
/// instance is assigned, so that several instances share a logical queue
/// and every key keeps its order.
///
/// * **One consumer per partition at a time**: each partition queue has a
///   single active consumer; RabbitMQ delivers a partition's messages to
///   one subscriber and, when that one's channel closes (a crash included),
///   to the next.
/// * **Balance**: the instances hear each other's heartbeats and deal the
///   partitions out evenly (see [`with_heartbeat`](PartitionedSourceBuilder::with_heartbeat));
///   an instance subscribes only to its share. When one joins, the others
///   hand over what is now its share; when one leaves or dies, the others
///   take its share after three missed heartbeats (3 s by default).
/// * **Hand-over keeps order**: a partition given up forwards nothing more,
///   waits until its deliveries in flight are settled (still the active
///   consumer, so nobody else is given the partition meanwhile), then closes
///   its channel; RabbitMQ requeues what it had sent ahead, in order, and
///   activates the next subscriber in the same step. The subscription is
///   never cancelled first: a cancelled single active consumer hands the
///   queue over at once while it still holds unacked deliveries, which come
///   back to the next subscriber after later ones. A crash loses the channel
///   instead: RabbitMQ requeues the unacked deliveries, and the dedup claim
///   (a PostgreSQL row lock while the dead process's transaction is open,
///   then the committed row) keeps the next holder from running one twice.
/// * **Deliveries given back** (a shutdown releasing what it did not run,
///   the last settle fallback) are not nacked, which would put them behind
///   what was prefetched after them: the partition's channel is closed and
///   opened again, so RabbitMQ requeues them in order.
/// * **Deliveries without a key** (no `ce-partitionkey` header, published to
///   the partition queue through the default exchange) take their partition
///   queue's name as key: they run one at a time, in queue order, as the
///   records of a Kafka partition would. Outside producers should send the
///   header, so that different keys run in parallel (docs/guide/rabbitmq_partitions.md).
/// * **A crashed partition queue** (RabbitMQ: `NOT_FOUND … has crashed and
///   failed to restart`) is reported, in one ERROR line and the
///   `consumer.queue.crashed` gauge, and tried again with backoff (1 s up to
///   30 s) while the other partitions go on.
/// * **Settling** is [`AmqpAcker`]'s, per partition: retry copies go to the
///   delay queues the partitions share, through their exchange with the
///   partition queue as routing key, and come back to their partition;
///   dead letters go to the shared dead-letter queue.
/// * **The partition count** is checked against the broker before anything
///   is declared ([`Error::PartitionCount`] on a mismatch; see
///   [`PartitionedTopology`]).
pub struct PartitionedSource {
    options: SourceOptions,
    topology: PartitionedTopology,
    partitions: Vec<Arc<Topology>>,
    instance: String,
    heartbeat: Duration,
    publisher: AmqpPublisher,
    metrics: AmqpStats,
    /// The partitions this instance is assigned, as the membership sees it.
    assigned: watch::Sender<Option<Vec<u32>>>,
    session: Option<Session>,
    /// Whether a delivery without a key was logged already.
    told_unkeyed: bool,
}

impl std::fmt::Debug for PartitionedSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionedSource")
            .field("queue", &self.topology.name())
            .field("partitions", &self.topology.partitions())
            .field("instance", &self.instance)
            .field("consuming", &self.session.as_ref().map(Session::leased))
            .finish_non_exhaustive()
    }
}

impl PartitionedSource {
    /// A builder for one instance consuming `topology` on the broker at
    /// `endpoint` (a URI, or an [`AmqpEndpoint`](crate::AmqpEndpoint) with
    /// credentials and TLS); nothing is contacted until
    /// [`connect`](PartitionedSourceBuilder::connect).
    pub fn builder(
        endpoint: impl Into<crate::AmqpEndpoint>,
        topology: PartitionedTopology,
    ) -> PartitionedSourceBuilder {
        PartitionedSourceBuilder {
            options: SourceOptions::new(endpoint.into(), 64),
            topology,
            instance: format!("{}-{}", std::process::id(), uuid::Uuid::new_v4().simple()),
            heartbeat: Duration::from_secs(1),
        }
    }

    /// The source, unconnected.
    fn from_builder(builder: PartitionedSourceBuilder) -> Self {
        let PartitionedSourceBuilder {
            options,
            topology,
            instance,
            heartbeat,
        } = builder;
        let publisher = options.settle_publisher(topology.name());
        let partitions: Vec<Arc<Topology>> = (0..topology.partitions())
            .map(|p| Arc::new(topology.partition(p)))
            .collect();
        let first = partitions
            .first()
            .map_or_else(|| Arc::new(topology.partition(0)), Arc::clone);
        Self {
            metrics: AmqpStats::new(first, publisher.clone()),
            instance,
            options,
            topology,
            partitions,
            heartbeat,
            publisher,
            assigned: watch::Sender::new(None),
            session: None,
            told_unkeyed: false,
        }
    }

    /// The partitions this instance is assigned: `None` until it has heard
    /// the other instances (one heartbeat interval after joining, and again
    /// after each reconnect), then each change of the assignment. The
    /// source subscribes to these partitions and hands over the others.
    pub fn assignment(&self) -> watch::Receiver<Option<Vec<u32>>> {
        self.assigned.subscribe()
    }

    /// The topology this source consumes.
    pub fn topology(&self) -> &PartitionedTopology {
        &self.topology
    }

    /// This instance's id.
    pub fn instance_id(&self) -> &str {
        &self.instance
    }

    /// Counters of this source (deliveries, redeliveries, reconnects).
    pub fn stats(&self) -> AmqpStats {
        self.metrics.clone()
    }

    async fn open(&self) -> Result<Session> {
        let (crashed, delay_tiers) = self.topology.check_and_declare(&self.publisher).await?;
        let timeout = self.topology.declare_timeout();
        let name = format!("consumer {} {}", self.topology.name(), self.instance);
        let connection = tokio::time::timeout(timeout, self.options.endpoint.connect(name))
            .await
            .map_err(|_| Error::NoAnswer {
                what: "the connection for the heartbeats of",
                name: self.topology.name().to_owned(),
                after: timeout,
            })??;
        let control = connection
            .create_channel()
            .await
            .map_err(Error::amqp("channel open"))?;
        let (membership, beats) = Membership::join(
            control,
            self.topology.members_exchange(),
            self.instance.clone(),
            self.topology.partitions(),
            self.heartbeat,
        )
        .await?;
        // A new session holds no partition yet: its first assignment must
        // read as a change even when it equals the last one.
        self.assigned.send_replace(None);
        let desired = self.assigned.subscribe();
        let leave = Arc::new(Notify::new());
        let membership =
            tokio::spawn(membership.run(beats, self.assigned.clone(), Arc::clone(&leave)));
        let capacity = usize::from(self.options.prefetch).max(16);
        tracing::info!(target: "consumer::amqp", queue = %self.topology.name(), partitions = self.topology.partitions(), instance = %self.instance, "joined");
        Ok(Session::new(
            connection,
            desired,
            (leave, membership),
            capacity,
            crashed,
            delay_tiers,
        ))
    }

    /// Declares the shared delay buckets sized since the session was opened
    /// (a handler's retry policy, told before the first delivery).
    async fn declare_new_delays(&mut self) -> Result<()> {
        let Some(session) = self.session.as_mut() else {
            return Ok(());
        };
        if session.delay_tiers < self.topology.delay_queues().len() as u32 {
            session.delay_tiers = self
                .topology
                .declare_delays(&self.publisher, session.delay_tiers)
                .await?;
        }
        Ok(())
    }

    fn partitions(&self) -> Partitions<'_> {
        Partitions {
            topology: &self.topology,
            partitions: &self.partitions,
            prefetch: self.options.prefetch,
            metrics: &self.metrics.inner,
        }
    }

    /// Subscribes to the partitions newly assigned (and to crashed ones
    /// whose retry is due) and hands over those no longer assigned.
    async fn reconcile(&mut self) -> Result<()> {
        let with = Partitions {
            topology: &self.topology,
            partitions: &self.partitions,
            prefetch: self.options.prefetch,
            metrics: &self.metrics.inner,
        };
        match self.session.as_mut() {
            Some(s) => s.reconcile(&with).await,
            None => Ok(()),
        }
    }

    async fn drop_session(&mut self, reason: &str) {
        if let Some(mut s) = self.session.take() {
            self.metrics.inner.observer.emit(Happened::Reconnecting {
                queue: self.topology.name(),
                reason,
            });
            s.abort_all();
            crate::connection::let_go(&s.connection, "reconnecting").await;
        }
    }

    /// Turns partition `p`'s delivery into the envelope and the acker the
    /// runtime gets, counting it; `None` for a partition this instance no
    /// longer knows.
    fn take(
        &mut self,
        p: u32,
        delivery: lapin::message::Delivery,
        guard: InFlightGuard,
    ) -> Option<(Arc<Envelope>, AmqpAcker)> {
        let topology = self.partitions.get(p as usize).map(Arc::clone)?;
        self.metrics.inner.observer.emit(Happened::Received {
            count: 1,
            redelivered: delivery.redelivered,
        });
        let payload = Bytes::copy_from_slice(&delivery.data);
        let envelope = headers::to_envelope_within(
            self.options.max_body,
            topology.queue(),
            &delivery,
            payload,
        );
        let envelope = Arc::new(self.keyed(envelope, topology.queue()));
        let acker = AmqpAcker::new(
            delivery.acker,
            self.publisher.clone(),
            topology,
            Arc::clone(&self.metrics.inner),
        )
        .holding(guard);
        Some((envelope, acker))
    }

    /// `envelope`, from partition queue `queue`, with a key: its own, else
    /// the partition queue's (see the type's docs).
    fn keyed(&mut self, mut envelope: Envelope, queue: &str) -> Envelope {
        if envelope.key.is_none() {
            if !self.told_unkeyed {
                self.told_unkeyed = true;
                tracing::warn!(target: "consumer::amqp", queue, "a delivery without a partition key (no ce-partitionkey header): such deliveries run one at a time per partition, in queue order; producers should send the key");
            }
            envelope.key = Some(queue.to_owned());
        }
        envelope
    }
}

impl Source for PartitionedSource {
    type Acker = AmqpAcker;

    fn limit_body(&mut self, max_bytes: usize) {
        self.options.max_body = max_bytes;
    }

    fn system(&self) -> &'static str {
        "rabbitmq"
    }

    fn server(&self) -> Option<(&str, u16)> {
        self.options.endpoint.server()
    }

    fn channels(&self) -> Option<consumer_backend::SourceChannels> {
        Some(crate::asyncapi::partitioned_source_channels(
            &self.topology,
            self.publisher.attribute_prefix(),
        ))
    }

    /// The depths of every partition queue, of each shared delay queue and
    /// of the shared dead-letter queue, read every
    /// [`with_depth_interval`](PartitionedSourceBuilder::with_depth_interval).
    fn gauges(&self) -> Option<Arc<dyn consumer_backend::SourceGauges>> {
        Some(super::gauges::AmqpGauges::start_for(
            Arc::clone(&self.metrics.inner),
            self.partitions.clone(),
            Arc::from(self.topology.name()),
            self.options.depth_interval,
        ))
    }

    fn check_redelivery(&self, longest_delay: Duration) -> std::result::Result<(), String> {
        let first = self.topology.partition(0);
        first.delays().check(longest_delay, self.topology.name())
    }

    /// Sizes the shared delay queues to the longest delay of the handlers
    /// that retry through the broker; they are declared before the next
    /// delivery is taken.
    fn accept_retry_policy(
        &mut self,
        policy: &consumer_backend::RetryPolicy,
    ) -> std::result::Result<(), String> {
        super::redelivers(policy).map_or(Ok(()), |longest| self.topology.size_delays_for(longest))
    }

    async fn recv(
        &mut self,
    ) -> Result<Option<(Arc<Envelope>, AmqpAcker)>, consumer_backend::Error> {
        loop {
            if self.session.is_none() {
                self.session = Some(self.open().await?);
            }
            if let Err(e) = self.declare_new_delays().await {
                self.drop_session(&e.to_string()).await;
                return Err(e.into());
            }
            if self.session.as_ref().is_some_and(|s| s.stale)
                && let Err(e) = self.reconcile().await
            {
                self.drop_session(&e.to_string()).await;
                return Err(e.into());
            }
            let Some(s) = self.session.as_mut() else {
                return Err(Error::ChannelClosed.into());
            };
            let retry = s.next_retry();
            let item = tokio::select! {
                biased;
                changed = s.desired.changed() => {
                    if changed.is_err() {
                        self.drop_session("the heartbeat channel closed").await;
                        return Err(Error::ChannelClosed.into());
                    }
                    s.stale = true;
                    continue;
                }
                why = session::heartbeats_stopped(&mut s.membership) => {
                    // Nobody hears this instance any more: the others take
                    // its partitions after three missed beats, and a
                    // session without partitions would never notice its
                    // connection is gone. Join again.
                    self.drop_session(&why).await;
                    return Err(Error::ChannelClosed.into());
                }
                Some(lease) = s.requeue_rx.recv() => {
                    s.requeue(lease);
                    continue;
                }
                () = sleep_until(retry), if retry.is_some() => {
                    s.stale = true;
                    continue;
                }
                item = s.rx.recv() => item,
            };
            match item {
                Some(Item::Delivery(p, delivery, guard)) => {
                    if let Some(taken) = self.take(p, delivery, guard) {
                        return Ok(Some(taken));
                    }
                }
                Some(Item::Lost(p, lease, reason)) => {
                    if !s.connection.status().connected() {
                        self.drop_session(&format!("partition {p}: {reason}")).await;
                        return Err(Error::ChannelClosed.into());
                    }
                    let queue = self.topology.partition_queue(p);
                    s.lost(p, lease, &reason, &queue);
                }
                None => {
                    self.drop_session("the partitions' forwarders stopped")
                        .await;
                    return Err(Error::ChannelClosed.into());
                }
            }
        }
    }

    /// Says goodbye (the others take this instance's partitions at once,
    /// without waiting for missed heartbeats), hands every partition over
    /// (waiting at most 10 s for deliveries still in flight),
    /// and closes the connection.
    async fn close(mut self) {
        if let Some(mut s) = self.session.take() {
            s.leave.notify_one();
            if let Some(m) = s.membership.take() {
                let _ = tokio::time::timeout(self.heartbeat, m).await;
            }
            // What was forwarded and never received is not in flight: its
            // channel closing requeues it.
            s.rx.close();
            while let Ok(item) = s.rx.try_recv() {
                drop(item);
            }
            if tokio::time::timeout(CLOSE_DRAIN, s.hand_over_all())
                .await
                .is_err()
            {
                tracing::warn!(target: "consumer::amqp", queue = %self.topology.name(), "deliveries still in flight at close; RabbitMQ requeues them");
            }
            s.forget_all(&self.partitions());
            let _ = s.connection.close(200, "consumer stopped".into()).await;
        }
        self.publisher.close().await;
    }
}

/// Sleeps until `at`; never returns without one.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
