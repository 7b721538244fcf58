//! Publishing with publisher confirms: the outbox relay's publisher and the
//! channel the settle glue sends retry copies and dead letters on.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use consumer_backend::{Message, Outgoing, Publisher};
use consumer_backend::{SendTarget, Sends};
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::{Channel, Confirmation, Connection};
use tokio::sync::Mutex;

use crate::connection::AmqpEndpoint;
use crate::error::{Error, Result};
use crate::headers::{self, AttributePrefix};
use crate::names::short;
use crate::partition_route::PartitionRoutes;

/// Publishes with publisher confirms, persistent delivery mode and
/// `mandatory`.
///
/// * **Destination** ([`Outgoing::destination`]): `exchange` publishes to
///   that exchange with the message's key as routing key (empty without
///   one); `exchange/routing-key` sets the routing key; `/queue` publishes
///   through the default exchange straight to `queue`. The key also travels
///   as the `ce_partitionkey` header, which consumers read first.
/// * **Confirms**: a batch is published without waiting (up to
///   [`with_max_unconfirmed`](AmqpPublisherBuilder::with_max_unconfirmed) messages in flight
///   at once), then every confirm is awaited; results come back in order.
///   One channel carries the batch, so messages keep their order.
/// * **Unroutable** messages (`basic.return` of a `mandatory` publish) are
///   [`Error::Unroutable`], not retriable; a `basic.nack` is
///   [`Error::Nacked`], retriable; a lost connection fails the messages not
///   yet confirmed as retriable, and the next publish reconnects.
/// * Every message is a valid CloudEvent, or does not claim to be one:
///   a message with a `ce_type` and no `ce_source` gets the publisher's
///   [source](AmqpPublisherBuilder::with_source), one with no `ce_id` a UUIDv7, and
///   `ce_specversion: 1.0`; a message with no type loses any
///   `ce_specversion` ([`cloudevent::complete`](consumer_backend::complete_cloudevent)).
///   Retry copies and dead letters ([`publish_to`](Self::publish_to)) are
///   sent as they were received.
/// * Headers map as the [`headers`] module says, the
///   attributes named by the [prefix](AmqpPublisherBuilder::with_attribute_prefix).
///
/// Clones share one connection and channel.
#[derive(Clone, Debug)]
pub struct AmqpPublisher {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    endpoint: AmqpEndpoint,
    name: String,
    max_unconfirmed: usize,
    max_message_bytes: usize,
    source: String,
    prefix: AttributePrefix,
    partitions: Arc<PartitionRoutes>,
    state: Mutex<Option<(Connection, Channel)>>,
}

/// RabbitMQ's default `max_message_size` (since 3.8): 128 MiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 128 * 1024 * 1024;

/// Configures an [`AmqpPublisher`]; made by [`AmqpPublisher::builder`],
/// finished by [`connect`](Self::connect).
#[derive(Debug)]
#[must_use = "a builder does nothing until `connect` is awaited"]
pub struct AmqpPublisherBuilder {
    endpoint: AmqpEndpoint,
    name: String,
    max_unconfirmed: usize,
    max_message_bytes: usize,
    source: String,
    prefix: AttributePrefix,
    partitions: PartitionRoutes,
}

impl AmqpPublisherBuilder {
    /// How many messages of a batch may await their confirm at once
    /// (default 1024, at least 1).
    pub fn with_max_unconfirmed(mut self, n: usize) -> Self {
        self.max_unconfirmed = n.max(1);
        self
    }

    /// The largest message (payload and headers) the publisher sends;
    /// larger ones are refused as too large without being sent (RabbitMQ
    /// would close the channel on them). Set it to the broker's
    /// `max_message_size`; default [`DEFAULT_MAX_MESSAGE_BYTES`], RabbitMQ's
    /// own default.
    pub fn with_max_message_bytes(mut self, n: usize) -> Self {
        self.max_message_bytes = n;
        self
    }

    /// The CloudEvents `source` (a URI-reference, e.g. `/orders` or
    /// `urn:acme:orders`) of messages that name none; default
    /// [`DEFAULT_SOURCE`](consumer_backend::DEFAULT_SOURCE).
    pub fn with_source(mut self, source: impl Into<String>) -> Self {
        self.source = source.into();
        self
    }

    /// How the CloudEvents attributes are named in the headers written
    /// (default [`AttributePrefix::CeDash`], what the CloudEvents SDKs read
    /// on RabbitMQ); see [`headers`].
    pub fn with_attribute_prefix(mut self, prefix: AttributePrefix) -> Self {
        self.prefix = prefix;
        self
    }

