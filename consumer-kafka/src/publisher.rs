//! [`KafkaPublisher`]: the outbox relay's (and anyone's) way to Kafka.

use std::fmt;
use std::time::Duration;

use consumer_backend::{Outgoing, Publisher};
use consumer_backend::{SendTarget, Sends};
use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};

use crate::tracing_context::TracingContext;

use crate::error::Error;
use crate::headers::to_kafka_headers;
use crate::security::{self, KafkaSecurity};

/// Properties set on the publisher's producer unless overridden.
pub const PUBLISHER_DEFAULTS: &[(&str, &str)] = &[
    ("enable.idempotence", "true"),
    ("acks", "all"),
    ("message.timeout.ms", "30000"),
];

/// An idempotent producer as a [`Publisher`].
///
/// * `enable.idempotence=true` (and so `acks=all`): a retried produce
///   cannot duplicate or reorder records within a partition.
/// * [`Outgoing::destination`] is the topic; the message key (the outbox's
///   aggregate id) is the record key, so one aggregate's events share a
///   partition and keep their order.
/// * Headers: the message's, which for outbox events are the CloudEvents
///   binary-mode attributes (`ce_id`, `ce_type`, `ce_source`,
///   `ce_specversion`, `ce_time`, `content-type`, ...) and the W3C
///   `traceparent`/`tracestate` restored from the row.
/// * Every record is a valid CloudEvent, or does not claim to be one:
///   a message with a `ce_type` and no `ce_source` gets the publisher's
///   [source](KafkaPublisherBuilder::with_source), one with no `ce_id` a
///   UUIDv7, and `ce_specversion: 1.0`; a message with no type loses any
///   `ce_specversion` ([`cloudevent::complete`](consumer_backend::complete_cloudevent)).
/// * A batch is enqueued whole (pipelined), and each result is `Ok` only
///   once that record's delivery report succeeded.
///
/// ```no_run
/// # async fn demo() -> Result<(), consumer_kafka::Error> {
/// let publisher = consumer_kafka::KafkaPublisher::builder("127.0.0.1:9092")
///     .with_property("compression.type", "lz4")
///     .connect()
///     .await?;
/// # drop(publisher); Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct KafkaPublisher {
    producer: FutureProducer<TracingContext>,
    source: std::sync::Arc<str>,
}

impl fmt::Debug for KafkaPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaPublisher").finish_non_exhaustive()
    }
}

/// Configures a [`KafkaPublisher`]. Its `Debug` leaves out the values of
/// secret properties (passwords, keys, tokens).
#[derive(Clone)]
#[must_use]
pub struct KafkaPublisherBuilder {
    brokers: String,
    properties: Vec<(String, String)>,
    source: String,
    security: Option<KafkaSecurity>,
}

impl fmt::Debug for KafkaPublisherBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaPublisherBuilder")
            .field("brokers", &self.brokers)
            .field("properties", &security::redacted(&self.properties))
            .field("source", &self.source)
            .field("security", &self.security)
            .finish()
    }
}

