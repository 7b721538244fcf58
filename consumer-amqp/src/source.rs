//! Consuming a RabbitMQ queue, and settling each delivery.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use consumer_core::envelope::{format_time, names};
use consumer_core::{Acker, DeadLetter, DeadLettered, Envelope, Message, Redelivery, Source};
use futures_lite::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties, Consumer};

use crate::error::{Error, Result};
use crate::headers;
use crate::publisher::AmqpPublisher;
use crate::topology::{Depths, Topology, short};

/// Consumes the work queue of a [`Topology`] with manual acks.
///
/// * **In-flight bound**: `basic.qos` with [`with_prefetch`](Self::with_prefetch)
///   (default 256): RabbitMQ sends no more unacked deliveries than that to
///   this consumer, which bounds memory together with the runtime's
///   `with_max_in_flight` (the smaller of the two wins).
/// * **Partition key**: the `ce_partitionkey` header when present, else the
///   routing key, except when the routing key is the queue's own name (a
///   publish through the default exchange), where the message has no key
///   and runs in a lane of its own.
/// * **Message id**: `ce_id`; else the AMQP `message-id` property; else a
///   hash of exchange, routing key, headers and payload, which, unlike the
///   delivery tag, is the same on every redelivery (see
///   [`headers`](crate::headers)).
/// * **Reconnects**: when the connection or channel drops, `recv` returns a
///   retriable error (the runtime backs off and calls again), and the next
///   call reconnects, declares the topology again and resumes consuming.
///   RabbitMQ redelivers every delivery that was not acked on the lost
///   channel; dedup makes that harmless.
pub struct AmqpSource {
    uri: String,
    topology: Arc<Topology>,
    prefetch: u16,
    session: Option<Session>,
    publisher: AmqpPublisher,
    metrics: AmqpMetrics,
}

struct Session {
    connection: Connection,
    channel: Channel,
    consumer: Consumer,
}

impl std::fmt::Debug for AmqpSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpSource")
            .field("queue", &self.topology.queue())
            .field("prefetch", &self.prefetch)
            .field("connected", &self.session.is_some())
            .finish_non_exhaustive()
    }
}

impl AmqpSource {
    /// A source for `topology` on the broker at `uri`. Nothing is contacted
    /// until [`connect`](Self::connect) or the first `recv`; the names are
    /// checked now.
    pub fn new(uri: impl Into<String>, topology: Topology) -> Result<Self> {
        topology.validate()?;
        let uri = uri.into();
        let publisher = AmqpPublisher::new(uri.clone())
            .with_connection_name(format!("consumer-settle {}", topology.queue()));
        let topology = Arc::new(topology);
        Ok(Self {
            metrics: AmqpMetrics {
                inner: Arc::new(MetricsInner {
                    topology: Arc::clone(&topology),
                    publisher: publisher.clone(),
                    delivered: AtomicU64::new(0),
                    redelivered: AtomicU64::new(0),
                    settled: AtomicU64::new(0),
                    reconnects: AtomicU64::new(0),
                }),
            },
            uri,
            topology,
            prefetch: 256,
            session: None,
            publisher,
        })
    }

    /// Most unacked deliveries RabbitMQ sends this consumer (`basic.qos`).
    pub fn with_prefetch(mut self, prefetch: u16) -> Self {
        self.prefetch = prefetch.max(1);
        self
    }

    /// Connects, declares the topology and starts consuming now, so that
    /// a broker that cannot be reached or a topology conflict shows at
    /// start rather than in the consumer's retry loop.
    pub async fn connect(mut self) -> Result<Self> {
        if self.session.is_none() {
            self.session = Some(self.open().await?);
        }
        Ok(self)
    }

    /// The topology this source consumes.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Counters and queue depths; clone it before handing the source to the
    /// consumer.
    pub fn metrics(&self) -> AmqpMetrics {
        self.metrics.clone()
    }

    async fn open(&self) -> Result<Session> {
        let props = ConnectionProperties::default()
            .with_connection_name(format!("consumer {}", self.topology.queue()).into());
        let connection = Connection::connect(&self.uri, props)
            .await
            .map_err(Error::amqp("connection"))?;
        let channel = connection
            .create_channel()
            .await
            .map_err(Error::amqp("channel open"))?;
        self.topology.declare(&channel).await?;
        channel
            .basic_qos(self.prefetch, BasicQosOptions::default())
            .await
            .map_err(Error::amqp("basic.qos"))?;
        let consumer = channel
            .basic_consume(
                short(self.topology.queue())?,
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(Error::amqp("basic.consume"))?;
        tracing::info!(target: "consumer_amqp", queue = %self.topology.queue(), prefetch = self.prefetch, "consuming");
        Ok(Session {
            connection,
            channel,
            consumer,
        })
    }

    async fn drop_session(&mut self, reason: &str) {
        if let Some(s) = self.session.take() {
            self.metrics
                .inner
                .reconnects
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(target: "consumer_amqp", queue = %self.topology.queue(), reason, "lost the RabbitMQ channel; reconnecting on the next receive");
            let _ = s.connection.close(200, "reconnecting".into()).await;
        }
    }
}

impl Source for AmqpSource {
    type Acker = AmqpAcker;

