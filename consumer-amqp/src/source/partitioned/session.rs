//! One connection's worth of a [`PartitionedSource`](super::PartitionedSource):
//! the leases it holds, the partitions whose queue RabbitMQ reports crashed,
//! and how both follow the membership's assignment.
//!
//! A partition is either leased (subscribed, perhaps waiting to become the
//! active consumer), crashed (tried again when its backoff is due), or
//! neither. A lease that fails alone (its channel closed, its consumer
//! cancelled by the broker) is abandoned and subscribed again; only the
//! connection's loss ends the session, so one partition's trouble does not
//! hand every other partition of this instance over.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use lapin::Connection;
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::lease::{Item, Lease, LeaseId};
use super::membership::Ended;
use crate::error::{Error, Result};
use crate::source::crashed::Crashed;
use crate::source::stats::StatsInner;
use crate::topology::{PartitionedTopology, Topology};

/// What a session needs of its source to subscribe to a partition.
pub(super) struct Partitions<'a> {
    pub(super) topology: &'a PartitionedTopology,
    pub(super) partitions: &'a [Arc<Topology>],
    pub(super) prefetch: u16,
    pub(super) metrics: &'a StatsInner,
}

impl Partitions<'_> {
    fn queue(&self, p: u32) -> Option<&str> {
        self.partitions.get(p as usize).map(|t| t.queue())
    }
}

pub(super) struct Session {
    pub(super) connection: Connection,
    tx: mpsc::Sender<Item>,
    pub(super) rx: mpsc::Receiver<Item>,
    requeue_tx: mpsc::UnboundedSender<LeaseId>,
    /// Leases a delivery was given back to (see `lease`'s module docs).
    pub(super) requeue_rx: mpsc::UnboundedReceiver<LeaseId>,
    pub(super) desired: watch::Receiver<Option<Vec<u32>>>,
    leases: BTreeMap<u32, Lease>,
    crashed: BTreeMap<u32, Crashed>,
    releasing: Vec<JoinHandle<()>>,
    pub(super) leave: Arc<Notify>,
    pub(super) membership: Option<JoinHandle<Ended>>,
    next_lease: LeaseId,
    /// The leases are to be compared with the assignment again.
    pub(super) stale: bool,
    /// How many shared delay buckets were declared for this session.
    pub(super) delay_tiers: u32,
}

impl Session {
    /// A session on `connection` that follows `desired`; `crashed` are the
    /// partitions whose declare met a crashed queue at start, `delay_tiers`
    /// the delay buckets declared.
    pub(super) fn new(
        connection: Connection,
        desired: watch::Receiver<Option<Vec<u32>>>,
        (leave, membership): (Arc<Notify>, JoinHandle<Ended>),
        capacity: usize,
        crashed: Vec<u32>,
        delay_tiers: u32,
    ) -> Self {
        let (tx, rx) = mpsc::channel(capacity);
        let (requeue_tx, requeue_rx) = mpsc::unbounded_channel();
        Self {
            connection,
            tx,
            rx,
            requeue_tx,
            requeue_rx,
            desired,
            leases: BTreeMap::new(),
            crashed: crashed
                .into_iter()
                .map(|p| (p, Crashed::try_now()))
                .collect(),
            releasing: Vec::new(),
            leave,
            membership: Some(membership),
            next_lease: 0,
            stale: false,
            delay_tiers,
        }
    }

    /// The partitions subscribed to.
    pub(super) fn leased(&self) -> Vec<u32> {
        self.leases.keys().copied().collect()
    }

    /// When the next crashed partition is due to be tried again.
    pub(super) fn next_retry(&self) -> Option<Instant> {
        self.crashed.values().map(Crashed::retry_at).min()
    }

    /// Subscribes to the partitions assigned and not held (a crashed one
    /// once its retry is due) and hands over those no longer assigned. An
    /// error is the connection's, or a conflict that cannot heal: the
    /// caller drops the session.
    pub(super) async fn reconcile(&mut self, with: &Partitions<'_>) -> Result<()> {
        self.stale = false;
        let desired: BTreeSet<u32> = self
            .desired
            .borrow_and_update()
            .iter()
            .flatten()
            .copied()
            .collect();
        let gone: Vec<u32> = self
            .leases
            .keys()
            .copied()
            .filter(|p| !desired.contains(p))
            .collect();
        for p in gone {
            if let Some(lease) = self.leases.remove(&p) {
                self.releasing.push(tokio::spawn(lease.release()));
            }
            if let Some(queue) = with.queue(p) {
                with.metrics.forget_queue(queue);
            }
        }
        let not_ours: Vec<u32> = self
            .crashed
            .keys()
            .copied()
            .filter(|p| !desired.contains(p))
            .collect();
        for p in not_ours {
            if let Some(c) = self.crashed.remove(&p) {
                forget(with, p, &c);
            }
        }
        self.releasing.retain(|h| !h.is_finished());
        for p in desired {
            if self.leases.contains_key(&p) || self.crashed.get(&p).is_some_and(|c| !c.due()) {
                continue;
            }
            let Some(topology) = with.partitions.get(p as usize) else {
                continue;
            };
            match self.subscribe(p, topology, with).await {
                Ok(lease) => {
                    self.leases.insert(p, lease);
                    if let Some(c) = self.crashed.remove(&p) {
                        with.metrics.recovered(&c, topology.queue());
                    }
                    with.metrics.report_consuming(topology.queue());
                }
                Err(Error::QueueCrashed { queue, reply }) => {
                    let wait = self
                        .crashed
                        .entry(p)
                        .or_insert_with(Crashed::try_now)
                        .failed(&queue);
                    with.metrics.report_crashed(&queue, &reply, wait);
                }
                Err(e) => return Err(with.topology.in_partitioned_words(e)),
            }
        }
        Ok(())
    }

