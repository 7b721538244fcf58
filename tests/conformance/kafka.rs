//! The conformance suite's broker on Kafka: librdkafka's mock cluster (in
//! process, one per harness) or an out-of-process Kafka-protocol broker
//! (`KAFKA_BROKERS`, default 127.0.0.1:9092, where `scripts/services kafka`
//! starts Apache Kafka).
//!
//! Topics are created explicitly (neither broker creates them on use). On
//! the external broker every harness works under a topic prefix of its own;
//! producers batch as librdkafka does by default.
//!
//! Faults come from `consumer::testing` (see `broker.rs`): after a lost
//! ack the consumer is closed and a new group member started, which
//! resumes from the committed offset (`tests/kafka_faults.rs` also kills a
//! real process). A removed dead-letter or retry destination is a topic
//! name that was never created; a dead-letter size limit is the settle
//! producer's `message.max.bytes`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, mpsc as std_mpsc};
use std::time::Duration;

use consumer::Message;
use consumer::kafka::{KafkaPublisher, KafkaSource, KafkaStats, Topics};
use consumer::testing::{Faults, FaultyPublisher};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::{MockCluster, MockCoordinator};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::broker::{BrokerHarness, SettleSettingsByTopic};
use super::support;

/// The external broker the end-to-end tests use.
pub fn external_brokers() -> String {
    std::env::var("KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".to_owned())
}

/// Fails with a sentence naming the broker when it does not answer.
pub fn check_external(brokers: &str) {
    let first = brokers.split(',').next().unwrap_or(brokers);
    let addrs: Vec<std::net::SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(first)
        .map(Iterator::collect)
        .unwrap_or_default();
    let up = addrs
        .iter()
        .any(|a| std::net::TcpStream::connect_timeout(a, Duration::from_secs(2)).is_ok());
    assert!(
        up,
        "no Kafka broker answers at {brokers}: run `scripts/services kafka` (it starts Apache Kafka there) or set KAFKA_BROKERS to a running Kafka"
    );
}

/// The three-broker cluster `scripts/services kafka-cluster` starts
/// (replication 3, `min.insync.replicas` 2).
pub const CLUSTER: &str = "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094";

/// Fails with a sentence naming the cluster when one of its nodes does not
/// answer.
pub fn check_cluster_nodes() {
    for (n, port) in [19092, 19093, 19094].into_iter().enumerate() {
        let up = std::net::TcpStream::connect_timeout(
            &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            Duration::from_secs(2),
        )
        .is_ok();
        assert!(
            up,
            "the three-broker Kafka cluster does not answer at 127.0.0.1:{port} (node {}): run `scripts/services kafka-cluster`",
            n + 1
        );
    }
}

/// Where the cluster's brokers' PROXIED listeners listen, and what they
/// advertise (where [`node_link_proxies`] listen), node by node.
pub const PROXIED: [(u16, u16); 3] = [(19393, 19493), (19394, 19494), (19395, 19495)];

/// Fails with a sentence naming the cluster when a node, or its PROXIED
/// listener, does not answer.
pub fn check_proxied_listeners() {
    check_cluster_nodes();
    for (listener, _) in PROXIED {
        let up = std::net::TcpStream::connect_timeout(
            &std::net::SocketAddr::from(([127, 0, 0, 1], listener)),
            Duration::from_secs(2),
        )
        .is_ok();
        assert!(
            up,
            "the Kafka cluster has no PROXIED listener on 127.0.0.1:{listener}: it was started by an older scripts/services; stop its nodes and run `scripts/services kafka-cluster` again"
        );
    }
}

/// A link proxy per node, in front of its PROXIED listener, on the port
/// the node advertises for it (a previous user's may still be letting go
/// of them): a client bootstrapped at [`bootstrap_through_proxies`]
/// reaches every broker through them.
pub async fn node_link_proxies() -> Vec<consumer::testing::LinkProxy> {
    let mut out = Vec::new();
    for (listener, advertised) in PROXIED {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], advertised));
        let proxy = support::within(async {
            loop {
                match consumer::testing::LinkProxy::bind(addr, format!("127.0.0.1:{listener}"))
                    .await
                {
                    Ok(p) => return p,
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        })
        .await;
        out.push(proxy);
    }
    out
}