    /// Sends what is published to `/<name>` (the logical queue of
    /// `topology`) to the partition queue of the message's key, Kafka's
    /// partitioner over the partition count; messages without a key are
    /// spread round-robin. Before the first message for it, the partition
    /// count is checked against the broker and the topology declared: a
    /// mismatch fails the publish with [`Error::PartitionCount`], which is
    /// not retriable. See [`PartitionedTopology`](crate::PartitionedTopology).
    pub fn with_partitions(mut self, topology: crate::PartitionedTopology) -> Self {
        self.partitions = self.partitions.with(topology);
        self
    }

    /// The connection name RabbitMQ shows (default `consumer-publisher`).
    pub fn with_connection_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Opens the connection and its confirm-mode channel now, so that a
    /// broker that cannot be reached shows at start. A connection lost
    /// later fails the messages not yet confirmed (as retriable), and the
    /// next publish reconnects.
    pub async fn connect(self) -> Result<AmqpPublisher> {
        let publisher = self.build();
        publisher.channel().await?;
        Ok(publisher)
    }

    /// The publisher without contacting the broker: the first publish
    /// connects. For a tool that may never publish, or a service described
    /// where no broker runs; one that publishes should
    /// [`connect`](Self::connect).
    pub fn build(self) -> AmqpPublisher {
        AmqpPublisher {
            inner: Arc::new(Inner {
                endpoint: self.endpoint,
                name: self.name,
                max_unconfirmed: self.max_unconfirmed,
                max_message_bytes: self.max_message_bytes,
                source: self.source,
                prefix: self.prefix,
                partitions: Arc::new(self.partitions),
                state: Mutex::new(None),
            }),
        }
    }
}

impl AmqpPublisher {
    /// A builder for a publisher to the broker at `endpoint`: a URI
    /// (`amqp://user:pass@host:port/vhost`, `amqps://` for TLS), or an
    /// [`AmqpEndpoint`] with credentials and TLS
    /// settings.
    pub fn builder(endpoint: impl Into<AmqpEndpoint>) -> AmqpPublisherBuilder {
        AmqpPublisherBuilder {
            endpoint: endpoint.into(),
            name: "consumer-publisher".to_owned(),
            max_unconfirmed: 1024,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            source: consumer_backend::DEFAULT_SOURCE.to_owned(),
            prefix: AttributePrefix::default(),
            partitions: PartitionRoutes::default(),
        }
    }

    /// Refuses `message` when it is over the size limit.
    fn check_size(&self, message: &Message, routing_key: &str) -> Result<()> {
        let headers: usize = message.headers.iter().map(|(n, v)| n.len() + v.len()).sum();
        let size = message.payload.len() + headers;
        if size > self.inner.max_message_bytes {
            return Err(Error::TooLarge {
                size,
                limit: self.inner.max_message_bytes,
                routing_key: routing_key.to_owned(),
            });
        }
        Ok(())
    }

    /// The confirm-mode channel, opening a connection when there is none or
    /// the last one failed.
    pub(crate) async fn channel(&self) -> Result<Channel> {
        let mut state = self.inner.state.lock().await;
        if let Some((conn, channel)) = &*state
            && conn.status().connected()
            && channel.status().connected()
        {
            return Ok(channel.clone());
        }
        if let Some((conn, _)) = state.take() {
            self.let_go(conn, "found closed").await;
        }
        let conn = self.inner.endpoint.connect(self.inner.name.clone()).await?;
        let channel = conn
            .create_channel()
            .await
            .map_err(Error::amqp("channel open"))?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(Error::amqp("confirm.select"))?;
        *state = Some((conn, channel.clone()));
        Ok(channel)
    }

    /// A plain channel of its own on the publishing connection (opened if
    /// needed), for reads such as passive declares.
    pub(crate) async fn side_channel(&self) -> Result<Channel> {
        self.channel().await?;
        let state = self.inner.state.lock().await;
        match &*state {
            Some((conn, _)) => conn
                .create_channel()
                .await
                .map_err(Error::amqp("channel open")),
            None => Err(Error::ChannelClosed),
        }
    }

    /// Closes the connection, after the confirms of everything published.
    pub async fn close(&self) {
        if let Some((conn, _)) = self.inner.state.lock().await.take() {
            let _ = conn.close(200, "publisher closed".into()).await;
        }
    }

    async fn forget_channel(&self) {
        let lost = self.inner.state.lock().await.take();
        if let Some((conn, _)) = lost {
            self.let_go(conn, "a publish or its confirm failed on it")
                .await;
        }
    }

