//! The Kafka side of a world: a work topic with two partitions, the `book`
//! group's own retry topic (`<topic>.retry.book`, where replays go) and
//! the dead-letter topic, on the Kafka-protocol broker at `KAFKA_BROKERS`
//! (default 127.0.0.1:9092; `scripts/services kafka` starts Apache Kafka there).

use std::time::Duration;

use consumer::envelope::names;
use consumer::kafka::{KafkaPublisher, KafkaSource, Topics};
use consumer::{Consumer, Headers, Message, Outgoing, PgStore, Publisher};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer as _};

use super::{Booking, Running, World, book};

/// The brokers, checked to answer.
pub fn brokers() -> String {
    let brokers = std::env::var("KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".to_owned());
    let first = brokers.split(',').next().unwrap_or(&brokers).to_owned();
    assert!(
        super::takes_connections(&first),
        "no Kafka broker answers at {brokers}: run `scripts/services kafka` (it starts Apache Kafka there) or set KAFKA_BROKERS"
    );
    brokers
}

/// Fresh topics for one test.
pub struct KafkaTopics {
    pub brokers: String,
    pub topics: Topics,
    /// `<topic>.retry.book`: the group's own retry topic.
    pub retry: String,
    pub dlt: String,
    pub group: String,
}

impl KafkaTopics {
    pub async fn create(tag: &str) -> Self {
        let brokers = brokers();
        let topic = format!("cli-{tag}-{}", uuid::Uuid::new_v4().simple());
        let retry = format!("{topic}.retry.book");
        let topics = Topics::new(&topic)
            .expect("topic")
            .with_retry_topic(&retry)
            .expect("retry topic");
        topics.create(&brokers, 2, 1).await.expect("create topics");
        let dlt = topics.dead_letter_topic().to_owned();
        Self {
            brokers,
            group: format!("g-{topic}"),
            topics,
            retry,
            dlt,
        }
    }

    pub fn topic(&self) -> &str {
        self.topics.topic()
    }

    /// A consumer of `book` in the group, on the world's store.
    pub async fn start_consumer(&self, w: &World) -> Running {
        self.start_consumer_with(w, &[]).await
    }

    /// The same, with these properties on its settle producer.
    pub async fn start_consumer_with(&self, w: &World, producer: &[(&str, &str)]) -> Running {
        let mut source = KafkaSource::builder(&self.brokers, &self.group, self.topics.clone());
        for (k, v) in producer {
            source = source.with_producer_property(*k, *v);
        }
        let consumer = Consumer::new(
            source.connect().await.expect("Kafka source"),
            PgStore::new(w.schema.pool.clone()),
            book,
        );
        let stats = consumer.stats();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let join = tokio::spawn(consumer.run_until(async move {
            let _ = stopped.await;
        }));
        Running { stats, stop, join }
    }

    /// Produces bookings to the work topic, message id `m-<id>`, key `<id>`.
    pub async fn publish(&self, ids: &[&str]) {
        let publisher = KafkaPublisher::builder(&self.brokers)
            .connect()
            .await
            .expect("publisher");
        let batch: Vec<Outgoing> = ids
            .iter()
            .map(|id| {
                let mut headers = Headers::new();
                headers.insert(names::ID, format!("m-{id}"));
                Outgoing {
                    destination: self.topic().to_owned(),
                    message: Message {
                        key: Some((*id).to_owned()),
                        headers,
                        payload: serde_json::to_vec(&Booking {
                            id: (*id).to_owned(),
                        })
                        .expect("json")
                        .into(),
                    },
                }
            })
            .collect();
        for r in publisher.publish(&batch).await {
            r.expect("publish");
        }
    }

    /// Publishes `ids` with every one failing, and waits until the running
    /// consumer dead-lettered them all (`already` letters were dead before).
    pub async fn dead_letters(&self, w: &World, running: &Running, ids: &[&str], already: u64) {
        w.set_broken(ids, true).await;
        self.publish(ids).await;
        let n = already + ids.len() as u64;
        self.wait_dead(running, n).await;
    }

    /// Waits until the consumer counted `n` dead letters.
    pub async fn wait_dead(&self, running: &Running, n: u64) {
        tokio::time::timeout(
            Duration::from_secs(60),
            running.stats.wait_for(|s| s.dead_terminal >= n),
        )
        .await
        .unwrap_or_else(|_| panic!("{n} dead letters within 60 s"));
    }

    /// `(partition, low, high)` of every partition of `topic`.
    pub fn watermarks(&self, topic: &str) -> Vec<(i32, i64, i64)> {
        let reader: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set(
                "group.id",
                format!("cli-test-watermarks-{}", uuid::Uuid::new_v4()),
            )
            .create()
            .expect("Kafka reader");
        let metadata = reader
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .expect("metadata");
        let t = metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .expect("the topic exists");
        let mut marks: Vec<(i32, i64, i64)> = t
            .partitions()
            .iter()
            .map(|p| {
                let (low, high) = reader
                    .fetch_watermarks(topic, p.id(), Duration::from_secs(10))
                    .expect("watermarks");
                (p.id(), low, high)
            })
            .collect();
        marks.sort_unstable();
        marks
    }

    /// Records ever appended to `topic` (nothing here deletes any).
    pub fn records(&self, topic: &str) -> i64 {
        self.watermarks(topic).iter().map(|(_, l, h)| h - l).sum()
    }

    /// The watermarks of the work, retry and dead-letter topics.
    pub fn all_watermarks(&self) -> Vec<Vec<(i32, i64, i64)>> {
        [self.topic(), &self.retry, &self.dlt]
            .iter()
            .map(|t| self.watermarks(t))
            .collect()
    }
}

/// `(key, payload)` of every record of `topic`, per partition in offset
/// order, read to the end of each partition.
pub fn read_topic(brokers: &str, topic: &str) -> Vec<(Option<String>, Vec<u8>)> {
    use rdkafka::Message as _;
    use rdkafka::error::KafkaError;
    let reader: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set(
            "group.id",
            format!("cli-test-read-{}", uuid::Uuid::new_v4()),
        )
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .create()
        .expect("Kafka reader");
    let metadata = reader
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .expect("the topic exists")
        .partitions()
        .iter()
        .map(|p| p.id())
        .collect();
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in &partitions {
        tpl.add_partition_offset(topic, *p, rdkafka::Offset::Beginning)
            .expect("assignment");
    }
    reader.assign(&tpl).expect("assign");
    let mut ended = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while ended.len() < partitions.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "{topic} read to its end within 60 s"
        );
        match reader.poll(Duration::from_millis(200)) {
            Some(Ok(r)) => out.push((
                r.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                r.payload().unwrap_or_default().to_vec(),
            )),
            Some(Err(KafkaError::PartitionEOF(p))) => {
                ended.insert(p);
            }
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            None => {}
        }
    }
    out
}
