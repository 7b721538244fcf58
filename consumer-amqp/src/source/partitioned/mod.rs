//! [`PartitionedSource`]: one instance among several consuming a
//! [`PartitionedTopology`], each partition by one instance at a time.

mod lease;
mod membership;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use consumer_core::backend::{Envelope, Source};
use lapin::{Connection, ConnectionProperties};
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;

pub(crate) use lease::InFlightGuard;
use lease::{Item, Lease};
use membership::Membership;

use super::acker::AmqpAcker;
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
///   partitions out evenly (see [`with_heartbeat`](Self::with_heartbeat));
///   an instance subscribes only to its share. When one joins, the others
///   hand over what is now its share; when one leaves or dies, the others
///   take its share after three missed heartbeats (3 s by default).
/// * **Hand-over keeps order**: a partition given up forwards nothing more,
///   waits until its deliveries in flight are settled, then closes its
///   channel; RabbitMQ requeues what it had sent ahead, in order, to the
///   next subscriber. A crash loses the channel instead: RabbitMQ requeues
///   the unacked deliveries, and the dedup claim (a PostgreSQL row lock
///   while the dead process's transaction is open, then the committed row)
///   keeps the next holder from running one twice.
/// * **Settling** is [`AmqpAcker`]'s, per partition: retry copies go to the
///   partition's own delay queues and come back to it; dead letters go to
///   the shared dead-letter queue.
/// * **The partition count** is checked against the broker before anything
///   is declared ([`Error::PartitionCount`] on a mismatch; see
///   [`PartitionedTopology`]).
pub struct PartitionedSource {
    uri: String,
    topology: PartitionedTopology,
    partitions: Vec<Arc<Topology>>,
    instance: String,
    prefetch: u16,
    heartbeat: Duration,
    publisher: AmqpPublisher,
    metrics: AmqpStats,
    depth_interval: Duration,
    /// The partitions this instance is assigned, as the membership sees it.
    assigned: watch::Sender<Option<Vec<u32>>>,
    session: Option<Session>,
}

struct Session {
    connection: Connection,
    tx: mpsc::Sender<Item>,
    rx: mpsc::Receiver<Item>,
    desired: watch::Receiver<Option<Vec<u32>>>,
    leases: BTreeMap<u32, Lease>,
    releasing: Vec<JoinHandle<()>>,
    leave: Arc<Notify>,
    membership: Option<JoinHandle<()>>,
}

impl Session {
    /// Stops every task at once: nothing is forwarded or handed over any
    /// more, and once the connection goes RabbitMQ requeues what it holds.
    fn abort_all(&mut self) {
        if let Some(m) = self.membership.take() {
            m.abort();
        }
        self.leases.clear();
        for h in self.releasing.drain(..) {
            h.abort();
        }
    }
}

impl Drop for Session {
    /// A source dropped without `close` (a crash in a test, a panic):
    /// the tasks stop, so the connection closes and the others take over.
    fn drop(&mut self) {
        self.abort_all();
    }
}

impl std::fmt::Debug for PartitionedSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionedSource")
            .field("queue", &self.topology.name())
            .field("partitions", &self.topology.partitions())
            .field("instance", &self.instance)
            .field(
                "consuming",
                &self
                    .session
                    .as_ref()
                    .map(|s| s.leases.keys().copied().collect::<Vec<_>>()),
            )
            .finish_non_exhaustive()
    }
}

impl PartitionedSource {
    /// A source for `topology` on the broker at `uri`; nothing is contacted
    /// until [`connect`](Self::connect) or the first `recv`.
    pub fn new(uri: impl Into<String>, topology: PartitionedTopology) -> Self {
        let uri = uri.into();
        let publisher = AmqpPublisher::new(uri.clone())
            .with_connection_name(format!("consumer-settle {}", topology.name()));
        let partitions: Vec<Arc<Topology>> = (0..topology.partitions())
            .map(|p| Arc::new(topology.partition(p)))
            .collect();
        let first = partitions
            .first()
            .map_or_else(|| Arc::new(topology.partition(0)), Arc::clone);
        Self {
            metrics: AmqpStats::new(first, publisher.clone()),
            instance: format!("{}-{}", std::process::id(), uuid::Uuid::new_v4().simple()),
            uri,
            topology,
            partitions,
            prefetch: 64,
            heartbeat: Duration::from_secs(1),
            publisher,
            assigned: watch::Sender::new(None),
            depth_interval: Duration::from_secs(15),
            session: None,
        }
    }

