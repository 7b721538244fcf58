//! A Kafka dead-letter topic (`<topic>.dlq` by default).
//!
//! **Reading changes nothing.** A snapshot takes each partition's low and
//! high watermarks first, assigns the partitions (no group membership, so no
//! rebalance touches a running consumer) from the low watermark, and reads
//! every partition to its end: records at or past the high watermark taken
//! at the start were produced meanwhile and are left out (unless the broker
//! reports watermarks below the records it returns: see [`read_snapshot`]).
//! Offsets are never committed, under a group id of the tool's own.
//!
//! Records cannot be deleted one by one from a topic: a replayed letter
//! stays in it, and the replay journal is what keeps a rerun from sending
//! it again. `purge` refuses on Kafka (topic retention deletes letters).

use std::time::{Duration, Instant};

use consumer_core::{DeadLetter, Message, Outgoing, Publisher};
use consumer_kafka::{KafkaPublisher, KafkaSecurity};
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::KafkaError;
use rdkafka::message::BorrowedMessage;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::{Held, Snapshot};
use crate::args::Services;
use crate::error::{Error, Result};
use crate::letter::Letter;

/// How long a snapshot may take to reach the high watermarks.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Metadata and watermark requests.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// One dead-letter topic.
#[derive(Debug)]
pub struct DeadLetterTopic {
    brokers: String,
    security: Option<KafkaSecurity>,
    topic: String,
    publisher: Option<KafkaPublisher>,
    services: Services,
}

impl DeadLetterTopic {
    /// Checks that the brokers answer (and take the security flags'
    /// certificates and credentials) and that the topic exists.
    pub async fn open(services: &Services, topic: &str) -> Result<Self> {
        consumer_kafka::validate_topic(topic).map_err(|e| Error::Usage(e.to_string()))?;
        let security = checked_security(services).await?;
        let this = Self {
            brokers: services.kafka_brokers.clone(),
            security,
            topic: topic.to_owned(),
            publisher: None,
            services: services.clone(),
        };
        let (brokers, security, topic) = (
            this.brokers.clone(),
            this.security.clone(),
            this.topic.clone(),
        );
        tokio::task::spawn_blocking(move || {
            partitions(&reader(&brokers, security.as_ref())?, &brokers, &topic)
        })
        .await
        .map_err(|e| Error::Other(format!("the Kafka reader stopped: {e}")))??;
        Ok(this)
    }

    /// `Kafka topic x`.
    pub fn describe(&self) -> String {
        format!("Kafka topic {}", self.topic)
    }

    /// Every record below the high watermarks taken now, in partition and
    /// offset order.
    pub async fn snapshot(&self) -> Result<Snapshot> {
        let (brokers, security, topic) = (
            self.brokers.clone(),
            self.security.clone(),
            self.topic.clone(),
        );
        tokio::task::spawn_blocking(move || read_snapshot(&brokers, security.as_ref(), &topic))
            .await
            .map_err(|e| Error::Other(format!("the Kafka reader stopped: {e}")))?
    }

    /// Produces `letter` to the topic, waiting for its acknowledgement.
    pub async fn append(&mut self, letter: &Letter) -> Result<()> {
        let destination = self.topic.clone();
        let publisher = self.publisher().await?;
        let out = [Outgoing {
            destination,
            message: letter.letter.to_message(),
        }];
        for r in publisher.publish(&out).await {
            r.map_err(|e| Error::Broker(format!("producing to Kafka topic {}: {e}", self.topic)))?;
        }
        Ok(())
    }

    async fn publisher(&mut self) -> Result<&KafkaPublisher> {
        if self.publisher.is_none() {
            self.publisher = Some(kafka_publisher(&self.services).await?);
        }
        self.publisher
            .as_ref()
            .ok_or_else(|| Error::Other("no Kafka producer".into()))
    }
}

/// The security flags' settings, checked against the brokers (so that a
/// refused certificate or password is said as such, not as a timeout).
async fn checked_security(services: &Services) -> Result<Option<KafkaSecurity>> {
    let security = crate::security::kafka_security(services)?;
    if let Some(s) = &security {
        s.check(&services.kafka_brokers).await.map_err(|e| {
            crate::security::kafka_refusal(&e, &services.kafka_brokers)
                .unwrap_or_else(|| unreachable(&services.kafka_brokers, &e))
        })?;
    }
    Ok(security)
}

/// A producer on the flags' brokers for replays and imports: idempotent,
/// each record confirmed by every in-sync replica.
pub async fn kafka_publisher(services: &Services) -> Result<KafkaPublisher> {
    let brokers = &services.kafka_brokers;
    let mut builder = KafkaPublisher::builder(brokers);
    if let Some(security) = crate::security::kafka_security(services)? {
        builder = builder.with_security(security);
    }
    builder.connect().await.map_err(|e| {
        crate::security::kafka_refusal(&e, brokers).unwrap_or_else(|| {
            Error::Other(format!("creating a Kafka producer for {brokers}: {e}"))
        })
    })
}

fn reader(brokers: &str, security: Option<&KafkaSecurity>) -> Result<BaseConsumer> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set(
            "group.id",
            format!("consumer-cli-reader-{}", std::process::id()),
        )
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "true");
    if let Some(security) = security {
        security.apply_to(&mut config);
    }
    config
        .create()
        .map_err(|e| Error::Other(format!("creating a Kafka reader for {brokers}: {e}")))
}

