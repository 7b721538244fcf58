//! The conformance suite's broker on a real RabbitMQ (`AMQP_URL`, default
//! amqp://guest:guest@127.0.0.1:5672/%2f). Each harness works under a
//! queue-name prefix of its own, and its queues expire ten minutes after
//! their last use, so test runs leave nothing behind for long.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use consumer::amqp::{AmqpAcker, AmqpMetrics, AmqpPublisher, AmqpSource, QueueType, Topology};
use consumer::{Acker, DeadLetter, Envelope, Message, Outgoing, Publisher, Redelivery, Source};
use lapin::options::{BasicGetOptions, BasicNackOptions};

use super::broker::BrokerHarness;

/// The RabbitMQ URL the tests use.
pub fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

/// A plain lapin connection, or a panic that names RabbitMQ.
pub async fn connect() -> lapin::Connection {
    let url = amqp_url();
    lapin::Connection::connect(&url, lapin::ConnectionProperties::default())
        .await
        .unwrap_or_else(|e| {
            panic!("RabbitMQ is not reachable at {url} ({e}): start it (scripts/services rabbitmq does) or set AMQP_URL")
        })
}

/// A fresh queue-name prefix.
pub fn unique_prefix(tag: &str) -> String {
    format!("ct.{tag}.{}", uuid::Uuid::new_v4().simple())
}

/// The topology tests use: short delay buckets, expiring queues.
pub fn test_topology(queue: &str) -> Topology {
    test_topology_of(queue, QueueType::Classic)
}

/// [`test_topology`] with queues of `queue_type`.
pub fn test_topology_of(queue: &str, queue_type: QueueType) -> Topology {
    Topology::new(queue)
        .expect("valid test queue name")
        .with_queue_type(queue_type)
        .with_max_retry_delay(Duration::from_secs(4))
        .with_expires(Duration::from_secs(600))
}

#[derive(Default)]
struct Faults {
    duplicate_publishes: AtomicU32,
    lost_acks: AtomicU32,
    failed_publishes: AtomicU32,
    /// Passed to the real acker, so its own fallback logic counts them.
    failed_dead_letters: AtomicU32,
}

fn take(counter: &AtomicU32) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

/// RabbitMQ as a `BrokerHarness`, on classic queues or (`QUORUM`) on
/// quorum queues.
#[derive(Clone)]
pub struct AmqpBroker<const QUORUM: bool = false> {
    prefix: String,
    publisher: AmqpPublisher,
    faults: Arc<Faults>,
    declared: Arc<Mutex<HashSet<String>>>,
    metrics: Arc<Mutex<HashMap<String, Vec<AmqpMetrics>>>>,
}

/// The suite's broker on quorum queues.
pub type AmqpQuorumBroker = AmqpBroker<true>;

impl<const QUORUM: bool> AmqpBroker<QUORUM> {
    pub fn queue(&self, topic: &str) -> String {
        format!("{}.{topic}", self.prefix)
    }

    /// The topology of `topic`'s queue.
    pub fn topology(&self, topic: &str) -> Topology {
        let queue_type = if QUORUM {
            QueueType::Quorum
        } else {
            QueueType::Classic
        };
        test_topology_of(&self.queue(topic), queue_type)
    }

    /// Declares `topic`'s topology once, so publishes before the first
    /// consumer have a queue to land in.
    pub async fn declare(&self, topic: &str) {
        if self.declared.lock().expect("declared").contains(topic) {
            return;
        }
        let conn = connect().await;
        let channel = conn.create_channel().await.expect("channel");
        self.topology(topic)
            .declare(&channel)
            .await
            .expect("declare the test topology");
        let _ = conn.close(200, "declared".into()).await;
        self.declared
            .lock()
            .expect("declared")
            .insert(topic.to_owned());
    }

    async fn depths(&self, topic: &str) -> usize {
        let conn = connect().await;
        let channel = conn.create_channel().await.expect("channel");
        let d = self
            .topology(topic)
            .depths(channel)
            .await
            .expect("passive declares of the test topology");
        let _ = conn.close(200, "depth read".into()).await;
        let in_flight: u64 = self
            .metrics
            .lock()
            .expect("metrics")
            .get(topic)
            .map_or(0, |ms| ms.iter().map(AmqpMetrics::in_flight).sum());
        usize::try_from(d.work + d.delayed + in_flight).expect("fits")
    }
}

impl<const QUORUM: bool> BrokerHarness for AmqpBroker<QUORUM> {
    type Source = FaultySource;

    async fn new(_partitions: usize) -> Self {
        drop(connect().await);
        Self {
            prefix: unique_prefix(if QUORUM { "confq" } else { "conf" }),
            publisher: AmqpPublisher::new(amqp_url()),
            faults: Arc::default(),
            declared: Arc::default(),
            metrics: Arc::default(),
        }
    }

    async fn publish(&self, topic: &str, message: Message) -> Result<(), consumer::Error> {
        self.declare(topic).await;
        let copies = if take(&self.faults.duplicate_publishes) {
            2
        } else {
            1
        };
        let out = Outgoing {
            destination: format!("/{}", self.queue(topic)),
            message,
        };
        let batch = vec![out; copies];
        for r in Publisher::publish(&self.publisher, &batch).await {
            r?;
        }
        Ok(())
    }

    fn destination(&self, topic: &str) -> String {
        self.queue(topic)
    }

