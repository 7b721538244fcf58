//! The conformance suite's broker on a real RabbitMQ (`AMQP_URL`, default
//! amqp://guest:guest@127.0.0.1:5672/%2f). Each harness works under a
//! queue-name prefix of its own, and its queues expire ten minutes after
//! their last use, so test runs leave nothing behind for long.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use consumer::Message;
use consumer::amqp::{AmqpPublisher, AmqpSource, AmqpStats, QueueType, Topology};
use consumer::testing::{Faults, FaultyPublisher, LinkProxy};
use lapin::options::{BasicGetOptions, BasicNackOptions};

use super::broker::{BrokerHarness, SettleSettingsByTopic};
use super::support;

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

/// Runs `rabbitmqctl` with `args` on the local node, or panics saying why.
pub fn rabbitmqctl(args: &[&str]) {
    let out = std::process::Command::new("rabbitmqctl")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("rabbitmqctl could not run ({e}): this test needs a local RabbitMQ node and its rabbitmqctl"));
    assert!(
        out.status.success(),
        "rabbitmqctl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Starts the node's application again when dropped, even when a test
/// fails half-way, so a failure does not take RabbitMQ away from
/// everything that runs after it.
pub struct StartAppOnDrop;

impl Drop for StartAppOnDrop {
    fn drop(&mut self) {
        let _ = std::process::Command::new("rabbitmqctl")
            .arg("start_app")
            .output();
    }
}

/// `AMQP_URL` with its host and port replaced by `via`'s, and a heartbeat
/// of 1 s (lapin closes a connection that read nothing for two).
pub fn through(via: &LinkProxy) -> String {
    let url = amqp_url();
    let (scheme, rest) = url.split_once("://").expect("AMQP_URL has a scheme");
    let (authority, path) = rest.split_once('/').unwrap_or((rest, "%2f"));
    let userinfo = authority
        .rsplit_once('@')
        .map_or(String::new(), |(u, _)| format!("{u}@"));
    let sep = if path.contains('?') { '&' } else { '?' };
    format!("{scheme}://{userinfo}{}/{path}{sep}heartbeat=1", via.addr())
}

/// Host and port of `AMQP_URL`.
pub fn upstream() -> String {
    let url = amqp_url();
    let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    let host_port = authority.rsplit('@').next().unwrap_or(authority);
    if host_port.contains(':') {
        host_port.to_owned()
    } else {
        format!("{host_port}:5672")
    }
}

/// A fresh queue-name prefix.
pub fn unique_prefix(tag: &str) -> String {
    // A UUID v7: the sweeps read when the queue was made from it.
    format!("ct.{tag}.{}", uuid::Uuid::now_v7().simple())
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

/// RabbitMQ as a `BrokerHarness`, on classic queues or (`QUORUM`) on
/// quorum queues.
#[derive(Clone)]
pub struct AmqpBroker<const QUORUM: bool = false> {
    prefix: String,
    publisher: FaultyPublisher<AmqpPublisher>,
    faults: Faults,
    declared: Arc<Mutex<HashSet<String>>>,
    metrics: Arc<Mutex<HashMap<String, Vec<AmqpStats>>>>,
    settle: SettleSettingsByTopic,
}

/// The suite's broker on quorum queues.
pub type AmqpQuorumBroker = AmqpBroker<true>;

impl<const QUORUM: bool> AmqpBroker<QUORUM> {
    pub fn queue(&self, topic: &str) -> String {
        format!("{}.{topic}", self.prefix)
    }

    /// The topology of `topic`'s queue: delay queues up to 256 ms, all
    /// the suite's handlers need (every queue is a Raft cluster of its own
    /// on quorum queues, so the suite declares no more than it uses).
    pub fn topology(&self, topic: &str) -> Topology {
        let queue_type = if QUORUM {
            QueueType::Quorum
        } else {
            QueueType::Classic
        };
        test_topology_of(&self.queue(topic), queue_type)
            .with_max_retry_delay(Duration::from_millis(256))
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
        let topology = self.topology(topic);
        let queues: Vec<String> = std::iter::once(topology.queue().to_owned())
            .chain(topology.delay_queues().into_iter().map(|(_, q)| q))
            .collect();
        let ready = ready_messages(&queues).await;
        let in_flight: u64 = self
            .metrics
            .lock()
            .expect("metrics")
            .get(topic)
            .map_or(0, |ms| ms.iter().map(AmqpStats::in_flight).sum());
        usize::try_from(ready + in_flight).expect("fits")
    }
}

/// Messages ready in `queues` (passive declares; a queue a test deleted
/// holds none).
pub async fn ready_messages(queues: &[String]) -> u64 {
    let conn = connect().await;
    let mut ready = 0;
    let mut channel = conn.create_channel().await.expect("channel");
    for queue in queues {
        // A passive declare of a queue a test deleted closes the
        // channel (and the queue holds nothing): open another.
        if !channel.status().connected() {
            channel = conn.create_channel().await.expect("channel");
        }
        if let Ok(q) = channel
            .queue_declare(
                queue.as_str().into(),
                lapin::options::QueueDeclareOptions {
                    passive: true,
                    durable: true,
                    ..Default::default()
                },
                lapin::types::FieldTable::default(),
            )
            .await
        {
            ready += u64::from(q.message_count());
        }
    }
    let _ = conn.close(200, "depth read".into()).await;
    ready
}

/// Whether RabbitMQ answers for `queue` that it has crashed (a passive
/// declare).
pub async fn is_crashed(queue: &str) -> bool {
    let conn = connect().await;
    let channel = conn.create_channel().await.expect("channel");
    let answer = channel
        .queue_declare(
            queue.into(),
            lapin::options::QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            lapin::types::FieldTable::default(),
        )
        .await;
    let _ = conn.close(200, "state read".into()).await;
    answer.is_err_and(|e| e.to_string().contains("has crashed"))
}

/// Deletes `names`, so what is published to them routes nowhere.
pub async fn delete_queues(names: &[String]) {
    let conn = connect().await;
    let channel = conn.create_channel().await.expect("channel");
    for name in names {
        channel
            .queue_delete(
                name.as_str().into(),
                lapin::options::QueueDeleteOptions::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("deleting queue {name}: {e}"));
    }
    let _ = conn.close(200, "queues deleted".into()).await;
}

/// Reads every message of `queue` with `basic.get` and puts them all back
/// in order (one `nack(multiple, requeue)` of the unacked deliveries).
pub async fn read_in_place(queue: &str) -> Vec<Message> {
    let conn = connect().await;
    let channel = conn.create_channel().await.expect("channel");
    let mut out = Vec::new();
    while let Some(got) = channel
        .basic_get(queue.into(), BasicGetOptions::default())
        .await
        .expect("basic.get")
    {
        let env = consumer::amqp::headers::to_envelope(
            queue,
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
    let _ = conn.close(200, "read in place".into()).await;
    out
}

impl<const QUORUM: bool> BrokerHarness for AmqpBroker<QUORUM> {
    type Inner = AmqpSource;
    type Publisher = AmqpPublisher;
    const ONE_AT_A_TIME: bool = QUORUM;

    /// On quorum queues, deletes this file's queues (`ct.confq.`) and the
    /// stale test queues left on the local node before and after each
    /// case, which then run one at a time.
    /// Test queues expire ten minutes after their last use, and a RabbitMQ
    /// 3.10 node expiring a few hundred quorum queues stalls for minutes:
    /// with the 295 quorum queues the earlier test files had left, cases
    /// that take 2 s alone waited past their 60 s deadline (the file: 460 s,
    /// two timeouts); swept first, the file ran in 21 s. Deleting them at
    /// once (one `rabbitmqctl eval`) takes about a second. Test files run
    /// one after another, so nothing else is using those queues then; a
    /// broker that is not on this machine is left alone.
    fn between_cases() {
        if QUORUM {
            sweep_test_queues("ct.confq.");
        }
    }

    async fn new(_partitions: usize) -> Self {
        drop(connect().await);
        let faults = Faults::new();
        Self {
            prefix: unique_prefix(if QUORUM { "confq" } else { "conf" }),
            publisher: FaultyPublisher::new(
                AmqpPublisher::builder(amqp_url()).build(),
                faults.clone(),
            ),
            faults,
            declared: Arc::default(),
            metrics: Arc::default(),
            settle: SettleSettingsByTopic::default(),
        }
    }

    fn faults(&self) -> &Faults {
        &self.faults
    }

    fn publisher(&self) -> &FaultyPublisher<AmqpPublisher> {
        &self.publisher
    }

    async fn prepare(&self, topic: &str) {
        self.declare(topic).await;
    }

    fn publish_destination(&self, topic: &str) -> String {
        format!("/{}", self.queue(topic))
    }

    fn destination(&self, topic: &str) -> String {
        self.queue(topic)
    }

    async fn connect(&self, topic: &str) -> Result<AmqpSource, consumer::backend::Error> {
        let settings = self.settle.get(topic);
        let mut source = AmqpSource::builder(amqp_url(), self.topology(topic)).with_prefetch(64);
        if let Some(bytes) = settings.max_dead_letter_bytes {
            source = source.with_max_message_bytes(bytes);
        }
        let source = source.connect().await?;
        self.declared
            .lock()
            .expect("declared")
            .insert(topic.to_owned());
        // Only the newest source of a topic holds deliveries: the one it
        // replaces (closed, or crashed and restarted) held them on a
        // connection RabbitMQ has requeued.
        self.metrics
            .lock()
            .expect("metrics")
            .insert(topic.to_owned(), vec![source.stats()]);
        let topology = self.topology(topic);
        if settings.no_dead_letter_destination {
            delete_queues(&[topology.dead_letter_queue().to_owned()]).await;
        }
        if settings.no_retry_destination {
            let delays: Vec<String> = topology
                .delay_queues()
                .into_iter()
                .map(|(_, q)| q)
                .collect();
            delete_queues(&delays).await;
        }
        Ok(source)
    }

    /// RabbitMQ has no "queue drained" event: the ready counts (passive
    /// declares) and the sources' in-flight counts, polled.
    async fn wait_drained(&self, topic: &str) {
        support::until_drained(Duration::from_millis(20), || self.depths(topic)).await;
    }

    /// Reads the DLQ with `basic.get` and puts everything back (the channel
    /// closes with the messages unacked).
    async fn dead_letters(&self, topic: &str) -> Vec<Message> {
        self.declare(topic).await;
        if self.settle.get(topic).no_dead_letter_destination {
            // The test deleted it.
            return Vec::new();
        }
        read_in_place(self.topology(topic).dead_letter_queue()).await
    }

    async fn depth(&self, topic: &str) -> usize {
        self.depths(topic).await
    }

    fn limit_dead_letter_bytes(&self, topic: &str, bytes: usize) {
        self.settle.limit_dead_letter_bytes(topic, bytes);
    }

    fn remove_dead_letter_destination(&self, topic: &str) {
        self.settle.remove_dead_letter_destination(topic);
    }

    fn remove_retry_destination(&self, topic: &str) {
        self.settle.remove_retry_destination(topic);
    }
}

/// Deletes the queues whose names start with `mine` on the local RabbitMQ
/// node, and those earlier test runs left (`ct.` names made over three
/// hours ago, or without a UUID v7), with `scripts/services`' own
/// expression (`sweep_rabbitmq.erl`); does nothing where there is no
/// `rabbitmqctl` (a remote broker). Fails the test, naming RabbitMQ, when
/// the node does not answer within 60 s (a wedged node never does).
pub fn sweep_test_queues(mine: &str) {
    let body: Vec<&str> = include_str!("../../scripts/services.d/sweep_rabbitmq.erl")
        .lines()
        .filter(|l| !l.starts_with("%%"))
        .collect();
    let eval = format!("Mine = <<\"{mine}\">>, {}", body.join("\n"));
    let Ok(mut sweep) = std::process::Command::new("rabbitmqctl")
        .args(["eval", &eval])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    else {
        return;
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if !matches!(sweep.try_wait(), Ok(None)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = sweep.kill();
    let _ = sweep.wait();
    panic!(
        "RabbitMQ did not answer `rabbitmqctl eval` (the sweep of the test queues) within 60 s: the local node is stuck; `scripts/services rabbitmq` stops and replaces such a node"
    );
}

/// The queues (`what = "queues"`, with their type) or exchanges
/// (`"exchanges"`, with theirs) on the local RabbitMQ node whose name
/// starts with `prefix`, read with `rabbitmqctl`; panics, naming RabbitMQ,
/// when it cannot be run or the node does not answer within 60 s.
pub fn listed(what: &str, prefix: &str) -> Vec<(String, String)> {
    let out = std::process::Command::new("timeout")
        .args(["60", "rabbitmqctl", "-q", &format!("list_{what}"), "--no-table-headers", "name", "type"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("this test reads the local RabbitMQ node's {what} with rabbitmqctl, which could not be run ({e}): run it where scripts/services rabbitmq runs RabbitMQ")
        });
    assert!(
        out.status.success(),
        "RabbitMQ did not answer `rabbitmqctl list_{what}` within 60 s ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| {
            let (name, kind) = l.split_once('\t')?;
            Some((name.to_owned(), kind.trim().to_owned()))
        })
        .collect()
}