    /// Closes a connection that broke, and says so: the operator's record
    /// of a lost link (the next publish opens another).
    async fn let_go(&self, conn: Connection, why: &'static str) {
        tracing::warn!(target: "consumer::amqp", connection = %self.inner.name, why, "lost the RabbitMQ publishing connection; reconnecting on the next publish");
        crate::connection::let_go(&conn, "reconnecting").await;
    }

    /// Publishes one message to `exchange` with `routing_key` and waits for
    /// its confirm; `expiration` sets the per-message TTL.
    pub async fn publish_to(
        &self,
        exchange: &str,
        routing_key: &str,
        message: &Message,
        expiration: Option<Duration>,
    ) -> Result<()> {
        self.publish_named(
            exchange,
            routing_key,
            message,
            expiration,
            self.inner.prefix,
        )
        .await
    }

    /// [`publish_to`](Self::publish_to) with every header under the name
    /// it has in `message`, whatever this publisher's
    /// [prefix](AmqpPublisherBuilder::with_attribute_prefix): what a retry
    /// copy, a dead letter and a replayed letter are sent with, so that
    /// they keep the names their producer wrote.
    pub async fn republish_to(
        &self,
        exchange: &str,
        routing_key: &str,
        message: &Message,
        expiration: Option<Duration>,
    ) -> Result<()> {
        self.publish_named(
            exchange,
            routing_key,
            message,
            expiration,
            AttributePrefix::CeUnderscore,
        )
        .await
    }

    async fn publish_named(
        &self,
        exchange: &str,
        routing_key: &str,
        message: &Message,
        expiration: Option<Duration>,
        prefix: AttributePrefix,
    ) -> Result<()> {
        self.check_size(message, routing_key)?;
        let channel = self.channel().await?;
        let mut props = headers::to_properties(message, prefix)?;
        if let Some(ttl) = expiration {
            props = props.with_expiration(short(&ttl.as_millis().to_string())?);
        }
        let result = async {
            let confirm = channel
                .basic_publish(
                    short(exchange)?,
                    short(routing_key)?,
                    BasicPublishOptions {
                        mandatory: true,
                        ..BasicPublishOptions::default()
                    },
                    &message.payload,
                    props,
                )
                .await
                .map_err(Error::amqp("basic.publish"))?;
            let confirmation = confirm.await.map_err(Error::amqp("publisher confirm"))?;
            check(confirmation, exchange, routing_key)
        }
        .await;
        if matches!(result, Err(Error::Amqp { .. })) {
            self.forget_channel().await;
        }
        result
    }

    async fn publish_batch(&self, batch: &[Outgoing]) -> Vec<Result<(), Error>> {
        let channel = match self.channel().await {
            Ok(c) => c,
            Err(e) => return batch.iter().map(|_| Err(e.clone())).collect(),
        };
        let mut results: Vec<Result<(), Error>> = Vec::with_capacity(batch.len());
        let mut broken = false;
        for window in batch.chunks(self.inner.max_unconfirmed) {
            let mut pending = Vec::with_capacity(window.len());
            for out in window {
                if broken {
                    pending.push(Err(Error::ChannelClosed));
                    continue;
                }
                let (exchange, routing_key) = route(out);
                let sent = async {
                    self.check_size(&out.message, &routing_key)?;
                    let props = headers::to_properties(&out.message, self.inner.prefix)?;
                    channel
                        .basic_publish(
                            short(exchange)?,
                            short(&routing_key)?,
                            BasicPublishOptions {
                                mandatory: true,
                                ..BasicPublishOptions::default()
                            },
                            &out.message.payload,
                            props,
                        )
                        .await
                        .map_err(Error::amqp("basic.publish"))
                }
                .await;
                if matches!(sent, Err(Error::Amqp { .. })) {
                    broken = true;
                }
                pending.push(sent.map(|c| (c, exchange, routing_key)));
            }
            for p in pending {
                results.push(match p {
                    Err(e) => Err(e),
                    Ok((confirm, exchange, routing_key)) => match confirm.await {
                        Ok(c) => check(c, exchange, &routing_key),
                        Err(e) => {
                            broken = true;
                            Err(Error::Amqp {
                                context: "publisher confirm",
                                source: e,
                            })
                        }
                    },
                });
            }
        }
        if broken {
            self.forget_channel().await;
        }
        results
    }
}

