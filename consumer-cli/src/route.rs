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
//!
//! **Kinesis** (the `kinesis` feature): a letter whose origin is a Kinesis
//! stream (its position is a shard and a sequence number,
//! `consumer_kinesis::source::shard_and_sequence`) goes back to that
//! stream, wherever the letter was read: a Kinesis dead-letter stream, an
//! SQS dead-letter queue a `KinesisSource` sent it to, the dead-letter
//! table. It goes with `PutRecords` through the framework's
//! `KinesisPublisher`, its key as the partition key, so it lands on the
//! shard the key's records are on now and a key's replays keep their
//! order; Kinesis confirms it before it is journaled. A stream is read by
//! every application that consumes it (each its own leases and
//! checkpoints), so every one of them reads the copy: the failed
//! application processes it, and each other application finds its own
//! dedup row for the message (the copy keeps the original `ce_id`) and
//! absorbs it, as long as that row is within its dedup retention.
//! `--to-stream` names another stream instead, one only the failed
//! application reads, when the others must not see the copy at all (their
//! retention is shorter than the letter's age, or a copy costs them more
//! than a dedup lookup).

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

/// Where one letter's replay goes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Destination {
    /// A Kinesis stream: the letter's origin, or `--to-stream`.
    #[cfg(feature = "kinesis")]
    KinesisStream(String),
    /// The letter's origin SQS queue.
    #[cfg(feature = "sqs")]
    SqsQueue(String),
    /// The `--to-topic` Kafka topic.
    #[cfg(feature = "kafka")]
    KafkaTopic(String),
    /// The letter's origin RabbitMQ work queue.
    WorkQueue(String),
}

impl std::fmt::Display for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            #[cfg(feature = "kinesis")]
            Self::KinesisStream(s) => write!(f, "Kinesis stream {s}"),
            #[cfg(feature = "sqs")]
            Self::SqsQueue(q) => write!(f, "SQS queue {q}"),
            #[cfg(feature = "kafka")]
            Self::KafkaTopic(t) => write!(f, "Kafka topic {t}"),
            Self::WorkQueue(q) => write!(f, "queue {q}"),
        }
    }
}

/// Whether `letter` was consumed from a Kinesis stream: the position a
/// `KinesisSource` gives its records.
#[cfg(feature = "kinesis")]
fn from_kinesis(letter: &Letter) -> bool {
    consumer_kinesis::source::shard_and_sequence(letter.letter.origin.position.as_str()).is_some()
}

/// The replays of letters that came from a Kinesis stream.
#[cfg(feature = "kinesis")]
#[derive(Debug)]
struct KinesisRoute {
    services: Services,
    /// `--to-stream`.
    to_stream: Option<String>,
    /// Made on the first replay to Kinesis (the AWS SDK's configuration is
    /// read only then).
    publisher: tokio::sync::OnceCell<consumer_kinesis::KinesisPublisher>,
}

/// Sends replayed letters to the handlers' work queues on RabbitMQ, to
/// one Kafka retry topic, to their origin SQS queues, or to Kinesis
/// streams.
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
    #[cfg(feature = "kinesis")]
    kinesis: KinesisRoute,
}