/// The bootstrap list through [`node_link_proxies`].
pub fn bootstrap_through_proxies() -> String {
    PROXIED
        .iter()
        .map(|(_, advertised)| format!("127.0.0.1:{advertised}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The cluster's node `n`'s pid file.
fn cluster_pid_file(n: i32) -> std::path::PathBuf {
    let tools = std::env::var("CONSUMER_TOOLS_DIR").map_or_else(
        |_| {
            std::path::PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()))
                .join(".cache/consumer-rs/tools")
        },
        std::path::PathBuf::from,
    );
    tools.join(format!("services/kafka-cluster/node{n}.pid"))
}

/// SIGKILLs the cluster's node `n` (1-3); the guard starts it again
/// ([`NodeRestart::now`], or when dropped, so a failing test does not
/// leave the cluster short of a broker).
pub fn kill_cluster_node(n: i32) -> NodeRestart {
    let pid = std::fs::read_to_string(cluster_pid_file(n))
        .unwrap_or_else(|e| panic!("the pid of Kafka cluster node {n}: {e}"));
    let restart = NodeRestart(Some(n));
    let status = std::process::Command::new("kill")
        .args(["-KILL", pid.trim()])
        .status()
        .expect("kill");
    assert!(status.success(), "SIGKILL node {n} (pid {})", pid.trim());
    restart
}

/// Starts a killed cluster node again: see [`kill_cluster_node`].
pub struct NodeRestart(Option<i32>);

impl NodeRestart {
    /// Starts the node now ([`start_cluster_node`]).
    pub fn now(&mut self) {
        if let Some(n) = self.0.take()
            && let Err(e) = start_cluster_node(n)
        {
            panic!("{e}");
        }
    }
}

/// How long past `scripts/services`' own 90 s a node it started may take
/// to take connections on a loaded machine (a campaign's fourteen
/// processes and a build beside it made one take over two minutes).
const NODE_START_PATIENCE: Duration = Duration::from_secs(180);

/// Starts cluster node `n` (`scripts/services kafka-node N`, which waits
/// 90 s until it answers); when the script gives up, waits up to
/// [`NODE_START_PATIENCE`] more for the JVM it started (it keeps starting)
/// to take connections, and says what the script said if it never does.
pub fn start_cluster_node(n: i32) -> Result<(), String> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/services");
    let out = std::process::Command::new(script)
        .args(["kafka-node", &n.to_string()])
        .output()
        .map_err(|e| format!("scripts/services kafka-node {n} could not run: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let port = u16::try_from(19091 + n).map_err(|e| format!("node {n}: {e}"))?;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = std::time::Instant::now() + NODE_START_PATIENCE;
    while std::time::Instant::now() < deadline {
        if std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    Err(format!(
        "scripts/services kafka-node {n} failed, and the node did not take connections on {addr} within {NODE_START_PATIENCE:?} more: {}",
        String::from_utf8_lossy(&out.stderr)
    ))
}

impl Drop for NodeRestart {
    fn drop(&mut self) {
        self.now();
    }
}

/// Deletes `topics` (work, retry and dead-letter) from `brokers`, and
/// says what the broker answered if it refused.
pub async fn delete_topics(brokers: &str, topics: &Topics) -> Result<(), String> {
    use rdkafka::admin::{AdminClient, AdminOptions};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .map_err(|e| format!("an admin client for {brokers}: {e}"))?;
    let mut names = topics.subscribed();
    names.push(topics.dead_letter_topic());
    let results = admin
        .delete_topics(&names, &AdminOptions::new())
        .await
        .map_err(|e| format!("deleting {names:?}: {e}"))?;
    for r in results {
        r.map_err(|(name, code)| format!("deleting {name}: {code}"))?;
    }
    Ok(())
}

/// Commands for the thread that owns a mock cluster (librdkafka's mock
/// cluster handle cannot move between threads).
pub enum MockCommand {
    CreateTopic(String, i32, std_mpsc::Sender<()>),
    BrokerDown(i32, std_mpsc::Sender<()>),
    BrokerUp(i32, std_mpsc::Sender<()>),
    RequestErrors(
        rdkafka::types::RDKafkaApiKey,
        Vec<rdkafka::types::RDKafkaRespErr>,
        std_mpsc::Sender<()>,
    ),
    ClearRequestErrors(rdkafka::types::RDKafkaApiKey, std_mpsc::Sender<()>),
    GroupCoordinator(String, i32, std_mpsc::Sender<()>),
    PartitionLeader(String, i32, i32, std_mpsc::Sender<()>),
}

/// An in-process mock cluster, alive while a handle is.
#[derive(Clone)]
pub struct MockHost {
    bootstrap: String,
    commands: std_mpsc::Sender<MockCommand>,
}

impl MockHost {
    pub fn start(brokers: i32) -> Self {
        let (tx, rx) = std_mpsc::channel::<MockCommand>();
        let (boot_tx, boot_rx) = std_mpsc::channel();
        std::thread::spawn(move || {
            let cluster = MockCluster::new(brokers).expect("librdkafka mock cluster");
            let _ = boot_tx.send(cluster.bootstrap_servers());
            while let Ok(cmd) = rx.recv() {
                match cmd {
                    MockCommand::CreateTopic(name, partitions, done) => {
                        cluster
                            .create_topic(&name, partitions, 1)
                            .expect("mock create_topic");
                        let _ = done.send(());
                    }
                    MockCommand::BrokerDown(id, done) => {
                        cluster.broker_down(id).expect("mock broker_down");
                        let _ = done.send(());
                    }
                    MockCommand::BrokerUp(id, done) => {
                        cluster.broker_up(id).expect("mock broker_up");
                        let _ = done.send(());
                    }
                    MockCommand::RequestErrors(api, errors, done) => {
                        cluster.request_errors(api, &errors);
                        let _ = done.send(());
                    }
                    MockCommand::ClearRequestErrors(api, done) => {
                        cluster.clear_request_errors(api);
                        let _ = done.send(());
                    }
                    MockCommand::GroupCoordinator(group, id, done) => {
                        cluster
                            .coordinator(MockCoordinator::Group(group), id)
                            .expect("mock coordinator");
                        let _ = done.send(());
                    }
                    MockCommand::PartitionLeader(topic, partition, id, done) => {
                        cluster
                            .partition_leader(&topic, partition, Some(id))
                            .expect("mock partition_leader");
                        let _ = done.send(());
                    }
                }
            }
        });
        let bootstrap = boot_rx.recv().expect("mock cluster started");
        Self {
            bootstrap,
            commands: tx,
        }
    }

    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    fn call(&self, make: impl FnOnce(std_mpsc::Sender<()>) -> MockCommand) {
        let (done, wait) = std_mpsc::channel();
        self.commands
            .send(make(done))
            .expect("mock cluster thread alive");
        wait.recv().expect("mock cluster command done");
    }

    pub fn create_topic(&self, name: &str, partitions: i32) {
        self.call(|d| MockCommand::CreateTopic(name.to_owned(), partitions, d));
    }

    pub fn broker_down(&self, id: i32) {
        self.call(|d| MockCommand::BrokerDown(id, d));
    }

    pub fn broker_up(&self, id: i32) {
        self.call(|d| MockCommand::BrokerUp(id, d));
    }

    /// The next requests of `api` fail with `errors`, one each, in order.
    pub fn request_errors(
        &self,
        api: rdkafka::types::RDKafkaApiKey,
        errors: &[rdkafka::types::RDKafkaRespErr],
    ) {
        self.call(|d| MockCommand::RequestErrors(api, errors.to_vec(), d));
    }

    /// Drops the errors still queued for `api`.
    pub fn clear_request_errors(&self, api: rdkafka::types::RDKafkaApiKey) {
        self.call(|d| MockCommand::ClearRequestErrors(api, d));
    }

    /// Pins `group`'s coordinator to broker `id` (otherwise a hash of the
    /// group name picks it).
    pub fn group_coordinator(&self, group: &str, id: i32) {
        self.call(|d| MockCommand::GroupCoordinator(group.to_owned(), id, d));
    }

    /// Pins `topic`/`partition`'s leader to broker `id` (otherwise one of
    /// its replicas at random; with one replica, broker `partition % n + 1`).
    pub fn partition_leader(&self, topic: &str, partition: i32, id: i32) {
        self.call(|d| MockCommand::PartitionLeader(topic.to_owned(), partition, id, d));
    }
}

/// Where the harness's broker is.
#[derive(Clone)]
pub enum Cluster {
    Mock(MockHost),
    External(String),
}

impl Cluster {
    pub fn bootstrap(&self) -> String {
        match self {
            Self::Mock(m) => m.bootstrap().to_owned(),
            Self::External(b) => b.clone(),
        }
    }
}

/// Kafka as a `BrokerHarness`; `EXTERNAL` picks the broker.
#[derive(Clone)]
pub struct KafkaBroker<const EXTERNAL: bool> {
    pub cluster: Cluster,
    prefix: String,
    partitions: i32,
    publisher: FaultyPublisher<KafkaPublisher>,
    faults: Faults,
    created: Arc<Mutex<HashSet<String>>>,
    metrics: Arc<Mutex<HashMap<String, Vec<KafkaStats>>>>,
    settle: SettleSettingsByTopic,
}

/// The mock cluster flavour.
pub type MockKafka = KafkaBroker<false>;
/// The out-of-process broker flavour.
pub type ExternalKafka = KafkaBroker<true>;

impl MockKafka {
    /// A harness on a mock cluster the test started (several brokers, or
    /// faults the test injects itself); topics get `partitions` partitions.
    pub async fn on_mock(host: MockHost, partitions: i32) -> Self {
        Self::on_cluster(Cluster::Mock(host), String::new(), partitions).await
    }
}

impl<const EXTERNAL: bool> KafkaBroker<EXTERNAL> {
    async fn on_cluster(cluster: Cluster, prefix: String, partitions: i32) -> Self {
        let publisher = KafkaPublisher::builder(cluster.bootstrap());
        let faults = Faults::new();
        Self {
            publisher: FaultyPublisher::new(
                publisher.connect().await.expect("publisher"),
                faults.clone(),
            ),
            cluster,
            prefix,
            partitions,
            faults,
            created: Arc::default(),
            metrics: Arc::default(),
            settle: SettleSettingsByTopic::default(),
        }
    }

    /// The topics the harness creates for `topic`.
    pub fn topics(&self, topic: &str) -> Topics {
        Topics::new(self.topic_name(topic)).expect("valid test topic")
    }

    /// The topics a source of `topic` works with: the created ones, or
    /// names never created where a destination was removed.
    fn source_topics(&self, topic: &str) -> Topics {
        let settings = self.settle.get(topic);
        let mut topics = self.topics(topic);
        if settings.no_dead_letter_destination {
            topics = topics
                .with_dead_letter_topic(format!("{}.never-created-dlq", self.topic_name(topic)))
                .expect("valid name");
        }
        if settings.no_retry_destination {
            topics = topics
                .with_retry_topic(format!("{}.never-created-retry", self.topic_name(topic)))
                .expect("valid name");
        }
        topics
    }

    pub fn topic_name(&self, topic: &str) -> String {
        format!("{}{topic}", self.prefix)
    }

    pub fn group(&self, topic: &str) -> String {
        format!("ct-group-{}{topic}", self.prefix)
    }

    /// Creates `topic` with its retry and dead-letter topics, once.
    pub async fn create(&self, topic: &str) {
        if !self
            .created
            .lock()
            .expect("created")
            .insert(topic.to_owned())
        {
            return;
        }
        let topics = self.topics(topic);
        match &self.cluster {
            Cluster::Mock(m) => {
                for name in [
                    topics.topic(),
                    topics.retry_topic().expect("retry"),
                    topics.dead_letter_topic(),
                ] {
                    m.create_topic(name, self.partitions);
                }
            }
            Cluster::External(b) => topics
                .create(b, self.partitions, 1)
                .await
                .unwrap_or_else(|e| panic!("creating topics on the Kafka broker at {b}: {e}")),
        }
    }

    /// A source builder for `topic` in this harness's group.
    pub fn source_builder(&self, topic: &str) -> consumer::kafka::KafkaSourceBuilder {
        let settings = self.settle.get(topic);
        let mut b = KafkaSource::builder(
            self.cluster.bootstrap(),
            self.group(topic),
            self.source_topics(topic),
        )
        .with_property("session.timeout.ms", "6000")
        .with_property("heartbeat.interval.ms", "500")
        .with_property("statistics.interval.ms", "200")
        .with_revoke_timeout(Duration::from_secs(5));
        if let Some(bytes) = settings.max_dead_letter_bytes {
            b = b.with_producer_property("message.max.bytes", bytes.to_string());
        }
        if settings.no_dead_letter_destination || settings.no_retry_destination {
            // A topic that does not exist fails its records once librdkafka
            // stops waiting for it to appear (30 s by default).
            b = b
                .with_producer_property("allow.auto.create.topics", "false")
                .with_producer_property("topic.metadata.propagation.max.ms", "1000");
        }
        b
    }

    fn client(&self, group: Option<&str>) -> BaseConsumer {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.cluster.bootstrap())
            .set("enable.auto.commit", "false");
        c.set("group.id", group.unwrap_or("ct-reader"));
        c.create().expect("a Kafka client for the harness")
    }

    /// High watermarks of every partition of `topic` and its retry topic.
    async fn watermarks_and_committed(&self, topic: &str) -> Vec<(String, i32, i64, i64)> {
        let this = self.clone();
        let topic = topic.to_owned();
        tokio::task::spawn_blocking(move || {
            let topics = this.topics(&topic);
            let group = this.group(&topic);
            let reader = this.client(Some(&group));
            let mut tpl = TopicPartitionList::new();
            for t in topics.subscribed() {
                for p in 0..this.partitions {
                    tpl.add_partition(t, p);
                }
            }
            let committed = reader
                .committed_offsets(tpl.clone(), Duration::from_secs(10))
                .expect("committed offsets");
            let mut out = Vec::new();
            for e in tpl.elements() {
                let (_, hw) = reader
                    .fetch_watermarks(e.topic(), e.partition(), Duration::from_secs(10))
                    .expect("watermarks");
                let c = committed
                    .find_partition(e.topic(), e.partition())
                    .and_then(|x| x.offset().to_raw())
                    .filter(|o| *o >= 0)
                    .unwrap_or(0);
                out.push((e.topic().to_owned(), e.partition(), hw, c));
            }
            out
        })
        .await
        .expect("watermark reader")
    }

    async fn unsettled(&self, topic: &str) -> usize {
        self.create(topic).await;
        let marks = self.watermarks_and_committed(topic).await;
        let metrics: Vec<_> = self
            .metrics
            .lock()
            .expect("metrics")
            .get(topic)
            .map(|ms| ms.iter().map(KafkaStats::snapshot).collect())
            .unwrap_or_default();
        let mut total = 0usize;
        for (t, p, hw, committed) in marks {
            let position = metrics
                .iter()
                .flat_map(|m| m.partitions.iter())
                .filter(|m| m.topic == t && m.partition == p && m.pending == 0)
                .filter_map(|m| m.position)
                .max()
                .unwrap_or(0);
            total += usize::try_from(hw - committed.max(position)).unwrap_or(0);
        }
        let held: usize = metrics.iter().map(|m| m.in_flight + m.parked).sum();
        total + held
    }

    /// The raw records of `topic`'s dead-letter topic, oldest first.
    pub async fn read_dead_letters(&self, topic: &str) -> Vec<Message> {
        self.create(topic).await;
        let this = self.clone();
        let topic = topic.to_owned();
        tokio::task::spawn_blocking(move || {
            let dlq = this.topics(&topic).dead_letter_topic().to_owned();
            let reader = this.client(None);
            let mut tpl = TopicPartitionList::new();
            let mut remaining = 0i64;
            for p in 0..this.partitions {
                let (lo, hw) = reader
                    .fetch_watermarks(&dlq, p, Duration::from_secs(10))
                    .expect("dlq watermarks");
                remaining += hw - lo;
                tpl.add_partition_offset(&dlq, p, Offset::Beginning)
                    .expect("tpl");
            }
            let mut out = Vec::new();
            if remaining == 0 {
                return Vec::new();
            }
            reader.assign(&tpl).expect("assign the dlq");
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while remaining > 0 && std::time::Instant::now() < deadline {
                if let Some(Ok(r)) = reader.poll(Duration::from_millis(100)) {
                    let ts = rdkafka::Message::timestamp(&r).to_millis().unwrap_or(0);
                    let env = consumer::kafka::headers::to_envelope(&r);
                    out.push((
                        ts,
                        r_pos(&r),
                        Message {
                            key: env.key,
                            headers: env.headers,
                            payload: env.payload,
                        },
                    ));
                    remaining -= 1;
                }
            }
            assert_eq!(remaining, 0, "could not read every dead letter back");
            out.sort_by_key(|(ts, pos, _)| (*ts, *pos));
            out.into_iter().map(|(_, _, m)| m).collect()
        })
        .await
        .expect("dlq reader")
    }
}

fn r_pos(r: &rdkafka::message::BorrowedMessage<'_>) -> (i32, i64) {
    (rdkafka::Message::partition(r), rdkafka::Message::offset(r))
}

impl<const EXTERNAL: bool> BrokerHarness for KafkaBroker<EXTERNAL> {
    type Inner = KafkaSource;
    type Publisher = KafkaPublisher;

    async fn new(partitions: usize) -> Self {
        let partitions = i32::try_from(partitions.max(1)).expect("partitions");
        let (cluster, prefix) = if EXTERNAL {
            let brokers = external_brokers();
            check_external(&brokers);
            (
                Cluster::External(brokers),
                format!("ct.{}.", uuid::Uuid::new_v4().simple()),
            )
        } else {
            (Cluster::Mock(MockHost::start(1)), String::new())
        };
        Self::on_cluster(cluster, prefix, partitions).await
    }

    fn faults(&self) -> &Faults {
        &self.faults
    }

    fn publisher(&self) -> &FaultyPublisher<KafkaPublisher> {
        &self.publisher
    }

    async fn prepare(&self, topic: &str) {
        self.create(topic).await;
    }

    fn publish_destination(&self, topic: &str) -> String {
        self.topic_name(topic)
    }

    fn destination(&self, topic: &str) -> String {
        self.topic_name(topic)
    }

    async fn connect(&self, topic: &str) -> Result<KafkaSource, consumer::backend::Error> {
        self.create(topic).await;
        let source = self.source_builder(topic).connect().await?;
        self.metrics
            .lock()
            .expect("metrics")
            .entry(topic.to_owned())
            .or_default()
            .push(source.stats());
        Ok(source)
    }

    /// Kafka has no "drained" event either: offsets not committed and the
    /// sources' in-flight counts, polled.
    async fn wait_drained(&self, topic: &str) {
        support::until_drained(Duration::from_millis(50), || self.unsettled(topic)).await;
    }

    async fn dead_letters(&self, topic: &str) -> Vec<Message> {
        self.read_dead_letters(topic).await
    }

    async fn depth(&self, topic: &str) -> usize {
        self.unsettled(topic).await
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
