//! Where a replayed letter goes, and the message it goes as.
//!
//! **RabbitMQ**: the work queue the letter was consumed from (its origin's
//! destination), through the default exchange, with a publisher confirm
//! and `mandatory` (a work queue that no longer exists is an error, not a
//! silent drop). Only the consumers of that queue see the copy; on a queue
//! routed to several handlers by event type, the router hands it to the
//! handler of its type, and any other handler's dedup row absorbs it.
//!
//! **Kafka**: a work topic is shared by every consumer group that reads it,
//! so a replay there would run every group again. The per-group route is
//! the failed group's own retry topic (`Topics::with_retry_topic`, e.g.
//! `orders.retry.charge`): its source subscribes to it, no other group
//! does, and a record there without a due time is processed at once.
//! `--to-topic` names it; a letter from a Kafka topic is not replayed
//! without it. (The default `<topic>.retry` is shared by the groups that
//! keep the default: replaying there reaches each of them, and the groups
//! that had processed the message absorb it by their dedup rows.)
//!
//! **SQS**: letters read from an SQS dead-letter queue go back to the queue
//! they were consumed from (their origin), with `SendMessageBatch`, their
//! key as the FIFO group and their id as the deduplication id: only that
//! queue's consumers see the copy.

#[cfg(feature = "amqp")]
use consumer_amqp::AmqpPublisher;
use consumer_core::Message;
use consumer_core::envelope::{format_time, names};
use time::OffsetDateTime;

use crate::args::Services;
use crate::error::{Error, Result};
use crate::letter::Letter;

/// The header a replayed copy carries: the id of the letter it replays.
pub const REPLAY_OF: &str = "x-replay-of";
/// When the copy was sent, RFC 3339.
pub const REPLAYED_AT: &str = "x-replayed-at";

/// The message a replay sends for `letter`: the original headers, key and
/// payload, the attempt count reset ([`consumer_core::DeadLetter::replay`]),
/// the original id pinned in `ce_id` (a message that had none got an id
/// hashed from its content and headers, which the replay headers would
/// change), and [`REPLAY_OF`] / [`REPLAYED_AT`].
pub fn replay_message(letter: &Letter) -> Message {
    let mut message = letter.letter.replay();
    if message.headers.get_bytes(names::ID).is_none() {
        message
            .headers
            .insert(names::ID, letter.letter.message_id.as_str());
    }
    message.headers.insert(REPLAY_OF, letter.id.as_str());
    message
        .headers
        .insert(REPLAYED_AT, format_time(OffsetDateTime::now_utc()));
    message
}

/// Sends replayed letters to the handlers' work queues on RabbitMQ, or to
/// one Kafka retry topic.
#[derive(Debug)]
pub struct Route {
    #[cfg(feature = "amqp")]
    endpoint: consumer_amqp::AmqpEndpoint,
    #[cfg(feature = "amqp")]
    publisher: AmqpPublisher,
    #[cfg(feature = "kafka")]
    kafka: Option<(String, consumer_kafka::KafkaPublisher)>,
    #[cfg(feature = "sqs")]
    sqs: Option<consumer_sqs::SqsPublisher>,
}

impl Route {
    /// A route on the RabbitMQ the flags name (connected on first send), or
    /// to Kafka topic `to_topic`.
    pub async fn new(services: &Services, to_topic: Option<&str>) -> Result<Self> {
        #[cfg(feature = "kafka")]
        let kafka = match to_topic {
            Some(topic) => {
                consumer_kafka::validate_topic(topic)
                    .map_err(|e| Error::Usage(format!("--to-topic: {e}")))?;
                Some((
                    topic.to_owned(),
                    crate::places::kafka::kafka_publisher(services).await?,
                ))
            }
            None => None,
        };
        #[cfg(not(feature = "kafka"))]
        if to_topic.is_some() {
            return Err(Error::Usage(
                "--to-topic needs the `kafka` feature: build consumer-cli with it".into(),
            ));
        }
        #[cfg(feature = "amqp")]
        let endpoint = crate::security::amqp_endpoint(services)?;
        Ok(Self {
            #[cfg(feature = "amqp")]
            publisher: AmqpPublisher::builder(endpoint.clone())
                .with_connection_name("consumer-cli-replay")
                .build(),
            #[cfg(feature = "amqp")]
            endpoint,
            #[cfg(feature = "kafka")]
            kafka,
            #[cfg(feature = "sqs")]
            sqs: None,
        })
    }

