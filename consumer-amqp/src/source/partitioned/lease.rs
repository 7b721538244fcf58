//! One partition queue this instance consumes: its channel, the task that
//! forwards its deliveries, and the count of those not settled yet, so that
//! handing the partition over waits for them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_lite::StreamExt;
use lapin::message::Delivery;
use lapin::options::{BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

use crate::error::{Error, Result};
use crate::names::short;

/// What the forwarding tasks send the source.
// Nearly every item is a delivery: boxing it would cost an allocation each.
#[allow(clippy::large_enum_variant)]
pub(super) enum Item {
    /// A delivery of partition `.0`, counted in flight until `.2` drops.
    Delivery(u32, Delivery, InFlightGuard),
    /// The partition's channel or consumer was lost.
    Lost(u32, String),
}

/// Deliveries of one partition handed to the runtime and not settled.
#[derive(Debug, Default)]
pub(super) struct InFlight {
    n: AtomicUsize,
    zero: Notify,
}

impl InFlight {
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

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.0.n.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.zero.notify_waiters();
        }
    }
}

/// A subscription to one partition queue, on a channel of its own.
pub(super) struct Lease {
    channel: Channel,
    stop: Arc<Notify>,
    in_flight: Arc<InFlight>,
    /// `None` once handed over; aborted when the lease is dropped, so the
    /// consumer (and with it the channel) goes away.
    forwarder: Option<JoinHandle<()>>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(f) = self.forwarder.take() {
            f.abort();
        }
    }
}

impl Lease {
    /// Subscribes to `queue` (a single-active-consumer queue: RabbitMQ
    /// delivers once this subscription is the active one) and forwards its
    /// deliveries to `tx`.
    pub(super) async fn open(
        connection: &Connection,
        partition: u32,
        queue: &str,
        prefetch: u16,
        tx: mpsc::Sender<Item>,
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
            .map_err(Error::amqp("basic.consume"))?;
        let stop = Arc::new(Notify::new());
        let in_flight = Arc::new(InFlight::default());
        let forwarder = tokio::spawn(forward(
            partition,
            consumer,
            Arc::clone(&stop),
            Arc::clone(&in_flight),
            tx,
        ));
        Ok(Self {
            channel,
            stop,
            in_flight,
            forwarder: Some(forwarder),
        })
    }

    /// Hands the partition over without breaking its order: forwards
    /// nothing more, waits until every delivery already forwarded is
    /// settled, then closes the channel, which makes RabbitMQ requeue what
    /// it had sent ahead (in order) and activate the next subscriber.
    pub(super) async fn release(mut self) {
        self.stop.notify_one();
        if let Some(f) = self.forwarder.take() {
            let _ = f.await;
        }
        self.in_flight.drained().await;
        let _ = self
            .channel
            .close(200, "partition handed over".into())
            .await;
    }
}

async fn forward(
    partition: u32,
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
            Some(Err(e)) => Item::Lost(partition, e.to_string()),
            None => Item::Lost(partition, "the broker cancelled the consumer".to_owned()),
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
        let f = Arc::new(InFlight::default());
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
}