    fn system(&self) -> &'static str {
        "rabbitmq"
    }

    async fn recv(&mut self) -> Result<Option<(Envelope, AmqpAcker)>, consumer_core::Error> {
        if self.session.is_none() {
            self.session = Some(self.open().await?);
        }
        let Some(session) = self.session.as_mut() else {
            return Err(Error::ChannelClosed.into());
        };
        match session.consumer.next().await {
            Some(Ok(delivery)) => {
                let m = &self.metrics.inner;
                m.delivered.fetch_add(1, Ordering::Relaxed);
                if delivery.redelivered {
                    m.redelivered.fetch_add(1, Ordering::Relaxed);
                }
                let lapin::message::Delivery { data, .. } = &delivery;
                let payload = Bytes::copy_from_slice(data);
                let envelope = headers::to_envelope(self.topology.queue(), &delivery, payload);
                let acker = AmqpAcker {
                    delivery: delivery.acker,
                    channel: session.channel.clone(),
                    publisher: self.publisher.clone(),
                    topology: Arc::clone(&self.topology),
                    metrics: Arc::clone(&self.metrics.inner),
                    settled: false,
                    dead_letter_failures: 0,
                    injected_dead_letter_failures: 0,
                };
                Ok(Some((envelope, acker)))
            }
            Some(Err(e)) => {
                let err = Error::Amqp {
                    context: "consume",
                    source: e,
                };
                self.drop_session(&err.to_string()).await;
                Err(err.into())
            }
            None => {
                self.drop_session("the broker cancelled the consumer").await;
                Err(Error::ChannelClosed.into())
            }
        }
    }

    async fn close(mut self) {
        if let Some(s) = self.session.take() {
            let _ = s.channel.close(200, "consumer stopped".into()).await;
            let _ = s.connection.close(200, "consumer stopped".into()).await;
        }
        self.publisher.close().await;
    }
}

/// Settles one delivery of an [`AmqpSource`].
///
/// * `ack`: `basic.ack`.
/// * `release`: `basic.nack` with `requeue = true`.
/// * `schedule_retry`: publishes a copy (same id, `x-consumer-attempt` and
///   `x-consumer-first-failure` set, the key as `ce_partitionkey`) to the
///   delay queue of its delay with a per-message expiration, and returns
///   once RabbitMQ confirms it; the runtime acks afterwards.
/// * `dead_letter`: publishes the dead letter (original payload and
///   headers plus the `x-dlq-*` context) to the dead-letter exchange and
///   returns once RabbitMQ confirms it; a failed publish is an error the
///   runtime retries (the original stays unacked meanwhile, so nothing is
///   lost). It does not `nack(requeue = false)` to the DLX instead: that
///   would drop the context, and the runtime's ack that follows would hit
///   an already-settled delivery tag, which closes the channel.
/// * Dropped unsettled: `basic.nack` with `requeue = true` is sent from a
///   spawned task (when a Tokio runtime is there); whatever happens,
///   RabbitMQ requeues every delivery still unacked when its channel closes.
///
/// Publishes go through a connection of their own, which reconnects by
/// itself, so a settle step can succeed even while the consuming channel is
/// being re-established; an ack on a channel that was lost fails, and
/// RabbitMQ redelivers the message, which dedup then skips.
pub struct AmqpAcker {
    delivery: lapin::Acker,
    channel: Channel,
    publisher: AmqpPublisher,
    topology: Arc<Topology>,
    metrics: Arc<MetricsInner>,
    settled: bool,
    dead_letter_failures: u32,
    injected_dead_letter_failures: u32,
}

/// Failed dead-letter publishes of one delivery after which the acker
/// gives it to the queue's dead-letter exchange instead (`nack` without
/// requeue): the structured context is lost, the message is not.
pub const DLX_FALLBACK_AFTER: u32 = 5;

impl std::fmt::Debug for AmqpAcker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpAcker")
            .field("queue", &self.topology.queue())
            .field("settled", &self.settled)
            .finish_non_exhaustive()
    }
}

