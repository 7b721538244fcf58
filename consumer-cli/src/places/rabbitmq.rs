//! A RabbitMQ dead-letter queue (`<queue>.dlq` by default).
//!
//! **Reading neither loses nor reorders letters.** A snapshot asks the
//! queue how many messages it holds (a passive `queue.declare`), then takes
//! exactly that many with `basic.get` *without* acknowledging them, all on
//! one channel. Unacknowledged, they stay RabbitMQ's: if the tool dies, the
//! connection drops and RabbitMQ puts them back. [`DeadLetterQueue::release`]
//! closes the channel, and RabbitMQ requeues every unacknowledged message,
//! at its original position in a classic queue, so the queue reads as it
//! did before (the `redelivered` flag is set on them, and a quorum queue
//! counts the return in `x-delivery-count`). Only a letter the tool removes
//! (a purge, a replay whose publish was confirmed) is acknowledged.
//! Letters that arrive after the count was taken are behind the snapshot
//! and never read: a replay sends only what was there when it started.

use consumer_amqp::headers::to_envelope;
use consumer_amqp::{AmqpEndpoint, AmqpPublisher};
use consumer_core::{DeadLetter, Message};
use lapin::options::{BasicAckOptions, BasicGetOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection};

use super::{Held, Snapshot};
use crate::args::Services;
use crate::error::{Error, Result};
use crate::letter::Letter;

/// One dead-letter queue, on a connection of its own.
#[derive(Debug)]
pub struct DeadLetterQueue {
    endpoint: AmqpEndpoint,
    queue: String,
    connection: Connection,
    channel: Option<Channel>,
    publisher: Option<AmqpPublisher>,
}

impl DeadLetterQueue {
    /// Connects and checks that `queue` exists.
    pub async fn open(services: &Services, queue: &str) -> Result<Self> {
        consumer_amqp::validate_name("queue", queue).map_err(|e| Error::Usage(e.to_string()))?;
        let endpoint = crate::security::amqp_endpoint(services)?;
        let connection = endpoint.connect("consumer-cli").await.map_err(|e| {
            crate::security::amqp_refusal(&e, &endpoint)
                .unwrap_or_else(|| unreachable(&endpoint, &e))
        })?;
        let this = Self {
            endpoint,
            queue: queue.to_owned(),
            connection,
            channel: None,
            publisher: None,
        };
        this.depth().await?;
        Ok(this)
    }

    /// `RabbitMQ queue x`.
    pub fn describe(&self) -> String {
        format!("RabbitMQ queue {}", self.queue)
    }

    /// Messages in the queue now (a passive declare on a channel of its own).
    async fn depth(&self) -> Result<u32> {
        let channel = self.new_channel().await?;
        let declared = channel
            .queue_declare(
                self.queue.as_str().into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await;
        let _ = channel.close(200, "depth read".into()).await;
        match declared {
            Ok(q) => Ok(q.message_count()),
            Err(e) if e.is_amqp_soft_error() && e.to_string().contains("NOT_FOUND") => {
                Err(Error::NoSuchQueue {
                    queue: self.queue.clone(),
                    address: self.endpoint.redacted_uri(),
                })
            }
            Err(e) => Err(Error::Broker(format!(
                "queue {} cannot be read at {}: {e}",
                self.queue,
                self.endpoint.redacted_uri()
            ))),
        }
    }

    async fn new_channel(&self) -> Result<Channel> {
        self.connection
            .create_channel()
            .await
            .map_err(|e| Error::Broker(format!("channel open: {e}")))
    }

    /// Takes the letters present now, unacknowledged; see the module docs.
    pub async fn snapshot(&mut self) -> Result<Snapshot> {
        let depth = self.depth().await?;
        let channel = match &self.channel {
            Some(c) => c.clone(),
            None => {
                let c = self.new_channel().await?;
                self.channel = Some(c.clone());
                c
            }
        };
        let mut snapshot = Snapshot::default();
        for _ in 0..depth {
            let got = channel
                .basic_get(
                    self.queue.as_str().into(),
                    BasicGetOptions { no_ack: false },
                )
                .await
                .map_err(|e| Error::Broker(format!("basic.get on {}: {e}", self.queue)))?;
            let Some(got) = got else { break };
            let delivery = got.delivery;
            let envelope = to_envelope(&self.queue, &delivery, delivery.data.clone().into());
            let message = Message {
                key: envelope.key,
                headers: envelope.headers,
                payload: envelope.payload,
            };
            match DeadLetter::from_message(&message) {
                Some(dl) => snapshot.letters.push(Held {
                    letter: Letter::new(dl),
                    handle: delivery.delivery_tag,
                }),
                None => snapshot.foreign += 1,
            }
        }
        Ok(snapshot)
    }

    /// Acknowledges the letter: RabbitMQ deletes it.
    pub async fn remove(&self, delivery_tag: u64) -> Result<()> {
        let Some(channel) = &self.channel else {
            return Err(Error::Broker("no snapshot is held".into()));
        };
        channel
            .basic_ack(delivery_tag, BasicAckOptions::default())
            .await
            .map_err(|e| Error::Broker(format!("basic.ack on {}: {e}", self.queue)))
    }

    /// Publishes `letter`, context headers and all, straight to the queue
    /// (default exchange), with a publisher confirm.
    pub async fn append(&mut self, letter: &Letter) -> Result<()> {
        let publisher = self.publisher();
        publisher
            .republish_to("", &self.queue, &letter.letter.to_message(), None)
            .await
            .map_err(|e| Error::Broker(format!("publishing to {}: {e}", self.queue)))
    }

    /// The confirming publisher on this URL, opened once.
    pub fn publisher(&mut self) -> AmqpPublisher {
        self.publisher
            .get_or_insert_with(|| {
                AmqpPublisher::builder(self.endpoint.clone())
                    .with_connection_name("consumer-cli-publisher")
                    .build()
            })
            .clone()
    }

    /// Closes the channel (RabbitMQ requeues what was not acknowledged, in
    /// order) and the connections.
    pub async fn release(self) -> Result<()> {
        if let Some(channel) = self.channel {
            channel
                .close(200, "snapshot released".into())
                .await
                .map_err(|e| {
                    Error::Broker(format!("closing the channel on {}: {e}", self.queue))
                })?;
        }
        if let Some(publisher) = self.publisher {
            publisher.close().await;
        }
        let _ = self.connection.close(200, "done".into()).await;
        Ok(())
    }
}

/// RabbitMQ did not answer at `endpoint`.
pub fn unreachable(endpoint: &AmqpEndpoint, e: &dyn std::fmt::Display) -> Error {
    Error::Unreachable {
        service: "RabbitMQ",
        address: endpoint.redacted_uri(),
        reason: e.to_string(),
        hint: "--amqp-url or AMQP_URL",
    }
}