    /// Sends every replay to its letter's origin SQS queue instead (for
    /// letters read from an SQS dead-letter queue).
    #[cfg(feature = "sqs")]
    pub async fn with_sqs(mut self, services: &Services) -> Result<Self> {
        let client = crate::places::sqs::client(services).await;
        self.sqs = Some(crate::places::sqs::sqs_publisher(&client).await?);
        Ok(self)
    }

    /// Where `letter` goes, for messages and the journal.
    pub fn of(&self, letter: &Letter) -> String {
        #[cfg(feature = "sqs")]
        if self.sqs.is_some() {
            return format!("SQS queue {}", letter.letter.origin.channel);
        }
        #[cfg(feature = "kafka")]
        if let Some((topic, _)) = &self.kafka {
            return format!("Kafka topic {topic}");
        }
        format!("queue {}", letter.letter.origin.channel)
    }

    /// Publishes the replay of `letter` and waits for its confirm.
    pub async fn send(&self, letter: &Letter) -> Result<()> {
        #[cfg(feature = "sqs")]
        if let Some(publisher) = &self.sqs {
            use consumer_core::Publisher as _;
            let queue = letter.letter.origin.channel.to_string();
            let out = [consumer_core::Outgoing {
                destination: queue.clone(),
                message: replay_message(letter),
            }];
            for r in publisher.publish(&out).await {
                r.map_err(|e| {
                    Error::Broker(format!(
                        "replaying {} to SQS queue {queue}: {e} (is the consumer of handler {} deployed there?)",
                        letter.id, letter.letter.handler
                    ))
                })?;
            }
            return Ok(());
        }
        #[cfg(feature = "kafka")]
        if let Some((topic, producer)) = &self.kafka {
            use consumer_core::Publisher as _;
            let out = [consumer_core::Outgoing {
                destination: topic.clone(),
                message: replay_message(letter),
            }];
            for r in producer.publish(&out).await {
                r.map_err(|e| {
                    Error::Broker(format!(
                        "replaying {} to Kafka topic {topic}: {e}",
                        letter.id
                    ))
                })?;
            }
            return Ok(());
        }
        self.send_to_work_queue(letter).await
    }

    #[cfg(not(feature = "amqp"))]
    async fn send_to_work_queue(&self, letter: &Letter) -> Result<()> {
        Err(Error::Usage(format!(
            "letter {} goes back to a RabbitMQ work queue, which needs the `amqp` feature (or name a Kafka topic with --to-topic)",
            letter.id
        )))
    }

    #[cfg(feature = "amqp")]
    async fn send_to_work_queue(&self, letter: &Letter) -> Result<()> {
        let queue = &letter.letter.origin.channel;
        consumer_amqp::validate_name("work queue", queue).map_err(|e| {
            Error::Other(format!(
                "letter {} cannot be replayed: its origin is not a RabbitMQ queue ({e})",
                letter.id
            ))
        })?;
        self.publisher
            .republish_to("", queue, &replay_message(letter), None)
            .await
            .map_err(|e| match e {
                consumer_amqp::Error::Amqp {
                    context: "connection",
                    source,
                } => crate::places::rabbitmq::unreachable(&self.endpoint, &source),
                consumer_amqp::Error::Unroutable { .. } => Error::Broker(format!(
                    "work queue {queue} does not exist on {}: is the consumer of handler {} deployed there?",
                    self.endpoint.redacted_uri(),
                    letter.letter.handler
                )),
                e => match crate::security::amqp_refusal(&e, &self.endpoint) {
                    Some(refused) => refused,
                    None => Error::Broker(format!("replaying {} to {queue}: {e}", letter.id)),
                },
            })
    }

    /// Closes the connection.
    pub async fn close(&self) {
        #[cfg(feature = "amqp")]
        self.publisher.close().await;
    }
}
