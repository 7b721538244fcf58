//! [`KafkaSourceBuilder`]: the consumer's and the settle producer's
//! configuration, and the start of the poll thread.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::FutureProducer;
use tokio::sync::mpsc;

use super::ledger::Shared;
use super::poller::Poller;
use super::rebalance::Ctx;
use super::{KafkaSource, Link};
use crate::error::Error;
use crate::topics::Topics;

/// Properties set on the consumer unless overridden with
/// [`KafkaSourceBuilder::with_property`].
pub const CONSUMER_DEFAULTS: &[(&str, &str)] = &[
    ("enable.auto.commit", "true"),
    ("enable.auto.offset.store", "false"),
    ("auto.commit.interval.ms", "1000"),
    ("auto.offset.reset", "earliest"),
    ("partition.assignment.strategy", "cooperative-sticky"),
    ("statistics.interval.ms", "1000"),
];

/// Properties set on the producer of retry copies and dead letters unless
/// overridden with [`KafkaSourceBuilder::with_producer_property`].
pub const SETTLE_PRODUCER_DEFAULTS: &[(&str, &str)] = &[
    ("enable.idempotence", "true"),
    ("acks", "all"),
    ("message.timeout.ms", "30000"),
    ("linger.ms", "1"),
];

/// Properties the source needs and the builder refuses to change.
const CONSUMER_FIXED: &[(&str, &str)] = &[("enable.auto.offset.store", "false")];

/// Configures and starts a [`KafkaSource`].
#[derive(Debug, Clone)]
#[must_use]
pub struct KafkaSourceBuilder {
    brokers: String,
    group_id: String,
    topics: Topics,
    consumer: Vec<(String, String)>,
    producer: Vec<(String, String)>,
    max_per_partition: usize,
    revoke_timeout: Duration,
    max_poll_stall: Duration,
    close_timeout: Duration,
}

