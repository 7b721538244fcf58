//! Sagas under SIGKILL: real consumer processes killed between a
//! transition's commit and its ack, and between two steps, on Kafka,
//! RabbitMQ and SQS (a FIFO queue), each with PostgreSQL and with SQLite. After each kill a new
//! process takes over; in the end the saga holds exactly one transition
//! per step, one outbox row per command and one timeout row.
//!
//! The consumers are child processes (this test binary re-run with
//! `--ignored --exact child_saga_process`). A child whose acks hang
//! (`Faults::stall_acks`) is killed once its commit is in the database; a
//! child whose second step hangs inside its transition (before its commit)
//! is killed once it says so. The memory broker lives in its process, so it
//! cannot outlive a kill: the suite's `a_saga_crash_between_commit_and_ack_*`
//! case covers it with a simulated crash.
//!
//! Needs PostgreSQL (`DATABASE_URL`), RabbitMQ (`AMQP_URL`) and an SQS
//! emulator (`scripts/services sqs` starts moto; `SQS_ENDPOINT`); Kafka is
//! librdkafka's mock cluster, hosted by the parent test.

mod conformance;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use consumer::amqp::{AmqpSource, QueueType};
use consumer::kafka::{KafkaSource, Topics};
use consumer::saga::{NotFound, SagaBuilder, SagaHandler, SagaStore, Step};
use consumer::sqs::{SqsClient, SqsSource, Topology};
use consumer::testing::{Faults, FaultySource, FreshSchema};
use consumer::{Consumer, Message, Outbox, Router, Saga, Store, source::Source};
use serde::{Deserialize, Serialize};

use conformance::broker::BrokerHarness;
use conformance::{amqp::AmqpBroker, kafka::MockKafka, sqs::SqsBroker, support};

const CHILD_ENV: &str = "SAGA_CRASH_CHILD";

// ---------------------------------------------------------------------------
// The saga: `Open` starts it (a command and a timeout an hour away), `Add`
// adds a note (a command); a note `hold` hangs a child in `hold` mode.

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Note {
    saga: String,
    note: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Notes {
    notes: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

struct Noted;

impl Saga for Noted {
    type State = Notes;
    type Error = Never;

    fn name(&self) -> &'static str {
        "noted"
    }
}

/// Set in a child of mode `hold`: a `hold` note hangs its transition.
static HOLD: AtomicBool = AtomicBool::new(false);

impl Noted {
    fn open(&self, s: &mut Notes, e: Note, step: &mut Step<'_>) -> Result<(), Never> {
        s.notes.push(e.note.clone());
        step.send("sink", "Opened", &e);
        step.schedule_timeout("Expire", &e, Duration::from_secs(3600));
        Ok(())
    }

    fn add(&self, s: &mut Notes, e: Note, step: &mut Step<'_>) -> Result<(), Never> {
        if HOLD.load(Ordering::SeqCst) && e.note == "hold" {
            println!("holding {}", step.version());
            tokio::task::block_in_place(|| {
                loop {
                    std::thread::park();
                }
            });
        }
        s.notes.push(e.note.clone());
        step.send("sink", "Added", &e);
        Ok(())
    }

    fn expire(&self, _s: &mut Notes, _e: Note, step: &mut Step<'_>) -> Result<(), Never> {
        step.fail("expired");
        Ok(())
    }
}

fn noted() -> SagaHandler<Noted> {
    let saga = |e: &Note| e.saga.clone();
    SagaBuilder::new(Noted, Outbox::new())
        .on("Open", saga, NotFound::Start, Noted::open)
        .on("Add", saga, NotFound::Ignore, Noted::add)
        .on_timeout("Expire", Noted::expire)
        .build()
        .expect("a valid saga")
}

fn note(saga: &str, kind: &str, note: &str) -> Message {
    let n = Note {
        saga: saga.into(),
        note: note.into(),
    };
    Message::json(kind, &n).expect("json").with_key(saga)
}

// ---------------------------------------------------------------------------
// The child process.

/// What a child consumes, from where, into which store, and how it
/// misbehaves.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ChildSpec {
    /// `kafka <bootstrap> <topic> <group>`, `amqp <queue>` or `sqs <queue>`.
    broker: Vec<String>,
    /// `pg <schema>` or `sqlite <path>`.
    store: Vec<String>,
    /// `stall-acks`, `hold` or `normal`.
    mode: String,
}

async fn run_child<Src: Source, DB: consumer::saga::SagaDatabase>(
    source: Src,
    store: Store<DB>,
    mode: &str,
) {
    let faults = Faults::new();
    match mode {
        "stall-acks" => faults.stall_acks(),
        "hold" => HOLD.store(true, Ordering::SeqCst),
        _ => {}
    }
    let router = Router::builder("noted")
        .route(noted())
        .build()
        .expect("router");
    let consumer =
        Consumer::router(FaultySource::new(source, faults), store, router).with_max_in_flight(4);
    println!("consuming");
    consumer
        .run_until(std::future::pending())
        .await
        .expect("child consumer");
}

