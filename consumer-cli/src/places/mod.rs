//! The places dead letters live, behind one interface: the store's
//! dead-letter table ([`table`]), RabbitMQ dead-letter queues
//! ([`rabbitmq`]), Kafka dead-letter topics, SQS dead-letter queues and
//! Kinesis dead-letter streams.
//!
//! A [`Letters`] reads a *snapshot*: the letters present when it was
//! taken, held until [`Letters::release`]; it removes a held letter only
//! when told to, and puts every other one back as it was.

#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "kinesis")]
pub mod kinesis;
#[cfg(feature = "amqp")]
pub mod rabbitmq;
#[cfg(feature = "sqs")]
pub mod sqs;
pub mod table;

use crate::args::{PlaceArgs, Services};
use crate::error::{Error, Result};
use crate::letter::Letter;

/// A letter read from a place, held until the place is released.
#[derive(Debug)]
pub struct Held {
    /// The letter.
    pub letter: Letter,
    /// The place's handle on it: the table's row id, the channel's
    /// delivery tag.
    handle: u64,
}

/// A snapshot: the letters, and how many messages in the place are not
/// dead letters the framework wrote (left untouched).
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Letters in the place's order (oldest first).
    pub letters: Vec<Held>,
    /// Messages without the `x-dlq-*` context (RabbitMQ's own dead
    /// letters, with `x-death`; records another producer put on a Kinesis
    /// dead-letter stream): never removed nor replayed.
    pub foreign: usize,
    /// Offsets below a Kafka topic's high watermarks that yielded no record
    /// (transaction markers, compaction):
    /// said, so a missing letter is never silent.
    pub unread: u64,
    /// Messages of an SQS FIFO queue the snapshot could not read: SQS hands
    /// out no more of a group while some of its messages are held.
    pub held_back: u64,
}

