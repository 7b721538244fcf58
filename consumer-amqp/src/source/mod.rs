//! Consuming a RabbitMQ queue ([`AmqpSource`], built by
//! [`AmqpSourceBuilder`]), settling each delivery
//! ([`AmqpAcker`]), and the counters of both ([`AmqpStats`]).

mod acker;
mod builder;
mod crashed;
mod gauges;
mod options;
mod partitioned;
mod stats;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use consumer_backend::observe::Happened;
use consumer_backend::{Envelope, Source};
use futures_lite::StreamExt;
use lapin::options::{BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, Consumer};

pub use acker::AmqpAcker;
pub use builder::AmqpSourceBuilder;
pub use partitioned::{PartitionedSource, PartitionedSourceBuilder};
pub use stats::{AmqpStats, AmqpStatsSnapshot};

use crashed::Crashed;
use options::SourceOptions;

use crate::error::{Error, Result, crashed_reply};
use crate::headers;
use crate::names::short;
use crate::publisher::AmqpPublisher;
use crate::topology::Topology;

/// Consumes the work queue of a [`Topology`] with manual acks.
///
/// Built with [`AmqpSource::builder`]:
///
/// ```no_run
/// use consumer_amqp::{AmqpSource, Topology};
/// # async fn demo() -> Result<(), consumer_amqp::Error> {
/// let source = AmqpSource::builder("amqp://guest:guest@127.0.0.1:5672/%2f", Topology::new("orders")?)
///     .with_prefetch(64)
///     .connect()
///     .await?;
/// # drop(source);
/// # Ok(())
/// # }
/// ```
///
/// * **In-flight bound**: `basic.qos` with [`with_prefetch`](AmqpSourceBuilder::with_prefetch)
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
///   [`headers`]).
/// * **Reconnects**: when the connection or channel drops, `recv` returns a
///   retriable error (the runtime backs off and calls again), and the next
///   call reconnects, declares the topology again and resumes consuming.
///   RabbitMQ redelivers every delivery that was not acked on the lost
///   channel; dedup makes that harmless.
/// * **A crashed queue** (RabbitMQ: `NOT_FOUND … has crashed and failed to
///   restart`) is reported once, in an ERROR line and the
///   `consumer.queue.crashed` gauge, and tried again with backoff (1 s up to
///   30 s) inside `recv`, until an operator restarted its node or deleted it
///   (the source then declares it anew).
pub struct AmqpSource {
    options: SourceOptions,
    topology: Arc<Topology>,
    session: Option<Session>,
    publisher: AmqpPublisher,
    metrics: AmqpStats,
    /// Set while RabbitMQ reports a queue of the topology crashed.
    crashed: Option<Crashed>,
}

struct Session {
    connection: Connection,
    channel: Channel,
    consumer: Consumer,
    /// How many delay buckets were declared on this session.
    delay_tiers: u32,
}

impl std::fmt::Debug for AmqpSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpSource")
            .field("queue", &self.topology.queue())
            .field("prefetch", &self.options.prefetch)
            .field("connected", &self.session.is_some())
            .finish_non_exhaustive()
    }
}

impl AmqpSource {
    /// A builder for a source consuming `topology` on the broker at
    /// `endpoint`: a URI (`amqp://user:pass@host:port/vhost`, `amqps://`
    /// for TLS), or an [`AmqpEndpoint`](crate::AmqpEndpoint) with
    /// credentials and TLS settings; nothing is contacted until
    /// [`connect`](AmqpSourceBuilder::connect).
    pub fn builder(
        endpoint: impl Into<crate::AmqpEndpoint>,
        topology: Topology,
    ) -> AmqpSourceBuilder {
        AmqpSourceBuilder {
            options: SourceOptions::new(endpoint.into(), 256),
            topology,
        }
    }

    /// The source, unconnected: `recv` connects, and reconnects after a
    /// loss, on its own.
    fn from_builder(builder: AmqpSourceBuilder) -> Result<Self> {
        let AmqpSourceBuilder { options, topology } = builder;
        topology.validate()?;
        let publisher = options.settle_publisher(topology.queue());
        let topology = Arc::new(topology);
        Ok(Self {
            metrics: AmqpStats::new(Arc::clone(&topology), publisher.clone()),
            options,
            topology,
            session: None,
            publisher,
            crashed: None,
        })
    }