fn partitions(consumer: &BaseConsumer, brokers: &str, topic: &str) -> Result<Vec<i32>> {
    let metadata = consumer
        .fetch_metadata(Some(topic), REQUEST_TIMEOUT)
        .map_err(|e| unreachable(brokers, &e))?;
    let Some(t) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Err(Error::NoSuchQueue {
            queue: topic.to_owned(),
            address: brokers.to_owned(),
        });
    };
    if t.error().is_some() || t.partitions().is_empty() {
        return Err(Error::NoSuchQueue {
            queue: topic.to_owned(),
            address: brokers.to_owned(),
        });
    }
    Ok(t.partitions().iter().map(|p| p.id()).collect())
}

/// One partition being read.
struct PartitionRead {
    id: i32,
    /// The high watermark taken at the start: the snapshot ends below it.
    high: i64,
    /// The offset of the last record read.
    last: i64,
    /// Whether the reader reached the partition's end (which lies at or
    /// past `high`).
    at_end: bool,
    /// Records below `high`.
    below: Vec<Option<Held>>,
}

impl PartitionRead {
    fn done(&self) -> bool {
        self.at_end || self.last + 1 >= self.high
    }
}

/// Reads each partition from its low watermark up to the high watermark
/// taken at the start: letters that arrive during the read are left for
/// the next one. Offsets in that range that yield no record (transaction
/// markers, compaction) are counted in [`Snapshot::unread`].
fn read_snapshot(brokers: &str, security: Option<&KafkaSecurity>, topic: &str) -> Result<Snapshot> {
    let consumer = reader(brokers, security)?;
    let (mut parts, expected) = assign_below_high(&consumer, brokers, topic)?;
    if parts.is_empty() {
        return Ok(Snapshot::default());
    }
    read_to_high(&consumer, topic, &mut parts)?;
    let mut snapshot = Snapshot::default();
    let mut read: i64 = 0;
    for part in parts {
        read += part.below.len() as i64;
        for held in part.below {
            match held {
                Some(h) => snapshot.letters.push(h),
                None => snapshot.foreign += 1,
            }
        }
    }
    snapshot.unread = u64::try_from(expected - read).unwrap_or(0);
    Ok(snapshot)
}

/// Takes each partition's watermarks and assigns those holding records
/// from their low watermark; the partitions to read and how many offsets
/// lie below their high watermarks.
fn assign_below_high(
    consumer: &BaseConsumer,
    brokers: &str,
    topic: &str,
) -> Result<(Vec<PartitionRead>, i64)> {
    let mut parts = Vec::new();
    let mut assignment = TopicPartitionList::new();
    let mut expected: i64 = 0;
    for p in partitions(consumer, brokers, topic)? {
        let (low, high) = consumer
            .fetch_watermarks(topic, p, REQUEST_TIMEOUT)
            .map_err(|e| unreachable(brokers, &e))?;
        if high > low {
            assignment
                .add_partition_offset(topic, p, Offset::Offset(low))
                .map_err(|e| Error::Other(format!("assigning {topic}/{p}: {e}")))?;
            expected += high - low;
            parts.push(PartitionRead {
                id: p,
                high,
                last: low - 1,
                at_end: false,
                below: Vec::new(),
            });
        }
    }
    if !parts.is_empty() {
        consumer
            .assign(&assignment)
            .map_err(|e| Error::Other(format!("assigning {topic}: {e}")))?;
    }
    Ok((parts, expected))
}

/// Polls until every partition is read up to its high watermark or its
/// end, within [`READ_TIMEOUT`].
fn read_to_high(consumer: &BaseConsumer, topic: &str, parts: &mut [PartitionRead]) -> Result<()> {
    let deadline = Instant::now() + READ_TIMEOUT;
    while !parts.iter().all(PartitionRead::done) {
        if Instant::now() >= deadline {
            return Err(Error::Broker(format!(
                "Kafka topic {topic} was not read up to its end within {}s",
                READ_TIMEOUT.as_secs()
            )));
        }
        let Some(polled) = consumer.poll(Duration::from_millis(500)) else {
            continue;
        };
        match polled {
            Ok(record) => take(parts, &record),
            Err(KafkaError::PartitionEOF(p)) => {
                if let Some(part) = parts.iter_mut().find(|r| r.id == p) {
                    part.at_end = true;
                }
            }
            Err(e) => return Err(Error::Broker(format!("reading {topic}: {e}"))),
        }
    }
    Ok(())
}

/// Keeps `record` in its partition's read when it lies below the high
/// watermark and past what was read (a record at or past the high
/// watermark ends the partition's read).
fn take(parts: &mut [PartitionRead], record: &BorrowedMessage<'_>) {
    use rdkafka::Message as _;
    let Some(part) = parts.iter_mut().find(|r| r.id == record.partition()) else {
        return;
    };
    if record.offset() <= part.last || record.offset() >= part.high {
        part.at_end |= record.offset() >= part.high;
        return;
    }
    part.last = record.offset();
    let envelope = consumer_kafka::headers::to_envelope(record);
    let message = Message {
        key: envelope.key,
        headers: envelope.headers,
        payload: envelope.payload,
    };
    let held = DeadLetter::from_message(&message).map(|dl| Held {
        letter: Letter::new(dl),
        handle: u64::try_from(record.offset()).unwrap_or(0),
    });
    if record.offset() < part.high {
        part.below.push(held);
    }
}

/// The Kafka brokers did not answer.
pub fn unreachable(brokers: &str, e: &dyn std::fmt::Display) -> Error {
    Error::Unreachable {
        service: "Kafka",
        address: brokers.to_owned(),
        reason: e.to_string(),
        hint: "--kafka-brokers or KAFKA_BROKERS",
    }
}