impl KafkaPublisherBuilder {
    /// Any librdkafka producer property. `enable.idempotence` can be turned
    /// off here, but then a producer retry may duplicate or reorder records.
    pub fn with_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.push((key.into(), value.into()));
        self
    }

    /// Encrypts and authenticates the producer's link ([`KafkaSecurity`]);
    /// properties set with [`with_property`](Self::with_property) override
    /// its. [`connect`](Self::connect) then checks the link first, as
    /// [`KafkaSourceBuilder::with_security`](crate::KafkaSourceBuilder::with_security)
    /// says.
    pub fn with_security(mut self, security: KafkaSecurity) -> Self {
        self.security = Some(security);
        self
    }

    /// The CloudEvents `source` (a URI-reference, e.g. `/orders` or
    /// `urn:acme:orders`) of messages that name none; default
    /// [`DEFAULT_SOURCE`](consumer_backend::DEFAULT_SOURCE).
    pub fn with_source(mut self, source: impl Into<String>) -> Self {
        self.source = source.into();
        self
    }

    /// Creates the producer. Async like every backend's `connect`;
    /// librdkafka connects in the background, so this returns without
    /// waiting for the brokers, after the security check of
    /// [`with_security`](Self::with_security) when there is one.
    pub async fn connect(self) -> Result<KafkaPublisher, Error> {
        let secured = crate::start_check::before_connect(
            &self.brokers,
            self.security.as_ref(),
            &self.properties,
        )
        .await?;
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.brokers)
            .set_log_level(crate::tracing_context::log_level());
        for (k, v) in PUBLISHER_DEFAULTS {
            c.set(*k, *v);
        }
        for (k, v) in secured.iter().chain(&self.properties) {
            c.set(k, v);
        }
        let producer = c
            .create_with_context(TracingContext::new("publisher"))
            .map_err(|source| Error::Config {
                context: "creating the producer",
                source: security::redact_error(source),
            })?;
        Ok(KafkaPublisher {
            producer,
            source: self.source.into(),
        })
    }
}

impl KafkaPublisher {
    /// A builder with [`PUBLISHER_DEFAULTS`].
    pub fn builder(brokers: impl Into<String>) -> KafkaPublisherBuilder {
        KafkaPublisherBuilder {
            brokers: brokers.into(),
            properties: Vec::new(),
            source: consumer_backend::DEFAULT_SOURCE.to_owned(),
            security: None,
        }
    }

    /// The underlying producer (to flush, or read its metrics).
    pub fn producer(&self) -> &FutureProducer<TracingContext> {
        &self.producer
    }

    /// Enqueues one record; waits (without blocking the thread) while
    /// librdkafka's local queue is full.
    async fn enqueue(&self, out: &Outgoing) -> Result<DeliveryFuture, Error> {
        let headers = to_kafka_headers(&out.message);
        let mut record = FutureRecord::<str, [u8]>::to(&out.destination)
            .payload(&out.message.payload[..])
            .headers(headers);
        if let Some(key) = &out.message.key {
            record = record.key(key.as_str());
        }
        let mut waited = Duration::ZERO;
        loop {
            match self.producer.send_result(record) {
                Ok(delivery) => return Ok(delivery),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r))
                    if waited < Duration::from_secs(30) =>
                {
                    record = r;
                    let step = Duration::from_millis(5);
                    tokio::time::sleep(step).await;
                    waited += step;
                }
                Err((e, _)) => {
                    return Err(Error::kafka(format!("producing to {}", out.destination), e));
                }
            }
        }
    }
}

impl Publisher for KafkaPublisher {
    fn system(&self) -> &'static str {
        "kafka"
    }

    /// The destination is the topic.
    fn channel(&self, destination: &str) -> Option<consumer_backend::ChannelDescription> {
        Some(crate::asyncapi::topic_channel(destination))
    }

    async fn publish(&self, batch: &[Outgoing]) -> Vec<Result<(), consumer_backend::Error>> {
        let sends = Sends::start_from(self.system(), &self.source, batch, |o| SendTarget::of(o));
        let results = self.publish_all(sends.batch()).await;
        sends.finish(&results);
        results
    }
}

impl KafkaPublisher {
    /// Enqueues every record of `batch`, then waits for each report.
    async fn publish_all(&self, batch: &[Outgoing]) -> Vec<Result<(), consumer_backend::Error>> {
        let mut pending = Vec::with_capacity(batch.len());
        for out in batch {
            pending.push(self.enqueue(out).await);
        }
        let mut results = Vec::with_capacity(batch.len());
        for (p, out) in pending.into_iter().zip(batch) {
            results.push(match p {
                Err(e) => Err(e.into()),
                Ok(delivery) => match delivery.await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err((e, _))) => {
                        Err(Error::kafka(format!("producing to {}", out.destination), e).into())
                    }
                    Err(_) => Err(Error::NoDeliveryReport {
                        topic: out.destination.clone(),
                    }
                    .into()),
                },
            });
        }
        results
    }
}