    /// Opens a session; a crashed queue is noted, not returned.
    async fn start(&mut self) -> Result<()> {
        match self.open().await {
            Ok(session) => {
                self.session = Some(session);
                if let Some(c) = self.crashed.take() {
                    self.metrics.inner.recovered(&c, self.topology.queue());
                }
                self.metrics.inner.report_consuming(self.topology.queue());
                Ok(())
            }
            Err(Error::QueueCrashed { queue, reply }) => {
                let wait = self
                    .crashed
                    .get_or_insert_with(Crashed::try_now)
                    .failed(&queue);
                self.metrics.inner.report_crashed(&queue, &reply, wait);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// The topology this source consumes.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Counters and queue depths; clone it before handing the source to the
    /// consumer.
    pub fn stats(&self) -> AmqpStats {
        self.metrics.clone()
    }

    async fn open(&self) -> Result<Session> {
        let connection = self
            .topology
            .answered(
                "the connection to",
                &self.options.endpoint.address(),
                self.options
                    .endpoint
                    .connect(format!("consumer {}", self.topology.queue())),
            )
            .await??;
        let channel = connection
            .create_channel()
            .await
            .map_err(Error::amqp("channel open"))?;
        let delay_tiers = self.topology.delays().tiers();
        self.topology.declare(&channel).await?;
        channel
            .basic_qos(self.options.prefetch, BasicQosOptions::default())
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
            .map_err(|source| match crashed_reply(&source) {
                Some(reply) => Error::QueueCrashed {
                    queue: self.topology.queue().to_owned(),
                    reply,
                },
                None => Error::Amqp {
                    context: "basic.consume",
                    source,
                },
            })?;
        tracing::info!(target: "consumer::amqp", queue = %self.topology.queue(), prefetch = self.options.prefetch, "consuming");
        Ok(Session {
            connection,
            channel,
            consumer,
            delay_tiers,
        })
    }

    /// Declares the delay buckets sized since the session was opened (a
    /// handler's retry policy, told before the first delivery).
    async fn declare_new_delays(&mut self) -> Result<()> {
        let Some(session) = self.session.as_mut() else {
            return Ok(());
        };
        if session.delay_tiers < self.topology.delays().tiers() {
            session.delay_tiers = self
                .topology
                .declare_delays(&session.channel, session.delay_tiers)
                .await?;
        }
        Ok(())
    }

    async fn drop_session(&mut self, reason: &str) {
        if let Some(s) = self.session.take() {
            self.metrics.inner.observer.emit(Happened::Reconnecting {
                queue: self.topology.queue(),
                reason,
            });
            crate::connection::let_go(&s.connection, "reconnecting").await;
        }
    }
}

impl Source for AmqpSource {
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
        Some(crate::asyncapi::source_channels(
            &self.topology,
            self.publisher.attribute_prefix(),
        ))
    }

    fn gauges(&self) -> Option<Arc<dyn consumer_backend::SourceGauges>> {
        Some(gauges::AmqpGauges::start(
            Arc::clone(&self.metrics.inner),
            self.options.depth_interval,
        ))
    }

    fn check_redelivery(&self, longest_delay: Duration) -> std::result::Result<(), String> {
        self.topology
            .delays()
            .check(longest_delay, self.topology.queue())
    }

    /// Sizes the delay queues to the longest delay of the handlers that
    /// retry through the broker; they are declared before the next
    /// delivery is taken.
    fn accept_retry_policy(
        &mut self,
        policy: &consumer_backend::RetryPolicy,
    ) -> std::result::Result<(), String> {
        redelivers(policy).map_or(Ok(()), |longest| self.topology.size_delays_for(longest))
    }

    async fn recv(
        &mut self,
    ) -> Result<Option<(Arc<Envelope>, AmqpAcker)>, consumer_backend::Error> {
        while self.session.is_none() {
            if let Some(c) = &self.crashed {
                tokio::time::sleep_until(c.retry_at()).await;
            }
            self.start().await?;
        }
        if let Err(e) = self.declare_new_delays().await {
            let reason = e.to_string();
            self.drop_session(&reason).await;
            return Err(e.into());
        }
        let Some(session) = self.session.as_mut() else {
            return Err(Error::ChannelClosed.into());
        };
        match session.consumer.next().await {
            Some(Ok(delivery)) => {
                self.metrics.inner.observer.emit(Happened::Received {
                    count: 1,
                    redelivered: delivery.redelivered,
                });
                let lapin::message::Delivery { data, .. } = &delivery;
                let payload = Bytes::copy_from_slice(data);
                let envelope = Arc::new(headers::to_envelope_within(
                    self.options.max_body,
                    self.topology.queue(),
                    &delivery,
                    payload,
                ));
                let acker = AmqpAcker::new(
                    delivery.acker,
                    self.publisher.clone(),
                    Arc::clone(&self.topology),
                    Arc::clone(&self.metrics.inner),
                );
                Ok(Some((envelope, acker)))
            }
            Some(Err(e)) => {
                // The client's own words (a reset, a missed heartbeat) are
                // what the operator needs in the log line.
                let reason = format!("consuming failed: {e}");
                let err = Error::Amqp {
                    context: "consume",
                    source: e,
                };
                self.drop_session(&reason).await;
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

/// The longest delay of `policy` when it retries through the broker.
fn redelivers(policy: &consumer_backend::RetryPolicy) -> Option<Duration> {
    (policy.mode() == consumer_backend::RetryMode::Redeliver && policy.max_attempts() > 1)
        .then(|| policy.longest_delay())
}