    /// The partitions this instance is assigned: `None` until it has heard
    /// the other instances (one heartbeat interval after joining, and again
    /// after each reconnect), then each change of the assignment. The
    /// source subscribes to these partitions and hands over the others.
    pub fn assignment(&self) -> watch::Receiver<Option<Vec<u32>>> {
        self.assigned.subscribe()
    }

    /// Most unacked deliveries RabbitMQ sends per partition (`basic.qos` on
    /// each partition's channel; default 64).
    pub fn with_prefetch(mut self, prefetch: u16) -> Self {
        self.prefetch = prefetch.max(1);
        self
    }

    /// The largest dead letter or retry copy the settle publisher sends
    /// (see [`AmqpPublisher::with_max_message_bytes`]).
    pub fn with_max_message_bytes(mut self, n: usize) -> Self {
        self.publisher = self.publisher.with_max_message_bytes(n);
        let first = self
            .partitions
            .first()
            .map_or_else(|| Arc::new(self.topology.partition(0)), Arc::clone);
        self.metrics = AmqpStats::new(first, self.publisher.clone());
        self
    }

    /// How often the queue depths behind the metrics are read (default
    /// 15 s), as [`AmqpSource::with_depth_interval`](crate::AmqpSource::with_depth_interval).
    pub fn with_depth_interval(mut self, every: Duration) -> Self {
        self.depth_interval = every.max(Duration::from_millis(10));
        self
    }

    /// This instance's id among the others (default: process id and a
    /// random suffix). Ids must differ between running instances.
    pub fn with_instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance = id.into();
        self
    }

    /// How often this instance says it is alive (default 1 s). An instance
    /// silent for three intervals is taken as gone and its partitions are
    /// dealt to the others: the longest a dead instance's partitions wait.
    /// Taken within 50 ms and one hour.
    pub fn with_heartbeat(mut self, every: Duration) -> Self {
        self.heartbeat = membership::bounded_heartbeat(every);
        self
    }

    /// Checks the partition count, declares the topology and joins the
    /// other instances now, so that a mismatch or an unreachable broker
    /// shows at start.
    pub async fn connect(mut self) -> Result<Self> {
        if self.session.is_none() {
            self.session = Some(self.open().await?);
        }
        Ok(self)
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
        self.topology.check_and_declare(&self.publisher).await?;
        let props = ConnectionProperties::default().with_connection_name(
            format!("consumer {} {}", self.topology.name(), self.instance).into(),
        );
        let connection = Connection::connect(&self.uri, props)
            .await
            .map_err(Error::amqp("connection"))?;
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
        let capacity = usize::from(self.prefetch).max(16);
        let (tx, rx) = mpsc::channel(capacity);
        tracing::info!(target: "consumer::amqp", queue = %self.topology.name(), partitions = self.topology.partitions(), instance = %self.instance, "joined");
        Ok(Session {
            connection,
            tx,
            rx,
            desired,
            leases: BTreeMap::new(),
            releasing: Vec::new(),
            leave,
            membership: Some(membership),
        })
    }

    /// Subscribes to the partitions newly assigned and hands over those no
    /// longer assigned.
    async fn reconcile(&mut self) -> Result<()> {
        let Some(s) = self.session.as_mut() else {
            return Ok(());
        };
        let desired: BTreeSet<u32> = s
            .desired
            .borrow_and_update()
            .iter()
            .flatten()
            .copied()
            .collect();
        let gone: Vec<u32> = s
            .leases
            .keys()
            .copied()
            .filter(|p| !desired.contains(p))
            .collect();
        for p in gone {
            if let Some(lease) = s.leases.remove(&p) {
                s.releasing.push(tokio::spawn(lease.release()));
            }
        }
        s.releasing.retain(|h| !h.is_finished());
        for p in desired {
            if s.leases.contains_key(&p) {
                continue;
            }
            let Some(topology) = self.partitions.get(p as usize) else {
                continue;
            };
            let lease = Lease::open(
                &s.connection,
                p,
                topology.queue(),
                self.prefetch,
                s.tx.clone(),
            )
            .await?;
            s.leases.insert(p, lease);
        }
        Ok(())
    }

    async fn drop_session(&mut self, reason: &str) {
        if let Some(mut s) = self.session.take() {
            self.metrics
                .inner
                .reconnects
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(target: "consumer::amqp", queue = %self.topology.name(), reason, "lost the RabbitMQ connection; reconnecting on the next receive");
            s.abort_all();
            let _ = s.connection.close(200, "reconnecting".into()).await;
        }
    }
}