    async fn subscribe(
        &mut self,
        p: u32,
        topology: &Topology,
        with: &Partitions<'_>,
    ) -> Result<Lease> {
        if self.crashed.contains_key(&p) {
            // An operator may have deleted the crashed queue since: declare
            // it anew (a no-op when it is there).
            let channel = self
                .connection
                .create_channel()
                .await
                .map_err(Error::amqp("channel open"))?;
            let declared = topology.declare(&channel).await;
            // A refusal closed the channel already.
            let _ = channel.close(200, "partition declared".into()).await;
            declared?;
        }
        self.next_lease += 1;
        Lease::open(
            &self.connection,
            (p, self.next_lease),
            topology.queue(),
            with.prefetch,
            self.tx.clone(),
            self.requeue_tx.clone(),
        )
        .await
    }

    /// A delivery of lease `id` was given back unsettled: hands the lease
    /// over to this instance (its channel closes once its other deliveries
    /// are settled, and RabbitMQ requeues what it holds, in order, to the
    /// new lease).
    pub(super) fn requeue(&mut self, id: LeaseId) {
        let Some(p) = self
            .leases
            .iter()
            .find_map(|(p, l)| (l.id() == id).then_some(*p))
        else {
            // Handed over already.
            return;
        };
        if let Some(lease) = self.leases.remove(&p) {
            tracing::debug!(target: "consumer::amqp", partition = p, "a delivery was given back: closing the partition's channel to requeue it in order");
            self.releasing.push(tokio::spawn(lease.release()));
            self.stale = true;
        }
    }

    /// Lease `id` of partition `p` lost its channel or consumer (the
    /// connection is still there): abandons it and subscribes again.
    pub(super) fn lost(&mut self, p: u32, id: LeaseId, reason: &str, queue: &str) {
        if self.leases.get(&p).is_none_or(|l| l.id() != id) {
            return;
        }
        if let Some(lease) = self.leases.remove(&p) {
            tracing::warn!(target: "consumer::amqp", queue, reason, "lost the subscription to a partition queue; subscribing again");
            self.releasing.push(tokio::spawn(lease.abandon()));
            self.stale = true;
        }
    }

    /// Hands every partition over, each once its deliveries in flight are
    /// settled.
    pub(super) async fn hand_over_all(&mut self) {
        let leases = std::mem::take(&mut self.leases);
        let releasing = std::mem::take(&mut self.releasing);
        for (_, lease) in leases {
            lease.release().await;
        }
        for h in releasing {
            let _ = h.await;
        }
    }

    /// No series for the partitions of this session any more.
    pub(super) fn forget_all(&mut self, with: &Partitions<'_>) {
        for p in self.leases.keys() {
            if let Some(queue) = with.queue(*p) {
                with.metrics.forget_queue(queue);
            }
        }
        for (p, c) in std::mem::take(&mut self.crashed) {
            forget(with, p, &c);
        }
    }

    /// Stops every task at once: nothing is forwarded or handed over any
    /// more, and once the connection goes RabbitMQ requeues what it holds.
    pub(super) fn abort_all(&mut self) {
        if let Some(m) = self.membership.take() {
            m.abort();
        }
        self.leases.clear();
        for h in self.releasing.drain(..) {
            h.abort();
        }
    }
}

/// Why a session's heartbeats (`membership`) stopped, once they have;
/// pending while they go on, and forever once taken by `close`.
pub(super) async fn heartbeats_stopped(membership: &mut Option<JoinHandle<Ended>>) -> String {
    let Some(task) = membership.as_mut() else {
        return std::future::pending().await;
    };
    let why = match task.await {
        Ok(Ended::Stopped(why)) => why,
        Ok(Ended::Left) => "this instance said goodbye".to_owned(),
        Err(e) => format!("the heartbeats' task ended: {e}"),
    };
    // A finished task is not polled again.
    *membership = None;
    why
}

/// No series for partition `p`'s queue, nor for the queue it was last
/// found crashed on.
fn forget(with: &Partitions<'_>, p: u32, crashed: &Crashed) {
    if let Some(queue) = crashed.queue() {
        with.metrics.forget_queue(queue);
    }
    if let Some(queue) = with.queue(p) {
        with.metrics.forget_queue(queue);
    }
}

impl Drop for Session {
    /// A source dropped without `close` (a crash in a test, a panic):
    /// the tasks stop, so the connection closes and the others take over.
    fn drop(&mut self) {
        self.abort_all();
    }
}