impl Route {
    /// A route on the RabbitMQ the flags name (connected on first send), or
    /// to Kafka topic `to_topic`; letters from a Kinesis stream go to it,
    /// or to `to_stream`.
    pub async fn new(
        services: &Services,
        to_topic: Option<&str>,
        to_stream: Option<&str>,
    ) -> Result<Self> {
        #[cfg(feature = "kinesis")]
        let kinesis = KinesisRoute {
            services: services.clone(),
            to_stream: to_stream
                .map(|s| {
                    crate::places::kinesis::stream_name(s, "--to-stream").map(|s| s.to_string())
                })
                .transpose()?,
            publisher: tokio::sync::OnceCell::new(),
        };
        #[cfg(not(feature = "kinesis"))]
        if to_stream.is_some() {
            return Err(Error::Usage(
                "--to-stream needs the `kinesis` feature: build consumer-cli with it".into(),
            ));
        }
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
            #[cfg(feature = "kinesis")]
            kinesis,
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

    /// Where `letter` goes: by its origin's system first (a letter from a
    /// Kinesis stream goes to Kinesis wherever it was read), then by the
    /// place it was read from.
    fn destination(&self, letter: &Letter) -> Destination {
        let origin = letter.letter.origin.channel.to_string();
        #[cfg(feature = "kinesis")]
        if from_kinesis(letter) {
            return Destination::KinesisStream(self.kinesis.to_stream.clone().unwrap_or(origin));
        }
        #[cfg(feature = "sqs")]
        if self.sqs.is_some() {
            return Destination::SqsQueue(origin);
        }
        #[cfg(feature = "kafka")]
        if let Some((topic, _)) = &self.kafka {
            return Destination::KafkaTopic(topic.clone());
        }
        Destination::WorkQueue(origin)
    }

    /// Where `letter` goes, for messages and the journal.
    pub fn of(&self, letter: &Letter) -> String {
        self.destination(letter).to_string()
    }

    /// Publishes the replay of `letter` and waits for its confirm.
    pub async fn send(&self, letter: &Letter) -> Result<()> {
        match self.destination(letter) {
            #[cfg(feature = "kinesis")]
            Destination::KinesisStream(stream) => self.send_to_stream(letter, stream).await,
            #[cfg(feature = "sqs")]
            Destination::SqsQueue(queue) => self.send_to_sqs(letter, queue).await,
            #[cfg(feature = "kafka")]
            Destination::KafkaTopic(topic) => self.send_to_topic(letter, topic).await,
            Destination::WorkQueue(_) => self.send_to_work_queue(letter).await,
        }
    }

    #[cfg(feature = "kinesis")]
    async fn send_to_stream(&self, letter: &Letter, stream: String) -> Result<()> {
        use consumer_core::Publisher as _;
        let publisher = self
            .kinesis
            .publisher
            .get_or_init(|| async {
                let client = crate::places::kinesis::client(&self.kinesis.services).await;
                crate::places::kinesis::kinesis_publisher(&client)
            })
            .await;
        let out = [consumer_core::Outgoing {
            destination: stream.clone(),
            message: replay_message(letter),
        }];
        for r in publisher.publish(&out).await {
            r.map_err(|e| {
                Error::Broker(format!(
                    "replaying {} to Kinesis stream {stream}: {e} (is the consumer of handler {} reading it?)",
                    letter.id, letter.letter.handler
                ))
            })?;
        }
        Ok(())
    }

    #[cfg(feature = "sqs")]
    async fn send_to_sqs(&self, letter: &Letter, queue: String) -> Result<()> {
        use consumer_core::Publisher as _;
        let Some(publisher) = &self.sqs else {
            return Err(Error::Other("no SQS publisher".into()));
        };
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
        Ok(())
    }

    #[cfg(feature = "kafka")]
    async fn send_to_topic(&self, letter: &Letter, topic: String) -> Result<()> {
        use consumer_core::Publisher as _;
        let Some((_, producer)) = &self.kafka else {
            return Err(Error::Other("no Kafka producer".into()));
        };
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
        Ok(())
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

#[cfg(all(test, feature = "kinesis"))]
mod tests {
    use consumer_core::envelope::Origin;
    use consumer_core::{DeadLetter, DeadLetterKind, Headers};
    use time::OffsetDateTime;

    use super::*;

    fn services() -> Services {
        Services {
            database_url: "postgres://127.0.0.1:1/none".into(),
            schema: None,
            amqp_url: "amqp://127.0.0.1:1/%2f".into(),
            kafka_brokers: "127.0.0.1:1".into(),
            sqs_endpoint: None,
            kinesis_endpoint: Some("http://127.0.0.1:1".into()),
            security: Default::default(),
        }
    }

    fn letter(position: &str) -> Letter {
        let now = OffsetDateTime::now_utc();
        Letter::new(DeadLetter {
            kind: DeadLetterKind::Terminal,
            error: "boom".into(),
            causes: Vec::new(),
            attempts: 1,
            first_failure: now,
            last_failure: now,
            handler: "book".into(),
            message_id: "m-a".into(),
            key: Some("a".into()),
            origin: Origin {
                channel: String::from("orders").into(),
                position: position.to_owned().into(),
                ..Origin::default()
            },
            original_headers: Headers::default(),
            payload: bytes::Bytes::new(),
            payload_omitted: None,
        })
    }

    #[tokio::test]
    async fn a_letter_from_a_kinesis_stream_goes_back_to_a_stream_by_its_origin() {
        let from_stream = letter("shardId-000000000000/49590338271490256608559692538361");
        let from_queue = letter("17");
        let route = Route::new(&services(), None, None).await.expect("a route");
        assert_eq!(route.of(&from_stream), "Kinesis stream orders");
        assert_eq!(route.of(&from_queue), "queue orders");
        let to = Route::new(&services(), None, Some("orders-billing"))
            .await
            .expect("a route");
        assert_eq!(to.of(&from_stream), "Kinesis stream orders-billing");
        assert_eq!(to.of(&from_queue), "queue orders");
        assert!(matches!(
            Route::new(&services(), None, Some("no spaces")).await,
            Err(Error::Usage(_))
        ));
    }
}