impl Source for PartitionedSource {
    type Acker = AmqpAcker;

    fn system(&self) -> &'static str {
        "rabbitmq"
    }

    fn server(&self) -> Option<(&str, u16)> {
        super::server_of(&self.uri)
    }

    fn channels(&self) -> Option<consumer_core::backend::SourceChannels> {
        Some(crate::asyncapi::partitioned_source_channels(
            &self.topology,
            self.publisher.attribute_prefix(),
        ))
    }

    /// The depths of every partition's work and delay queues and of the
    /// shared dead-letter queue, read every
    /// [`with_depth_interval`](Self::with_depth_interval).
    fn gauges(&self) -> Option<Arc<dyn consumer_core::backend::SourceGauges>> {
        Some(super::gauges::AmqpGauges::start_for(
            Arc::clone(&self.metrics.inner),
            self.partitions.clone(),
            Arc::from(self.topology.name()),
            self.depth_interval,
        ))
    }

    fn check_redelivery(&self, longest_delay: Duration) -> std::result::Result<(), String> {
        match self.partitions.first() {
            Some(p) => super::check_delay_queues(p, longest_delay),
            None => Ok(()),
        }
    }

    async fn recv(
        &mut self,
    ) -> Result<Option<(Envelope, AmqpAcker)>, consumer_core::backend::Error> {
        loop {
            if self.session.is_none() {
                self.session = Some(self.open().await?);
            }
            let Some(s) = self.session.as_mut() else {
                return Err(Error::ChannelClosed.into());
            };
            let item = tokio::select! {
                biased;
                changed = s.desired.changed() => {
                    if changed.is_err() {
                        self.drop_session("the heartbeat channel closed").await;
                        return Err(Error::ChannelClosed.into());
                    }
                    if let Err(e) = self.reconcile().await {
                        self.drop_session(&e.to_string()).await;
                        return Err(e.into());
                    }
                    continue;
                }
                item = s.rx.recv() => item,
            };
            match item {
                Some(Item::Delivery(p, delivery, guard)) => {
                    let Some(topology) = self.partitions.get(p as usize) else {
                        continue;
                    };
                    let m = &self.metrics.inner;
                    m.delivered
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if delivery.redelivered {
                        m.redelivered
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    let payload = Bytes::copy_from_slice(&delivery.data);
                    let envelope = headers::to_envelope(topology.queue(), &delivery, payload);
                    let acker = AmqpAcker::new(
                        delivery.acker,
                        self.publisher.clone(),
                        Arc::clone(topology),
                        Arc::clone(&self.metrics.inner),
                    )
                    .holding(guard);
                    return Ok(Some((envelope, acker)));
                }
                Some(Item::Lost(p, reason)) => {
                    self.drop_session(&format!("partition {p}: {reason}")).await;
                    return Err(Error::ChannelClosed.into());
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
            let leases = std::mem::take(&mut s.leases);
            let releasing = std::mem::take(&mut s.releasing);
            let handed_over = async {
                for (_, lease) in leases {
                    lease.release().await;
                }
                for h in releasing {
                    let _ = h.await;
                }
            };
            if tokio::time::timeout(CLOSE_DRAIN, handed_over)
                .await
                .is_err()
            {
                tracing::warn!(target: "consumer::amqp", queue = %self.topology.name(), "deliveries still in flight at close; RabbitMQ requeues them");
            }
            let _ = s.connection.close(200, "consumer stopped".into()).await;
        }
        self.publisher.close().await;
    }
}