impl KafkaSourceBuilder {
    /// Any librdkafka consumer property (`session.timeout.ms`,
    /// `fetch.max.bytes`, security settings, ...). `enable.auto.offset.store`
    /// stays `false`: the source stores offsets itself.
    pub fn with_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.consumer.push((key.into(), value.into()));
        self
    }

    /// Any librdkafka producer property for the producer that writes retry
    /// copies and dead letters (`batch.num.messages`, security, ...).
    pub fn with_producer_property(
        mut self,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> Self {
        self.producer.push((key.into(), value.into()));
        self
    }

    /// Records pending in one partition before the poll thread holds off
    /// (default 256). See the module docs.
    pub fn with_max_per_partition(mut self, n: usize) -> Self {
        self.max_per_partition = n.max(1);
        self
    }

    /// How long the poll thread holds off while a partition is full before
    /// it pauses that partition and polls on (default 1 s; keep it far
    /// below `max.poll.interval.ms`).
    pub fn with_max_poll_stall(mut self, t: Duration) -> Self {
        self.max_poll_stall = t;
        self
    }

    /// How long a revoke waits for the revoked partitions' records to settle
    /// before giving them up (default 10 s; keep it well under
    /// `max.poll.interval.ms`, the poll thread waits in the callback).
    pub fn with_revoke_timeout(mut self, t: Duration) -> Self {
        self.revoke_timeout = t;
        self
    }

    /// How long `close` waits for the final offset commit and for leaving
    /// the group (default 10 s). A coordinator that cannot be reached
    /// within it does not hold the shutdown: what was not committed is
    /// delivered again to the partitions' next owner, and dedup skips it.
    pub fn with_close_timeout(mut self, t: Duration) -> Self {
        self.close_timeout = t;
        self
    }

    /// Creates the consumer and the settle producer, subscribes, and starts
    /// the poll thread. Topics are not created (see [`Topics::create`]).
    pub fn connect(self) -> Result<KafkaSource, Error> {
        let mut cc = ClientConfig::new();
        cc.set("bootstrap.servers", &self.brokers)
            .set("group.id", &self.group_id);
        for (k, v) in CONSUMER_DEFAULTS {
            cc.set(*k, *v);
        }
        for (k, v) in &self.consumer {
            cc.set(k, v);
        }
        for (k, v) in CONSUMER_FIXED {
            cc.set(*k, *v);
        }
        let mut pc = ClientConfig::new();
        pc.set("bootstrap.servers", &self.brokers);
        for (k, v) in SETTLE_PRODUCER_DEFAULTS {
            pc.set(*k, *v);
        }
        for (k, v) in &self.producer {
            pc.set(k, v);
        }
        let producer: FutureProducer = pc.create().map_err(|source| Error::Config {
            context: "creating the settle producer",
            source,
        })?;

        let shared = Arc::new(Shared::default());
        let context = Ctx::new(Arc::clone(&shared), self.revoke_timeout);
        let consumer: BaseConsumer<Ctx> =
            cc.create_with_context(context)
                .map_err(|source| Error::Config {
                    context: "creating the consumer",
                    source,
                })?;
        consumer
            .subscribe(&self.topics.subscribed())
            .map_err(|e| Error::kafka("subscribing", e))?;

        let topics = Arc::new(self.topics);
        let (tx, rx) = mpsc::unbounded_channel();
        let poller = Poller::new(
            consumer,
            Arc::clone(&shared),
            tx,
            Arc::clone(&topics),
            self.max_per_partition,
            self.max_poll_stall,
        );
        let (done_tx, done) = tokio::sync::oneshot::channel();
        let ended = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("consumer-kafka-poll".to_owned())
            .spawn(move || {
                // Returns once the consumer is closed (it has left the group).
                let result = poller.run();
                ended.closed.store(true, Ordering::SeqCst);
                let _ = done_tx.send(result);
            })
            .map_err(|_| Error::PollThread("could not be started"))?;
        tracing::info!(target: "consumer_kafka", %topics, group = %self.group_id, brokers = %self.brokers, "consuming");
        Ok(KafkaSource {
            rx,
            link: Arc::new(Link {
                shared,
                producer,
                topics,
            }),
            thread: Some(done),
            close_timeout: self.close_timeout,
            server: first_broker(&self.brokers),
            group: self.group_id,
        })
    }
}

impl KafkaSource {
    /// A builder with the safe defaults ([`CONSUMER_DEFAULTS`],
    /// [`SETTLE_PRODUCER_DEFAULTS`], 256 pending records per partition,
    /// 10 s revoke timeout).
    pub fn builder(
        brokers: impl Into<String>,
        group_id: impl Into<String>,
        topics: Topics,
    ) -> KafkaSourceBuilder {
        KafkaSourceBuilder {
            brokers: brokers.into(),
            group_id: group_id.into(),
            topics,
            consumer: Vec::new(),
            producer: Vec::new(),
            max_per_partition: 256,
            revoke_timeout: Duration::from_secs(10),
            max_poll_stall: Duration::from_secs(1),
            close_timeout: Duration::from_secs(10),
        }
    }
}

/// The first `host:port` of a bootstrap list (`host:port,host:port`, with
/// an optional `PLAINTEXT://`-style scheme), if it parses.
fn first_broker(brokers: &str) -> Option<(String, u16)> {
    let first = brokers.split(',').next()?.trim();
    let first = first.rsplit("://").next()?;
    let (host, port) = first.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_owned(), port.parse().ok()?))
}

#[cfg(test)]
mod first_broker_tests {
    use super::first_broker;

    #[test]
    fn the_first_bootstrap_broker_is_the_server() {
        assert_eq!(
            first_broker("10.0.0.1:9092,10.0.0.2:9092"),
            Some(("10.0.0.1".to_owned(), 9092))
        );
        assert_eq!(
            first_broker("PLAINTEXT://kafka:29092"),
            Some(("kafka".to_owned(), 29092))
        );
        assert_eq!(first_broker("[::1]:9092"), Some(("::1".to_owned(), 9092)));
        assert_eq!(first_broker("kafka"), None);
    }
}