    async fn source(&self, topic: &str) -> FaultySource {
        let source = AmqpSource::new(amqp_url(), self.topology(topic))
            .expect("valid topology")
            .with_prefetch(64)
            .connect()
            .await
            .unwrap_or_else(|e| panic!("RabbitMQ source for {topic} failed to start: {e}"));
        self.declared
            .lock()
            .expect("declared")
            .insert(topic.to_owned());
        self.metrics
            .lock()
            .expect("metrics")
            .entry(topic.to_owned())
            .or_default()
            .push(source.metrics());
        FaultySource {
            inner: source,
            faults: Arc::clone(&self.faults),
        }
    }

    /// RabbitMQ has no "queue drained" event: this polls the ready counts
    /// (passive declares) and the sources' in-flight counts until they are
    /// zero on three readings in a row, so a message moving between queues
    /// (a delay queue expiring into the work queue) is not missed.
    async fn wait_drained(&self, topic: &str) {
        let mut zero_readings = 0;
        while zero_readings < 3 {
            if self.depths(topic).await == 0 {
                zero_readings += 1;
            } else {
                zero_readings = 0;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Reads the DLQ with `basic.get` and puts everything back (the channel
    /// closes with the messages unacked).
    async fn dead_letters(&self, topic: &str) -> Vec<Message> {
        self.declare(topic).await;
        let topology = self.topology(topic);
        let conn = connect().await;
        let channel = conn.create_channel().await.expect("channel");
        let mut out = Vec::new();
        while let Some(got) = channel
            .basic_get(
                topology.dead_letter_queue().into(),
                BasicGetOptions::default(),
            )
            .await
            .expect("basic.get on the DLQ")
        {
            let env = consumer::amqp::headers::to_envelope(
                topology.dead_letter_queue(),
                &got.delivery,
                got.delivery.data.clone().into(),
            );
            out.push(Message {
                key: env.key,
                headers: env.headers,
                payload: env.payload,
            });
        }
        let _ = channel
            .basic_nack(
                0,
                BasicNackOptions {
                    multiple: true,
                    requeue: true,
                },
            )
            .await;
        let _ = conn.close(200, "dead letters read".into()).await;
        out
    }

    async fn depth(&self, topic: &str) -> usize {
        self.depths(topic).await
    }

    fn duplicate_next_publishes(&self, n: u32) {
        self.faults
            .duplicate_publishes
            .fetch_add(n, Ordering::SeqCst);
    }

    fn lose_next_acks(&self, n: u32) {
        self.faults.lost_acks.fetch_add(n, Ordering::SeqCst);
    }

    fn fail_next_publishes(&self, n: u32) {
        self.faults.failed_publishes.fetch_add(n, Ordering::SeqCst);
    }
}

impl<const QUORUM: bool> AmqpBroker<QUORUM> {
    /// The next `n` dead-letter publishes fail inside the real acker (not in
    /// this wrapper), so its dead-letter-exchange fallback is exercised.
    pub fn fail_next_dead_letters_in_acker(&self, n: u32) {
        self.faults
            .failed_dead_letters
            .fetch_add(n, Ordering::SeqCst);
    }
}

/// An `AmqpSource` with the harness's faults applied at settle time.
pub struct FaultySource {
    inner: AmqpSource,
    faults: Arc<Faults>,
}

impl Source for FaultySource {
    type Acker = FaultyAcker;

    fn system(&self) -> &'static str {
        self.inner.system()
    }

    async fn recv(&mut self) -> Result<Option<(Envelope, FaultyAcker)>, consumer::Error> {
        Ok(self.inner.recv().await?.map(|(e, inner)| {
            (
                e,
                FaultyAcker {
                    inner,
                    faults: Arc::clone(&self.faults),
                },
            )
        }))
    }

    async fn close(self) {
        self.inner.close().await;
    }
}

pub struct FaultyAcker {
    inner: AmqpAcker,
    faults: Arc<Faults>,
}

impl FaultyAcker {
    fn fail_publish(&self) -> Result<(), consumer::Error> {
        if take(&self.faults.failed_publishes) {
            return Err(consumer::Error::broker(
                "injected publish failure",
                true,
                None,
            ));
        }
        Ok(())
    }
}

impl Acker for FaultyAcker {
    async fn ack(self) -> Result<(), consumer::Error> {
        if take(&self.faults.lost_acks) {
            // The crash between commit and ack, for real: no basic.ack, the
            // channel goes away, RabbitMQ requeues what it had handed out.
            self.inner.crash_channel().await;
            return Ok(());
        }
        self.inner.ack().await
    }

    async fn release(self) -> Result<(), consumer::Error> {
        self.inner.release().await
    }

    async fn dead_letter(
        &mut self,
        dead_letter: &DeadLetter,
    ) -> Result<consumer::DeadLettered, consumer::Error> {
        self.fail_publish()?;
        let n = self.faults.failed_dead_letters.swap(0, Ordering::SeqCst);
        self.inner.fail_next_dead_letters(n);
        self.inner.dead_letter(dead_letter).await
    }

    async fn schedule_retry(
        &mut self,
        envelope: &Envelope,
        retry: &Redelivery,
    ) -> Result<(), consumer::Error> {
        self.fail_publish()?;
        self.inner.schedule_retry(envelope, retry).await
    }
}
