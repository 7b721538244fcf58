//! One partition queue this instance consumes: its channel, the task that
//! forwards its deliveries, and the count of those not settled yet, so that
//! handing the partition over waits for them.
//!
//! **A subscription ends by closing its channel, never by `basic.cancel`.**
//! RabbitMQ hands a single-active-consumer queue to the next subscriber the
//! moment the active one is cancelled, while the cancelled one still holds
//! its unacked deliveries (those in flight in the runtime, and those
//! prefetched and not forwarded); it requeues them only when their channel
//! closes. The next subscriber would then run a key's later messages while
//! its earlier ones were still running here, and receive the earlier ones
//! after the later ones: per-key order broken at every hand-over of a busy
//! partition, on classic and quorum queues alike. A channel close instead
//! requeues every unacked delivery, in queue order, in the same step that
//! activates the next subscriber. lapin cancels a consumer when its last
//! handle is dropped, so a lease keeps one until its channel is closed.
//!
//! For the same reason a delivery given back unsettled is not nacked (a
//! `basic.nack` with requeue would put it back behind the deliveries
//! prefetched after it): it stays unacked, and the lease is handed over to
//! this instance itself, which closes its channel and requeues it in order.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_lite::StreamExt;
use lapin::message::Delivery;
use lapin::options::{BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

use crate::error::{Error, Result, crashed_reply};
use crate::names::short;

/// What the forwarding tasks send the source.
// Nearly every item is a delivery: boxing it would cost an allocation each.
#[allow(clippy::large_enum_variant)]
pub(super) enum Item {
    /// A delivery of partition `.0`, counted in flight until `.2` drops.
    Delivery(u32, Delivery, InFlightGuard),
    /// Lease `.1` of partition `.0` lost its channel or its consumer.
    Lost(u32, LeaseId, String),
}

/// Tells one lease from the earlier and later ones of its partition.
pub(super) type LeaseId = u64;

/// Deliveries of one partition handed to the runtime and not settled.
#[derive(Debug)]
pub(super) struct InFlight {
    n: AtomicUsize,
    zero: Notify,
    lease: LeaseId,
    /// Where a delivery given back unsettled asks for its lease to be
    /// handed over (to this instance), so its channel closes.
    requeue: mpsc::UnboundedSender<LeaseId>,
}

impl InFlight {
    fn new(lease: LeaseId, requeue: mpsc::UnboundedSender<LeaseId>) -> Self {
        Self {
            n: AtomicUsize::new(0),
            zero: Notify::new(),
            lease,
            requeue,
        }
    }

    fn enter(self: &Arc<Self>) -> InFlightGuard {
        self.n.fetch_add(1, Ordering::AcqRel);
        InFlightGuard(Arc::clone(self))
    }

    /// Returns once nothing is in flight.
    async fn drained(&self) {
        loop {
            let notified = self.zero.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.n.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// Held by a delivery's acker: dropping it (the delivery settled, or its
/// acker dropped) takes the delivery out of the count.
#[derive(Debug)]
pub(crate) struct InFlightGuard(Arc<InFlight>);

impl InFlightGuard {
    /// The delivery is given back unsettled: it stays unacked, and its
    /// lease is to be handed over so that its channel closes and RabbitMQ
    /// requeues it ahead of what was prefetched after it (see the module
    /// docs).
    pub(crate) fn requeue_by_channel_close(self) {
        // No receiver: the source is closing, which closes the channel.
        let _ = self.0.requeue.send(self.0.lease);
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.0.n.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.zero.notify_waiters();
        }
    }
}

/// A subscription to one partition queue, on a channel of its own.
pub(super) struct Lease {
    id: LeaseId,
    channel: Channel,
    /// Held until the channel is closed: dropping the last handle would
    /// cancel the subscription first (see the module docs).
    consumer: Option<lapin::Consumer>,
    stop: Arc<Notify>,
    in_flight: Arc<InFlight>,
    /// `None` once handed over; aborted when the lease is dropped.
    forwarder: Option<JoinHandle<()>>,
}

impl Drop for Lease {
    /// A lease dropped without [`release`](Lease::release) (the source lost
    /// its connection, or was dropped): its channel is closed before its
    /// consumer handle goes, from a task, since closing waits for the
    /// broker.
    fn drop(&mut self) {
        if let Some(f) = self.forwarder.take() {
            f.abort();
        }
        let Some(consumer) = self.consumer.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) if self.channel.status().connected() => {
                let channel = self.channel.clone();
                runtime.spawn(async move {
                    let _ = channel.close(200, "partition abandoned".into()).await;
                    drop(consumer);
                });
            }
            // A channel that is not open sends no cancel; without a runtime
            // (a drop at process exit) nothing could close it first.
            _ => drop(consumer),
        }
    }
}

impl Lease {
    /// Subscribes to `queue` (a single-active-consumer queue: RabbitMQ
    /// delivers once this subscription is the active one) and forwards its
    /// deliveries to `tx`; a delivery given back unsettled sends `id` to
    /// `requeue`.
    pub(super) async fn open(
        connection: &Connection,
        (partition, id): (u32, LeaseId),
        queue: &str,
        prefetch: u16,
        tx: mpsc::Sender<Item>,
        requeue: mpsc::UnboundedSender<LeaseId>,
    ) -> Result<Self> {
        let channel = connection
            .create_channel()
            .await
            .map_err(Error::amqp("channel open"))?;
        channel
            .basic_qos(prefetch, BasicQosOptions::default())
            .await
            .map_err(Error::amqp("basic.qos"))?;
        let consumer = channel
            .basic_consume(
                short(queue)?,
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|source| match crashed_reply(&source) {
                Some(reply) => Error::QueueCrashed {
                    queue: queue.to_owned(),
                    reply,
                },
                None => Error::Amqp {
                    context: "basic.consume",
                    source,
                },
            })?;
        let stop = Arc::new(Notify::new());
        let in_flight = Arc::new(InFlight::new(id, requeue));
        let forwarder = tokio::spawn(forward(
            (partition, id),
            consumer.clone(),
            Arc::clone(&stop),
            Arc::clone(&in_flight),
            tx,
        ));
        Ok(Self {
            id,
            channel,
            consumer: Some(consumer),
            stop,
            in_flight,
            forwarder: Some(forwarder),
        })
    }

    pub(super) fn id(&self) -> LeaseId {
        self.id
    }

    /// Hands the partition over without breaking its order: forwards
    /// nothing more, waits until every delivery already forwarded is
    /// settled (the subscription stays active meanwhile, so nobody else is
    /// given the partition), then closes the channel, which makes RabbitMQ
    /// requeue what it had sent ahead (in order) and activate the next
    /// subscriber in one step.
    pub(super) async fn release(mut self) {
        self.stop.notify_one();
        if let Some(f) = self.forwarder.take() {
            let _ = f.await;
        }
        self.in_flight.drained().await;
        self.close("partition handed over").await;
    }

    /// Gives the partition up at once, its deliveries in flight or not (its
    /// channel or consumer failed): closes the channel, so RabbitMQ
    /// requeues every unacked delivery in order; those still in flight here
    /// are delivered again, to this instance or the next, and their dedup
    /// rows keep them from running twice.
    pub(super) async fn abandon(mut self) {
        if let Some(f) = self.forwarder.take() {
            f.abort();
        }
        self.close("partition abandoned").await;
    }

    async fn close(&mut self, why: &str) {
        let _ = self.channel.close(200, why.into()).await;
        // Only now: the channel is closed, so no cancel goes out.
        self.consumer.take();
    }
}

async fn forward(
    (partition, lease): (u32, LeaseId),
    mut consumer: lapin::Consumer,
    stop: Arc<Notify>,
    in_flight: Arc<InFlight>,
    tx: mpsc::Sender<Item>,
) {
    loop {
        let next = tokio::select! {
            biased;
            () = stop.notified() => return,
            next = consumer.next() => next,
        };
        let item = match next {
            Some(Ok(delivery)) => Item::Delivery(partition, delivery, in_flight.enter()),
            Some(Err(e)) => Item::Lost(partition, lease, e.to_string()),
            None => Item::Lost(
                partition,
                lease,
                "the broker cancelled the consumer".to_owned(),
            ),
        };
        let lost = matches!(item, Item::Lost(..));
        // A full queue means the runtime is at its in-flight bound: wait,
        // unless the partition is being handed over meanwhile.
        tokio::select! {
            biased;
            () = stop.notified() => return,
            sent = tx.send(item) => if sent.is_err() { return },
        }
        if lost {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn drained_waits_for_every_guard() {
        let (requeue, _) = mpsc::unbounded_channel();
        let f = Arc::new(InFlight::new(1, requeue));
        f.drained().await;
        let a = f.enter();
        let b = f.enter();
        let waiter = tokio::spawn({
            let f = Arc::clone(&f);
            async move { f.drained().await }
        });
        drop(a);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "one delivery is still in flight");
        drop(b);
        waiter.await.expect("drained once both are settled");
    }

    #[tokio::test]
    async fn a_delivery_given_back_asks_for_its_lease_to_be_handed_over() {
        let (requeue, mut asked) = mpsc::unbounded_channel();
        let f = Arc::new(InFlight::new(7, requeue));
        f.enter().requeue_by_channel_close();
        assert_eq!(
            asked.recv().await,
            Some(7),
            "lease 7 is to close its channel"
        );
        f.drained().await;
    }
}