fn route(out: &Outgoing) -> (&str, String) {
    match out.destination.split_once('/') {
        Some((exchange, routing_key)) => (exchange, routing_key.to_owned()),
        None => (
            out.destination.as_str(),
            out.message.key.clone().unwrap_or_default(),
        ),
    }
}

/// A send span's names by the RabbitMQ conventions: `{exchange}:{routing
/// key}` (empty parts left out; `amq.default` when both are), and the span
/// named by the exchange, or by the routing key on the default exchange
/// (a queue's name), never by a key that comes from the message.
fn send_target(out: &Outgoing) -> SendTarget<'_> {
    let (exchange, routing_key) = route(out);
    let name = match (exchange.is_empty(), routing_key.is_empty()) {
        (true, true) => "amq.default".to_owned(),
        (false, true) => exchange.to_owned(),
        (true, false) => routing_key.clone(),
        (false, false) => format!("{exchange}:{routing_key}"),
    };
    let explicit_key = out.destination.contains('/');
    let span_name = if exchange.is_empty() || (explicit_key && !routing_key.is_empty()) {
        name.clone()
    } else {
        exchange.to_owned()
    };
    SendTarget {
        name: Cow::Owned(name),
        span_name: Cow::Owned(span_name),
        routing_key: (!routing_key.is_empty()).then_some(Cow::Owned(routing_key)),
    }
}

fn check(confirmation: Confirmation, exchange: &str, routing_key: &str) -> Result<()> {
    match confirmation {
        Confirmation::Ack(None) | Confirmation::NotRequested => Ok(()),
        Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned)) => {
            Err(Error::Unroutable {
                exchange: exchange.to_owned(),
                routing_key: routing_key.to_owned(),
                reply: returned.reply_text.to_string(),
            })
        }
        Confirmation::Nack(None) => Err(Error::Nacked {
            exchange: exchange.to_owned(),
            routing_key: routing_key.to_owned(),
        }),
    }
}

impl AmqpPublisher {
    /// The prefix of the CloudEvents attributes this publisher writes.
    pub(crate) fn attribute_prefix(&self) -> AttributePrefix {
        self.inner.prefix
    }
}

impl Publisher for AmqpPublisher {
    fn system(&self) -> &'static str {
        "rabbitmq"
    }

    /// See the type's docs for how a destination reads.
    fn channel(&self, destination: &str) -> Option<consumer_backend::ChannelDescription> {
        if let Some(topology) = self.inner.partitions.topology_for(destination) {
            return Some(crate::asyncapi::partitioned_destination_channel(
                topology,
                self.inner.prefix,
            ));
        }
        Some(crate::asyncapi::destination_channel(
            destination,
            self.inner.prefix,
        ))
    }

    async fn publish(&self, batch: &[Outgoing]) -> Vec<Result<(), consumer_backend::Error>> {
        if let Err(e) = self.inner.partitions.prepare(self, batch).await {
            return batch.iter().map(|_| Err(e.clone().into())).collect();
        }
        let batch = self.inner.partitions.route(batch);
        let sends = Sends::start_from(self.system(), &self.inner.source, &batch, send_target);
        let results: Vec<_> = self
            .publish_batch(sends.batch())
            .await
            .into_iter()
            .map(|r| r.map_err(consumer_backend::Error::from))
            .collect();
        sends.finish(&results);
        results
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(destination: &str, key: Option<&str>) -> (String, String, Option<String>) {
        let mut message = Message::raw(&b"{}"[..]);
        message.key = key.map(str::to_owned);
        let out = Outgoing {
            destination: destination.to_owned(),
            message,
        };
        let t = send_target(&out);
        (
            t.name.into_owned(),
            t.span_name.into_owned(),
            t.routing_key.map(Cow::into_owned),
        )
    }

    #[test]
    fn send_spans_name_exchange_and_routing_key_as_the_rabbitmq_conventions_say() {
        // Straight to a queue through the default exchange.
        assert_eq!(
            target("/billing", None),
            ("billing".into(), "billing".into(), Some("billing".into()))
        );
        // An exchange with the message's key: the key is not in the span name.
        assert_eq!(
            target("orders", Some("o-17")),
            ("orders:o-17".into(), "orders".into(), Some("o-17".into()))
        );
        // An exchange and a configured routing key.
        assert_eq!(
            target("orders/eu", Some("o-17")),
            ("orders:eu".into(), "orders:eu".into(), Some("eu".into()))
        );
        assert_eq!(
            target("orders", None),
            ("orders".into(), "orders".into(), None)
        );
        assert_eq!(
            target("/", None),
            ("amq.default".into(), "amq.default".into(), None)
        );
    }
}