async fn sqlite_pool(path: &str) -> sqlx::SqlitePool {
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(30));
    sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .expect("the SQLite file")
}

fn amqp_topology(queue: &str) -> consumer::amqp::Topology {
    conformance::amqp::test_topology_of(queue, QueueType::Classic)
        .with_max_retry_delay(Duration::from_millis(256))
}

async fn child_with_store<Src: Source>(source: Src, spec: &ChildSpec) {
    match spec.store[0].as_str() {
        "pg" => {
            let pool = FreshSchema::pool_on(&spec.store[1], 4)
                .await
                .expect("PostgreSQL");
            run_child(source, Store::new(pool), &spec.mode).await;
        }
        _ => {
            run_child(
                source,
                Store::new(sqlite_pool(&spec.store[1]).await),
                &spec.mode,
            )
            .await
        }
    }
}

/// The consumer process the parent tests SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "entry point of the child processes of the saga crash tests"]
async fn child_saga_process() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let spec: ChildSpec = serde_json::from_str(&spec).expect("a child spec");
    match spec.broker[0].as_str() {
        "kafka" => {
            let topics = Topics::new(&spec.broker[2])
                .expect("topic")
                .without_retry_topic();
            let source = KafkaSource::builder(&spec.broker[1], &spec.broker[3], topics)
                .with_property("session.timeout.ms", "6000")
                .with_property("heartbeat.interval.ms", "500")
                .connect()
                .await
                .expect("the child's Kafka source");
            child_with_store(source, &spec).await;
        }
        "sqs" => {
            // The harness's queue; an unacked delivery comes back 3 s
            // after its receive.
            let topology = Topology::new(&spec.broker[1])
                .expect("the test queue's name")
                .with_max_receive_count(1000);
            let source =
                SqsSource::builder(SqsClient::from_api(conformance::sqs::real_api()), topology)
                    .with_wait_time(Duration::from_secs(1))
                    .with_visibility_timeout(Duration::from_secs(3))
                    .connect()
                    .await
                    .expect("the child's SQS source");
            child_with_store(source, &spec).await;
        }
        _ => {
            let source = AmqpSource::builder(
                conformance::amqp::amqp_url(),
                amqp_topology(&spec.broker[1]),
            )
            .connect()
            .await
            .expect("the child's RabbitMQ source");
            child_with_store(source, &spec).await;
        }
    }
}

// ---------------------------------------------------------------------------
// The parent.