impl Snapshot {
    /// What the snapshot left out, as a sentence; `None` when nothing was.
    pub fn remarks(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.foreign > 0 {
            parts.push(format!(
                "{} other message(s) carry no x-dlq-* context (not letters the framework wrote, such as RabbitMQ's own dead letters) and are left alone",
                self.foreign
            ));
        }
        if self.unread > 0 {
            parts.push(format!(
                "{} offset(s) below the high watermarks yielded no record (transaction markers, compaction): some letters may not be listed",
                self.unread
            ));
        }
        if self.held_back > 0 {
            parts.push(format!(
                "{} message(s) of the SQS FIFO queue were not read: SQS hands out no more of a group while some of its messages are held; run again once these are removed",
                self.held_back
            ));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

/// One place letters live.
#[derive(Debug)]
pub enum Letters {
    /// The store's `consumer_dead_letters` table.
    Table(table::DeadLetterTable),
    /// A RabbitMQ dead-letter queue.
    #[cfg(feature = "amqp")]
    Queue(Box<rabbitmq::DeadLetterQueue>),
    /// A Kafka dead-letter topic.
    #[cfg(feature = "kafka")]
    Topic(Box<kafka::DeadLetterTopic>),
    /// An SQS dead-letter queue.
    #[cfg(feature = "sqs")]
    Sqs(Box<sqs::DeadLetterQueue>),
    /// A Kinesis dead-letter stream.
    #[cfg(feature = "kinesis")]
    Kinesis(Box<kinesis::DeadLetterStream>),
}

impl Letters {
    /// Opens the place the flags name.
    pub async fn open(services: &Services, place: &PlaceArgs) -> Result<Self> {
        if let Some(stream) = &place.kinesis_stream {
            #[cfg(feature = "kinesis")]
            return Ok(Self::Kinesis(Box::new(
                kinesis::DeadLetterStream::open(services, stream).await?,
            )));
            #[cfg(not(feature = "kinesis"))]
            return Err(Error::Usage(format!(
                "--kinesis-stream {stream} needs the `kinesis` feature: build consumer-cli with it"
            )));
        }
        if let Some(queue) = &place.sqs_queue {
            #[cfg(feature = "sqs")]
            return Ok(Self::Sqs(Box::new(
                sqs::DeadLetterQueue::open(services, queue).await?,
            )));
            #[cfg(not(feature = "sqs"))]
            return Err(Error::Usage(format!(
                "--sqs-queue {queue} needs the `sqs` feature: build consumer-cli with it"
            )));
        }
        if let Some(topic) = &place.topic {
            #[cfg(feature = "kafka")]
            return Ok(Self::Topic(Box::new(
                kafka::DeadLetterTopic::open(services, topic).await?,
            )));
            #[cfg(not(feature = "kafka"))]
            return Err(Error::Usage(format!(
                "--topic {topic} needs the `kafka` feature: build consumer-cli with it"
            )));
        }
        match &place.queue {
            None => Ok(Self::Table(table::DeadLetterTable::open(services).await?)),
            #[cfg(feature = "amqp")]
            Some(queue) => Ok(Self::Queue(Box::new(
                rabbitmq::DeadLetterQueue::open(services, queue).await?,
            ))),
            #[cfg(not(feature = "amqp"))]
            Some(_) => Err(Error::Usage(
                "--queue needs the `amqp` feature: build consumer-cli with it".into(),
            )),
        }
    }

    /// The place, for messages.
    pub fn describe(&self) -> String {
        match self {
            Self::Table(t) => t.describe(),
            #[cfg(feature = "amqp")]
            Self::Queue(q) => q.describe(),
            #[cfg(feature = "kafka")]
            Self::Topic(t) => t.describe(),
            #[cfg(feature = "sqs")]
            Self::Sqs(q) => q.describe(),
            #[cfg(feature = "kinesis")]
            Self::Kinesis(s) => s.describe(),
        }
    }

    /// Reads every letter present now and holds them.
    pub async fn snapshot(&mut self) -> Result<Snapshot> {
        match self {
            Self::Table(t) => t.snapshot().await,
            #[cfg(feature = "amqp")]
            Self::Queue(q) => q.snapshot().await,
            #[cfg(feature = "kafka")]
            Self::Topic(t) => t.snapshot().await,
            #[cfg(feature = "sqs")]
            Self::Sqs(q) => q.snapshot().await,
            #[cfg(feature = "kinesis")]
            Self::Kinesis(s) => s.snapshot().await,
        }
    }

    /// Whether letters can be removed one by one (not from a Kafka topic
    /// nor a Kinesis stream, logs whose retention deletes records).
    pub fn removes_letters(&self) -> bool {
        match self {
            #[cfg(feature = "kafka")]
            Self::Topic(_) => false,
            #[cfg(feature = "kinesis")]
            Self::Kinesis(_) => false,
            _ => true,
        }
    }

    /// Whether the place is a Kafka topic (replays need `--to-topic`).
    pub fn is_kafka(&self) -> bool {
        match self {
            #[cfg(feature = "kafka")]
            Self::Topic(_) => true,
            _ => false,
        }
    }

    /// Whether the place is an SQS queue (replays go to SQS queues).
    #[cfg(feature = "sqs")]
    pub fn is_sqs(&self) -> bool {
        match self {
            #[cfg(feature = "sqs")]
            Self::Sqs(_) => true,
            _ => false,
        }
    }

    /// Removes a held letter from the place for good; on a Kafka topic or
    /// a Kinesis stream, where records cannot be deleted, it stays (the
    /// replay journal keeps a rerun from sending it again).
    pub async fn remove(&mut self, held: &Held) -> Result<()> {
        match self {
            Self::Table(t) => t.remove(held.handle).await,
            #[cfg(feature = "amqp")]
            Self::Queue(q) => q.remove(held.handle).await,
            #[cfg(feature = "kafka")]
            Self::Topic(_) => Ok(()),
            #[cfg(feature = "sqs")]
            Self::Sqs(q) => q.remove(held.handle).await,
            #[cfg(feature = "kinesis")]
            Self::Kinesis(_) => Ok(()),
        }
    }

    /// Adds a letter (import).
    pub async fn append(&mut self, letter: &Letter) -> Result<()> {
        match self {
            Self::Table(t) => t.append(letter).await,
            #[cfg(feature = "amqp")]
            Self::Queue(q) => q.append(letter).await,
            #[cfg(feature = "kafka")]
            Self::Topic(t) => t.append(letter).await,
            #[cfg(feature = "sqs")]
            Self::Sqs(q) => q.append(letter).await,
            #[cfg(feature = "kinesis")]
            Self::Kinesis(s) => s.append(letter).await,
        }
    }

    /// Puts back every held letter not removed, in its original order.
    pub async fn release(self) -> Result<()> {
        match self {
            Self::Table(_) => Ok(()),
            #[cfg(feature = "kafka")]
            Self::Topic(_) => Ok(()),
            #[cfg(feature = "kinesis")]
            Self::Kinesis(_) => Ok(()),
            #[cfg(feature = "amqp")]
            Self::Queue(q) => (*q).release().await,
            #[cfg(feature = "sqs")]
            Self::Sqs(q) => (*q).release().await,
        }
    }

    /// The letter with `id`, from a snapshot; every letter is released.
    pub async fn find(mut self, id: &str) -> Result<Letter> {
        let snapshot = self.snapshot().await?;
        let place = self.describe();
        let found = snapshot
            .letters
            .into_iter()
            .find(|h| h.letter.id == id)
            .map(|h| h.letter);
        self.release().await?;
        found.ok_or_else(|| Error::NoSuchLetter {
            id: id.to_owned(),
            place,
        })
    }
}
