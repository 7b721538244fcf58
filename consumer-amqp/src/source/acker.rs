//! [`AmqpAcker`]: settles one delivery of an [`AmqpSource`](super::AmqpSource).

use std::sync::Arc;
use std::time::Duration;

use consumer_backend::observe::Happened;
use consumer_backend::{Acker, Message, RetryCopy};
use lapin::options::{BasicAckOptions, BasicNackOptions};

use super::partitioned::InFlightGuard;
use super::stats::StatsInner;
use crate::error::Error;
use crate::publisher::AmqpPublisher;
use crate::topology::Topology;

/// Settles one delivery of an [`AmqpSource`](super::AmqpSource).
///
/// * `ack`: `basic.ack`.
/// * `release`: `basic.nack` with `requeue = true`; on a
///   [`PartitionedSource`](super::PartitionedSource), no nack: the delivery
///   stays unacked and its partition's channel is closed and opened again,
///   so that RabbitMQ requeues it ahead of the deliveries prefetched after it
///   (a nack would put it behind them).
/// * `publish_retry`: publishes the retry copy the runtime built (same id,
///   `x-consumer-attempt` and `x-consumer-first-failure` set, the key as
///   `ce_partitionkey`) to the delay queue of its delay (a partitioned
///   topology's shared one, through its exchange, with the partition queue
///   as routing key) with a per-message expiration, and returns once
///   RabbitMQ confirms it; the runtime acks afterwards.
/// * `publish_dead_letter`: publishes the dead letter to the dead-letter
///   exchange (`mandatory`, routed by the work queue's name) and returns
///   once RabbitMQ confirms it. A letter that routes nowhere (the
///   dead-letter queue was deleted) is refused as having no destination,
///   one over the publisher's size limit as too large: the runtime takes
///   its fallback. It never `nack(requeue = false)`s into the queue's own
///   dead-letter exchange instead: that would drop the context.
/// * An ack or a nack not written out within 5 s (a connection lost while
///   it was queued) fails as unanswered instead of holding its key.
/// * Dropped unsettled: as `release`, the nack sent from a spawned task (when
///   a Tokio runtime is there); whatever happens, RabbitMQ requeues every
///   delivery still unacked when its channel closes.
///
/// Publishes go through a connection of their own, which reconnects by
/// itself, so a settle step can succeed even while the consuming channel is
/// being re-established; an ack on a channel that was lost fails, and
/// RabbitMQ redelivers the message, which dedup then skips.
pub struct AmqpAcker {
    delivery: lapin::Acker,
    publisher: AmqpPublisher,
    topology: Arc<Topology>,
    metrics: Arc<StatsInner>,
    settled: bool,
    /// A partitioned source's count of this partition's deliveries in
    /// flight; dropped last, after the settle.
    _in_flight: Option<InFlightGuard>,
}

impl std::fmt::Debug for AmqpAcker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpAcker")
            .field("queue", &self.topology.queue())
            .field("settled", &self.settled)
            .finish_non_exhaustive()
    }
}

impl AmqpAcker {
    pub(super) fn new(
        delivery: lapin::Acker,
        publisher: AmqpPublisher,
        topology: Arc<Topology>,
        metrics: Arc<StatsInner>,
    ) -> Self {
        Self {
            delivery,
            publisher,
            topology,
            metrics,
            settled: false,
            _in_flight: None,
        }
    }

    /// Holds `guard` until this acker is gone.
    pub(super) fn holding(mut self, guard: InFlightGuard) -> Self {
        self._in_flight = Some(guard);
        self
    }

    fn done(&mut self) {
        if !self.settled {
            self.settled = true;
            self.metrics.observer.emit(Happened::Left);
        }
    }

    /// Waits at most [`SETTLE_FRAME_LIMIT`] for `frame` (an ack or a nack)
    /// to be written out: a connection lost while it is queued may never
    /// answer it, and a lane waiting on it would hold its key, then its
    /// partition, for good. One not written is as good as lost: RabbitMQ
    /// redelivers the delivery once its channel closes, and dedup skips it.
    async fn within_limit(
        &self,
        context: &'static str,
        frame: impl Future<Output = lapin::Result<bool>>,
    ) -> Result<(), consumer_backend::Error> {
        match tokio::time::timeout(SETTLE_FRAME_LIMIT, frame).await {
            Ok(Ok(true)) => Ok(()),
            Ok(Ok(false)) => Err(Error::ChannelClosed.into()),
            Ok(Err(source)) => Err(Error::Amqp { context, source }.into()),
            Err(_) => Err(Error::NoAnswer {
                what: context,
                name: self.topology.queue().to_owned(),
                after: SETTLE_FRAME_LIMIT,
            }
            .into()),
        }
    }
}

/// The longest an ack or a nack may take to be written out (see
/// [`AmqpAcker`]'s docs).
const SETTLE_FRAME_LIMIT: Duration = Duration::from_secs(5);

impl Acker for AmqpAcker {
    async fn ack(mut self) -> Result<(), consumer_backend::Error> {
        self.done();
        self.within_limit(
            "the basic.ack of a delivery of",
            self.delivery.ack(BasicAckOptions::default()),
        )
        .await
    }

    async fn release(mut self) -> Result<(), consumer_backend::Error> {
        self.done();
        if let Some(partition) = self._in_flight.take() {
            partition.requeue_by_channel_close();
            return Ok(());
        }
        let requeue = BasicNackOptions {
            requeue: true,
            ..BasicNackOptions::default()
        };
        self.within_limit(
            "the basic.nack of a delivery of",
            self.delivery.nack(requeue),
        )
        .await
    }

    async fn publish_dead_letter(
        &mut self,
        letter: &Message,
    ) -> Result<(), consumer_backend::Error> {
        self.publisher
            .republish_to(
                self.topology.dead_letter_exchange(),
                self.topology.queue(),
                letter,
                None,
            )
            .await?;
        Ok(())
    }

    async fn publish_retry(&mut self, copy: &RetryCopy) -> Result<(), consumer_backend::Error> {
        let (exchange, routing_key) = self.topology.retry_route(copy.delay);
        self.publisher
            .republish_to(&exchange, &routing_key, &copy.message, Some(copy.delay))
            .await?;
        Ok(())
    }
}

impl Drop for AmqpAcker {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        self.done();
        if let Some(partition) = self._in_flight.take() {
            partition.requeue_by_channel_close();
            return;
        }
        if !self.delivery.usable() {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let delivery = self.delivery.clone();
            handle.spawn(async move {
                let requeue = BasicNackOptions {
                    requeue: true,
                    ..BasicNackOptions::default()
                };
                if let Err(e) = delivery.nack(requeue).await {
                    tracing::debug!(target: "consumer::amqp", error = %e, "nack of a dropped delivery failed; its channel closing requeues it");
                }
            });
        }
    }
}