struct ChildProcess {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl ChildProcess {
    fn spawn(spec: &ChildSpec) -> Self {
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--ignored",
                "--exact",
                "child_saga_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, serde_json::to_string(spec).expect("json"))
            .env("DATABASE_URL", support::database_url())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn a child consumer");
        let out = child.stdout.take().expect("the child's stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Self { child, lines }
    }

    /// Waits for a line of the child's that starts with `prefix`.
    async fn wait_for_line(&mut self, prefix: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            match self.lines.try_recv() {
                Ok(line) if line.starts_with(prefix) => return,
                Ok(_) => continue,
                Err(std::sync::mpsc::TryRecvError::Empty) => {}
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    panic!("the child ended before it printed `{prefix}`")
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the child never printed `{prefix}`"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn kill(mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("the child consumer exited ({status}) before it was killed");
        }
        self.child.kill().expect("SIGKILL the child");
        let _ = self.child.wait();
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The store the children share with the parent.
enum SharedStore {
    Pg(FreshSchema),
    Sqlite(String, sqlx::SqlitePool),
}

impl SharedStore {
    async fn pg() -> Self {
        let fresh = FreshSchema::create("ct", 4)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        Store::new(fresh.pool.clone())
            .with_extension(consumer::saga::SagaTables)
            .migrate()
            .await
            .expect("the saga table");
        Self::Pg(fresh)
    }

    async fn sqlite() -> Self {
        let dir = std::env::temp_dir().join("consumer-tests");
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join(format!("saga-crash-{}.db", uuid::Uuid::new_v4().simple()));
        let path = path.to_string_lossy().into_owned();
        let pool = sqlite_pool(&path).await;
        Store::new(pool.clone())
            .with_extension(consumer::saga::SagaTables)
            .migrate()
            .await
            .expect("migrations");
        Self::Sqlite(path, pool)
    }

    fn spec(&self) -> Vec<String> {
        match self {
            Self::Pg(f) => vec!["pg".into(), f.schema.clone()],
            Self::Sqlite(path, _) => vec!["sqlite".into(), path.clone()],
        }
    }

    /// The saga's version, and its history as `(version, event type)`.
    async fn saga(&self, id: &str) -> Option<(i64, Vec<(i64, String)>, u64)> {
        let record = match self {
            Self::Pg(f) => SagaStore::new(f.pool.clone()).get("noted", id).await,
            Self::Sqlite(_, pool) => SagaStore::new(pool.clone()).get("noted", id).await,
        }
        .expect("read the saga")?;
        let history = record
            .history
            .iter()
            .map(|h| (h.version(), h.event_type().to_owned()))
            .collect();
        Some((record.version, history, record.timeouts.len() as u64))
    }

    async fn count(&self, sql: &str) -> i64 {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        match self {
            Self::Pg(f) => sqlx::query_scalar(sql).fetch_one(&f.pool).await,
            Self::Sqlite(_, pool) => sqlx::query_scalar(sql).fetch_one(pool).await,
        }
        .expect("count")
    }

    /// Polls until the saga is at `version` (a child committed it).
    async fn wait_version(&self, id: &str, version: i64) {
        support::within(async {
            while self.saga(id).await.is_none_or(|(v, _, _)| v < version) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
    }
}

/// Kills a child between step 1's commit and its ack, another inside
/// step 2's transition (step 1 acked), then lets a third finish: one
/// transition per step, one outbox row per command, one timeout row.
async fn killed_between_commit_and_ack_and_between_steps<B: BrokerHarness>(
    broker: &B,
    child_broker: Vec<String>,
    store: SharedStore,
) {
    let spec = |mode: &str| ChildSpec {
        broker: child_broker.clone(),
        store: store.spec(),
        mode: mode.into(),
    };
    broker.prepare("t").await;
    BrokerHarness::publish(broker, "t", note("s", "Open", "open"))
        .await
        .expect("publish");

    let stalled = ChildProcess::spawn(&spec("stall-acks"));
    store.wait_version("s", 1).await;
    stalled.kill();

    BrokerHarness::publish(broker, "t", note("s", "Add", "hold"))
        .await
        .expect("publish");
    let mut holding = ChildProcess::spawn(&spec("hold"));
    holding.wait_for_line("holding").await;
    holding.kill();
    assert_eq!(
        store.saga("s").await.map(|s| s.0),
        Some(1),
        "step 2 never committed"
    );

    let last = ChildProcess::spawn(&spec("normal"));
    store.wait_version("s", 2).await;
    last.kill();

    let (version, history, timeouts) = store.saga("s").await.expect("the saga");
    assert_eq!(version, 2);
    assert_eq!(
        history,
        [(1, "Open".to_owned()), (2, "Add".to_owned())],
        "one transition per step"
    );
    assert_eq!(timeouts, 1);
    let rows = store
        .count("SELECT count(*) FROM outbox_events WHERE aggregate_type = 'noted'")
        .await;
    assert_eq!(rows, 2, "one outbox row per command");
    let scheduled = store
        .count("SELECT count(*) FROM outbox_events_scheduled WHERE aggregate_type = 'noted'")
        .await;
    assert_eq!(scheduled, 1, "one timeout row");
    let claimed = store
        .count("SELECT count(*) FROM consumer_processed WHERE handler = 'noted'")
        .await;
    assert_eq!(claimed, 2, "one dedup row per step");
}

async fn on_kafka(store: SharedStore) {
    let broker = <MockKafka as BrokerHarness>::new(1).await;
    broker.create("t").await;
    let child = vec![
        "kafka".into(),
        broker.cluster.bootstrap(),
        broker.topic_name("t"),
        broker.group("t"),
    ];
    killed_between_commit_and_ack_and_between_steps(&broker, child, store).await;
}

async fn on_rabbitmq(store: SharedStore) {
    let broker = <AmqpBroker as BrokerHarness>::new(1).await;
    let child = vec!["amqp".into(), broker.queue("t")];
    killed_between_commit_and_ack_and_between_steps(&broker, child, store).await;
}

async fn on_sqs(store: SharedStore) {
    let broker = <SqsBroker as BrokerHarness>::new(1).await;
    let child = vec!["sqs".into(), broker.queue("t")];
    killed_between_commit_and_ack_and_between_steps(&broker, child, store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_and_postgres_saga_processes_killed_mid_transition_leave_one_transition_per_step() {
    on_kafka(SharedStore::pg().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_and_sqlite_saga_processes_killed_mid_transition_leave_one_transition_per_step() {
    on_kafka(SharedStore::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_and_postgres_saga_processes_killed_mid_transition_leave_one_transition_per_step()
{
    on_rabbitmq(SharedStore::pg().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_and_sqlite_saga_processes_killed_mid_transition_leave_one_transition_per_step() {
    on_rabbitmq(SharedStore::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqs_and_postgres_saga_processes_killed_mid_transition_leave_one_transition_per_step() {
    on_sqs(SharedStore::pg().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqs_and_sqlite_saga_processes_killed_mid_transition_leave_one_transition_per_step() {
    on_sqs(SharedStore::sqlite().await).await;
}