impl AmqpAcker {
    fn done(&mut self) {
        if !self.settled {
            self.settled = true;
            self.metrics.settled.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Makes the next `n` dead-letter publishes of this delivery fail, to
    /// exercise the dead-letter-exchange fallback. For fault-injection tests.
    #[doc(hidden)]
    pub fn fail_next_dead_letters(&mut self, n: u32) {
        self.injected_dead_letter_failures += n;
    }

    /// Closes the channel this delivery came on without settling it, as a
    /// consumer crash would: RabbitMQ requeues every unacked delivery of the
    /// channel, and the source reconnects. For fault-injection tests.
    #[doc(hidden)]
    pub async fn crash_channel(mut self) {
        self.done();
        let _ = self.channel.close(200, "simulated crash".into()).await;
    }
}

impl Acker for AmqpAcker {
    async fn ack(mut self) -> Result<(), consumer_core::Error> {
        self.done();
        match self.delivery.ack(BasicAckOptions::default()).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(Error::ChannelClosed.into()),
            Err(e) => Err(Error::Amqp {
                context: "basic.ack",
                source: e,
            }
            .into()),
        }
    }

    async fn release(mut self) -> Result<(), consumer_core::Error> {
        self.done();
        let requeue = BasicNackOptions {
            requeue: true,
            ..BasicNackOptions::default()
        };
        match self.delivery.nack(requeue).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(Error::ChannelClosed.into()),
            Err(e) => Err(Error::Amqp {
                context: "basic.nack",
                source: e,
            }
            .into()),
        }
    }

    async fn dead_letter(
        &mut self,
        dead_letter: &DeadLetter,
    ) -> Result<DeadLettered, consumer_core::Error> {
        let published = if self.injected_dead_letter_failures > 0 {
            self.injected_dead_letter_failures -= 1;
            Err(consumer_core::Error::broker(
                "injected dead-letter publish failure",
                true,
                None,
            ))
        } else {
            let message = dead_letter.to_message();
            self.publisher
                .publish_to(
                    self.topology.dead_letter_exchange(),
                    self.topology.queue(),
                    &message,
                    None,
                )
                .await
                .map_err(consumer_core::Error::from)
        };
        let Err(error) = published else {
            return Ok(DeadLettered::Published);
        };
        self.dead_letter_failures += 1;
        if self.dead_letter_failures < DLX_FALLBACK_AFTER {
            return Err(error);
        }
        // The publishing connection keeps failing: let RabbitMQ dead-letter
        // the original through the work queue's x-dead-letter-exchange.
        let reject = BasicNackOptions {
            requeue: false,
            ..BasicNackOptions::default()
        };
        match self.delivery.nack(reject).await {
            Ok(true) => {
                self.done();
                tracing::error!(
                    target: "consumer::amqp",
                    queue = self.topology.queue(),
                    failures = self.dead_letter_failures,
                    error = %error,
                    "dead-letter publish kept failing; rejected the delivery into the dead-letter exchange"
                );
                Ok(DeadLettered::SettledByBroker)
            }
            _ => Err(error),
        }
    }

    async fn schedule_retry(
        &mut self,
        envelope: &Envelope,
        retry: &Redelivery,
    ) -> Result<(), consumer_core::Error> {
        let mut headers = envelope.headers.clone();
        // The copy must keep the id even when it came from a property or a
        // content hash: the new headers would change the hash.
        headers.insert(names::ID, envelope.id.as_str());
        headers.insert(names::ATTEMPT, retry.attempt.to_string());
        headers.insert(names::FIRST_FAILURE, format_time(retry.first_failure));
        let message = Message {
            key: envelope.key.clone(),
            headers,
            payload: envelope.payload.clone(),
        };
        let queue = self.topology.delay_queue_for(retry.delay);
        self.publisher
            .publish_to("", &queue, &message, Some(retry.delay))
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
                    tracing::debug!(target: "consumer_amqp", error = %e, "nack of a dropped delivery failed; its channel closing requeues it");
                }
            });
        }
    }
}

/// Live counters of an [`AmqpSource`] and the depths of its queues.
#[derive(Clone, Debug)]
pub struct AmqpMetrics {
    inner: Arc<MetricsInner>,
}

#[derive(Debug)]
struct MetricsInner {
    topology: Arc<Topology>,
    publisher: AmqpPublisher,
    delivered: AtomicU64,
    redelivered: AtomicU64,
    settled: AtomicU64,
    reconnects: AtomicU64,
}

impl AmqpMetrics {
    /// Deliveries received from RabbitMQ.
    pub fn delivered(&self) -> u64 {
        self.inner.delivered.load(Ordering::Relaxed)
    }

    /// Deliveries RabbitMQ flagged `redelivered` (handed out before and not
    /// acked: a crash, a lost channel, a release).
    pub fn redelivered(&self) -> u64 {
        self.inner.redelivered.load(Ordering::Relaxed)
    }

    /// Deliveries received and not yet settled (acked, released or dropped).
    pub fn in_flight(&self) -> u64 {
        self.delivered()
            .saturating_sub(self.inner.settled.load(Ordering::Relaxed))
    }

    /// How many times the consuming channel was lost and re-opened.
    pub fn reconnects(&self) -> u64 {
        self.inner.reconnects.load(Ordering::Relaxed)
    }

    /// Ready messages in the work, dead-letter and delay queues (passive
    /// declares on the settle connection).
    pub async fn depths(&self) -> Result<Depths> {
        let channel = self.inner.publisher.side_channel().await?;
        self.inner.topology.depths(channel).await
    }
}
