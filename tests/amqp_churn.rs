//! Partitioned RabbitMQ queues through consumer churn (needs RabbitMQ:
//! `AMQP_URL`; PostgreSQL: `DATABASE_URL`; and the python with pika that
//! `scripts/tools cloudevents-sdk` makes, `CLOUDEVENTS_SDK_PYTHON`).
//!
//! Three consumer processes share 8 partition queues; an outside producer
//! (scripts/partitioned_producer.py, pika) places 64 keys on
//! `murmur2(key) % 8` as our publishers do, the keys with an even index with
//! publisher confirms and the others without. Consumer processes are
//! SIGKILLed and started again (with a new instance id, as a restarted
//! process has) while the producer publishes and again while the backlog is
//! worked off. What must hold:
//!
//! * every confirmed message is processed, and exactly once;
//! * no message is processed twice, and every key's messages run in order:
//!   each handler records the highest sequence number of its key committed
//!   before it ran, which must be its predecessor's (a message that ran
//!   while its predecessor was uncommitted elsewhere, or after a successor
//!   committed, shows there);
//! * an unconfirmed message that was not processed is accounted for: still
//!   in a partition or delay queue, or in the dead-letter queue (the
//!   producer's connection stays up, so the broker has no other way to lose
//!   one here);
//! * each key was consumed from the partition queue our publishers pick.
//!
//! The test prints, for each kill, how long until every partition the killed
//! process held was being consumed again (the takeover time).

mod conformance;
mod tools;

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::Duration;

use consumer::amqp::{PartitionedSource, PartitionedTopology, QueueType};
use consumer::{Consumer, PgTx, Store, handler};

use crate::conformance::amqp::{amqp_url, connect, unique_prefix};
use crate::conformance::scale_out::{INSTANCE_ENV, instance};
use crate::conformance::support::{Harness, Job, JobError, PgHarness};

const CHILD_ENV: &str = "CONSUMER_CHURN_CHILD";
const PARTITIONS: u32 = 8;

/// Records the job with the highest sequence number of its key committed
/// before it ran.
#[handler(idempotency_key = job.id)]
async fn record_after_predecessor(
    job: Job,
    tx: &mut PgTx,
    ctx: &consumer::MessageContext,
) -> Result<(), JobError> {
    record(job, tx, ctx).await
}

/// The same, for the layout at its defaults: a handler that retries
/// through the broker, so that the topology declares delay queues sized to
/// its longest delay (200 ms: 16 ms to 256 ms).
#[handler(
    idempotency_key = job.id,
    retry = exponential(base = "10ms", max_delay = "200ms", attempts = 5, mode = redeliver),
)]
async fn record_after_predecessor_redelivering(
    job: Job,
    tx: &mut PgTx,
    ctx: &consumer::MessageContext,
) -> Result<(), JobError> {
    record(job, tx, ctx).await
}

async fn record(job: Job, tx: &mut PgTx, ctx: &consumer::MessageContext) -> Result<(), JobError> {
    let before: Option<i64> =
        sqlx::query_scalar("SELECT max(seq) FROM churn_effects WHERE key = $1")
            .bind(&job.key)
            .fetch_one(&mut **tx)
            .await?;
    sqlx::query(
        "INSERT INTO churn_effects (job_id, key, seq, before, instance, queue) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(&job.id)
    .bind(&job.key)
    .bind(job.seq)
    .bind(before)
    .bind(instance())
    .bind(ctx.envelope().origin.channel.as_str())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// The test topology: with `capped`, delay queues up to 256 ms whatever
/// the handler; else the defaults (sized to the handler's longest delay).
fn topology(queue: &str, queue_type: QueueType, capped: bool) -> PartitionedTopology {
    let t = PartitionedTopology::new(queue, PARTITIONS)
        .expect("valid test queue name")
        .with_queue_type(queue_type)
        .with_expires(Duration::from_secs(600));
    if capped {
        t.with_max_retry_delay(Duration::from_millis(256))
    } else {
        t
    }
}

fn queue_type_name(t: QueueType) -> &'static str {
    match t {
        QueueType::Quorum => "quorum",
        _ => "classic",
    }
}

/// The body of the consumer processes the churn tests start and kill. Run
/// only as those child processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "entry point of the churn tests' consumer processes"]
async fn child_churn_consumer_process() {
    let spec = std::env::var(CHILD_ENV).unwrap_or_else(|_| {
        panic!("{CHILD_ENV} is unset: this is a child process of the churn tests, not a test of its own")
    });
    let [queue, schema, queue_type, layout] = spec.split(' ').collect::<Vec<_>>()[..] else {
        panic!("{CHILD_ENV} is `queue schema quorum|classic capped|defaults`");
    };
    let capped = layout == "capped";
    let queue_type = match queue_type {
        "quorum" => QueueType::Quorum,
        _ => QueueType::Classic,
    };
    // The parent keeps each process's log (its stderr) for a failure report.
    tracing_subscriber::fmt()
        .with_env_filter("consumer::amqp=info,consumer=warn")
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let pool = consumer::testing::FreshSchema::pool_on(schema, 8)
        .await
        .expect("child pool");
    let source = PartitionedSource::builder(amqp_url(), topology(queue, queue_type, capped))
        .with_instance_id(instance())
        .build()
        .expect("a partitioned source");
    let mut assignment = source.assignment();
    let log = pool.clone();
    tokio::spawn(async move {
        while assignment.changed().await.is_ok() {
            let now = assignment.borrow_and_update().clone();
            if let Some(p) = now {
                let _ = sqlx::query(
                    "INSERT INTO churn_assignments (instance, partitions) VALUES ($1, $2)",
                )
                .bind(instance())
                .bind(
                    p.iter()
                        .map(|p| i32::try_from(*p).unwrap_or(i32::MAX))
                        .collect::<Vec<i32>>(),
                )
                .execute(&log)
                .await;
            }
        }
    });
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    let stop = async move {
        terminate.recv().await;
    };
    if capped {
        Consumer::new(source, Store::new(pool), record_after_predecessor)
            .run_until(stop)
            .await
    } else {
        Consumer::new(
            source,
            Store::new(pool),
            record_after_predecessor_redelivering,
        )
        .run_until(stop)
        .await
    }
    .expect("child consumer");
}

/// A consumer process: this test binary run again on
/// `child_churn_consumer_process`, its log in a file. Dropping it
/// SIGKILLs it.
struct ConsumerProcess {
    id: String,
    child: std::process::Child,
}

impl ConsumerProcess {
    fn spawn(id: &str, spec: &str, logs: &std::path::Path) -> Self {
        let log = std::fs::File::create(logs.join(format!("{id}.log"))).expect("log file");
        let child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--ignored",
                "--exact",
                "child_churn_consumer_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, spec)
            .env(INSTANCE_ENV, id)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn a consumer process");
        Self {
            id: id.to_owned(),
            child,
        }
    }

    /// SIGKILL, then reap.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits for the process to finish its shutdown.
    async fn terminate(&mut self) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill(1)");
        assert!(sent.success(), "SIGTERM to consumer process {}", self.id);
        let ended = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                match self.child.try_wait().expect("wait") {
                    Some(status) => return status,
                    // Polls the process (there is no event to await here).
                    None => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        })
        .await;
        let status = ended.unwrap_or_else(|_| {
            panic!(
                "consumer process {} did not stop within 60 s of SIGTERM",
                self.id
            )
        });
        assert!(
            status.success(),
            "consumer process {} stopped with {status}",
            self.id
        );
    }
}

impl Drop for ConsumerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The producer's python: `CLOUDEVENTS_SDK_PYTHON`, else the venv
/// `scripts/tools cloudevents-sdk` makes (it has pika).
fn producer_python() -> String {
    tools::Venv {
        env: "CLOUDEVENTS_SDK_PYTHON",
        dir: "cloudevents-venv",
        tool: "cloudevents-sdk",
        imports: "import pika",
        needs: "pika",
    }
    .python()
}

const PRODUCER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/scripts/partitioned_producer.py"
);

/// What the producer said, line by line.
enum Said {
    Published(usize),
    Refused(String),
    Done {
        confirmed: usize,
        unconfirmed: usize,
    },
    Ended(String),
}

/// Starts the producer; its lines arrive on the returned channel.
fn start_producer(
    queue: &str,
    keys: usize,
    per_key: usize,
    confirm: &str,
    rate: u32,
) -> (
    std::process::Child,
    tokio::sync::mpsc::UnboundedReceiver<Said>,
) {
    let mut child = Command::new(producer_python())
        .arg(PRODUCER)
        .args([
            "publish",
            &amqp_url(),
            queue,
            &PARTITIONS.to_string(),
            &keys.to_string(),
            &per_key.to_string(),
            "--confirm",
            confirm,
            "--rate",
            &rate.to_string(),
            "--progress-every",
            "250",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {PRODUCER}: {e}"));
    let stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let words: Vec<&str> = line.split(' ').collect();
            let said = match words[..] {
                ["published", n] => Said::Published(n.parse().expect("a count")),
                ["refused", id, ..] => Said::Refused(id.to_owned()),
                ["done", c, u] => Said::Done {
                    confirmed: c.parse().expect("a count"),
                    unconfirmed: u.parse().expect("a count"),
                },
                _ => Said::Ended(format!("unexpected producer output: {line}")),
            };
            if tx.send(said).is_err() {
                return;
            }
        }
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut std::io::BufReader::new(stderr), &mut rest);
        let _ = tx.send(Said::Ended(rest));
    });
    (child, rx)
}

/// How a consumer process was stopped.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// SIGKILL: it dies with its work in flight.
    Kill,
    /// SIGTERM: it finishes what runs, gives back the rest and says goodbye.
    Leave,
}

/// A stop: how, who, when (PostgreSQL's clock, as the effects), what it held.
struct Kill {
    phase: &'static str,
    how: Stop,
    victim: String,
    at: f64,
    held: Vec<i32>,
}

struct Churn {
    h: PgHarness,
    queue: String,
    topology: PartitionedTopology,
    spec: String,
    logs: std::path::PathBuf,
    slots: Vec<ConsumerProcess>,
    restarts: usize,
    kills: Vec<Kill>,
}

impl Churn {
    async fn new(tag: &str, queue_type: QueueType, instances: usize, capped: bool) -> Self {
        let h = PgHarness::new().await;
        for ddl in [
            "CREATE TABLE churn_effects (id BIGSERIAL PRIMARY KEY, job_id TEXT NOT NULL, \
             key TEXT NOT NULL, seq BIGINT NOT NULL, before BIGINT, instance TEXT NOT NULL, \
             queue TEXT NOT NULL, at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())",
            "CREATE INDEX ON churn_effects (key, seq)",
            "CREATE TABLE churn_assignments (instance TEXT NOT NULL, partitions INT[] NOT NULL, \
             at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())",
        ] {
            sqlx::query(ddl).execute(h.pool()).await.expect(ddl);
        }
        let queue = unique_prefix(tag);
        let topology = topology(&queue, queue_type, capped);
        // The producer publishes to the partition queues: they must exist
        // before it starts. At the defaults the consumer processes declare
        // them, all at once (the producer starts once each has its share).
        if capped {
            let conn = connect().await;
            let channel = conn.create_channel().await.expect("channel");
            topology
                .declare(&channel)
                .await
                .expect("declare the partition queues");
            let _ = conn.close(200, "declared".into()).await;
        }
        let logs = std::env::temp_dir().join("consumer-churn").join(&queue);
        std::fs::create_dir_all(&logs).expect("log dir");
        let spec = format!(
            "{queue} {} {} {}",
            h.schema,
            queue_type_name(queue_type),
            if capped { "capped" } else { "defaults" }
        );
        let slots = (1..=instances)
            .map(|n| ConsumerProcess::spawn(&format!("c{n}"), &spec, &logs))
            .collect();
        let churn = Self {
            h,
            queue,
            topology,
            spec,
            logs,
            slots,
            restarts: 0,
            kills: Vec::new(),
        };
        for slot in &churn.slots {
            churn.wait_assigned(&slot.id).await;
        }
        churn
    }

    async fn scalar<T>(&self, sql: &'static str) -> T
    where
        T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
    {
        sqlx::query_scalar(sql)
            .fetch_one(self.h.pool())
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    async fn processed(&self) -> i64 {
        self.scalar("SELECT count(DISTINCT job_id) FROM churn_effects")
            .await
    }

    /// The partitions `id` last said it was assigned.
    async fn held_by(&self, id: &str) -> Option<Vec<i32>> {
        sqlx::query_scalar(
            "SELECT partitions FROM churn_assignments WHERE instance = $1 ORDER BY at DESC LIMIT 1",
        )
        .bind(id)
        .fetch_optional(self.h.pool())
        .await
        .expect("assignments")
    }

    /// Polls the assignments table until `id` has taken a share.
    async fn wait_assigned(&self, id: &str) {
        let waited = tokio::time::timeout(Duration::from_secs(60), async {
            while self.held_by(id).await.is_none_or(|p| p.is_empty()) {
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        })
        .await;
        assert!(
            waited.is_ok(),
            "consumer process {id} took no partitions within 60 s: see its log in {}",
            self.logs.display()
        );
    }

    /// Stops the next process in turn (`how`) and starts another in its
    /// place, as a restarted process: with a new instance id.
    async fn stop_one(&mut self, phase: &'static str, how: Stop) {
        let n = self.kills.len() % self.slots.len();
        let victim = self.slots[n].id.clone();
        let held = self.held_by(&victim).await.unwrap_or_default();
        match how {
            Stop::Kill => self.slots[n].kill(),
            Stop::Leave => self.slots[n].terminate().await,
        }
        let at: f64 = self
            .scalar("SELECT extract(epoch FROM clock_timestamp())::float8")
            .await;
        self.restarts += 1;
        let id = format!("c{}.r{}", n + 1, self.restarts);
        self.slots[n] = ConsumerProcess::spawn(&id, &self.spec, &self.logs);
        self.kills.push(Kill {
            phase,
            how,
            victim,
            at,
            held,
        });
    }

    /// The partition queues the consumer processes reported crashed (their
    /// ERROR line), with the line.
    fn crashed_queues(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let Ok(dir) = std::fs::read_dir(&self.logs) else {
            return out;
        };
        for entry in dir.flatten() {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            for line in text.lines().filter(|l| l.contains(" ERROR ")) {
                if let Some(queue) = line
                    .split_once("RabbitMQ reports queue `")
                    .and_then(|(_, rest)| rest.split_once('`'))
                    .map(|(queue, _)| queue.to_owned())
                {
                    out.insert(queue, line.to_owned());
                }
            }
        }
        out
    }

    /// Messages processed, those of partitions whose queue crashed left
    /// out, and how many of the published ones that leaves.
    async fn processed_outside(&self, crashed: &BTreeSet<String>, plan: &Plan) -> (i64, i64) {
        let crashed: Vec<String> = crashed.iter().cloned().collect();
        let done: i64 = sqlx::query_scalar(
            "SELECT count(DISTINCT job_id) FROM churn_effects WHERE NOT (queue = ANY($1))",
        )
        .bind(&crashed)
        .fetch_one(self.h.pool())
        .await
        .expect("effects");
        let healthy_keys = (0..plan.keys)
            .filter(|k| {
                !crashed.contains(&self.topology.queue_for_key(format!("order-{k}").as_bytes()))
            })
            .count();
        (
            done,
            i64::try_from(healthy_keys * plan.per_key).expect("fits"),
        )
    }

    /// For each kill, how long until every partition the killed process
    /// held had an effect committed by another process (`None` when one of
    /// them had no work left).
    async fn takeovers(&self) -> Vec<Option<f64>> {
        let mut out = Vec::new();
        for kill in &self.kills {
            let mut longest: Option<f64> = Some(0.0);
            for p in &kill.held {
                let first: Option<f64> = sqlx::query_scalar(
                    "SELECT extract(epoch FROM min(at))::float8 FROM churn_effects \
                     WHERE queue = $1 AND instance <> $2 AND at > to_timestamp($3)",
                )
                .bind(
                    self.topology
                        .partition_queue(u32::try_from(*p).expect("a partition")),
                )
                .bind(&kill.victim)
                .bind(kill.at)
                .fetch_one(self.h.pool())
                .await
                .expect("takeover");
                longest = match (longest, first) {
                    (Some(l), Some(f)) => Some(l.max(f - kill.at)),
                    _ => None,
                };
            }
            out.push(longest);
        }
        out
    }

    /// Every message id waiting in the partition, delay and dead-letter
    /// queues (read with `basic.get` and put back).
    async fn ids_in_queues(&self) -> BTreeMap<String, String> {
        let mut queues: Vec<String> = (0..PARTITIONS)
            .map(|p| self.topology.partition_queue(p))
            .collect();
        queues.extend(self.topology.delay_queues().into_iter().map(|(_, q)| q));
        queues.push(self.topology.dead_letter_queue());
        let mut out = BTreeMap::new();
        for queue in queues {
            for message in crate::conformance::amqp::read_in_place(&queue).await {
                // Under the name its producer wrote (`ce-id` from our
                // publisher, `ce_id` on a retry copy's pin).
                let id = consumer::envelope::attribute(&message.headers, "id")
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .unwrap_or_default();
                out.insert(id, queue.clone());
            }
        }
        out
    }
}

/// What the run's effects say.
struct Figures {
    rows: i64,
    processed: BTreeSet<String>,
    inversions: Vec<String>,
    misplaced: Vec<String>,
}

async fn figures(churn: &Churn) -> Figures {
    let rows: Vec<(String, String, i64, Option<i64>, String)> =
        sqlx::query_as("SELECT job_id, key, seq, before, queue FROM churn_effects ORDER BY id")
            .fetch_all(churn.h.pool())
            .await
            .expect("effects");
    let mut seqs: BTreeMap<&str, BTreeSet<i64>> = BTreeMap::new();
    for (_, key, seq, _, _) in &rows {
        seqs.entry(key).or_default().insert(*seq);
    }
    let mut inversions = Vec::new();
    let mut misplaced = Vec::new();
    for (job_id, key, seq, before, queue) in &rows {
        // The predecessor that was processed: what must have been committed
        // before this one ran.
        let predecessor = seqs[key.as_str()].range(..*seq).next_back().copied();
        if *before != predecessor {
            inversions.push(format!(
                "{job_id} ran after seq {before:?} of its key, not after {predecessor:?}"
            ));
        }
        if *queue != churn.topology.queue_for_key(key.as_bytes()) {
            misplaced.push(format!("{job_id} was consumed from {queue}"));
        }
    }
    Figures {
        rows: i64::try_from(rows.len()).expect("fits"),
        processed: rows.iter().map(|r| r.0.clone()).collect(),
        inversions,
        misplaced,
    }
}

/// The plan of one churn run.
struct Plan {
    tag: &'static str,
    queue_type: QueueType,
    instances: usize,
    keys: usize,
    per_key: usize,
    /// Producer rate, messages per second (0: as fast as it can).
    rate: u32,
    kills_while_publishing: usize,
    kills_while_draining: usize,
    /// SIGTERMs among the stops while draining (the graceful leave).
    leaves_while_draining: usize,
    /// Whether RabbitMQ may crash a partition queue (classic queues,
    /// rabbitmq-server#5460): its messages are then accounted as held in a
    /// crashed queue, which the consumers must have reported, rather than
    /// waited for.
    crash_is_the_brokers: bool,
    /// Delay queues up to 256 ms declared by the test itself, or the
    /// defaults: sized to the handler (200 ms), declared by the consumers.
    capped: bool,
}

async fn run(plan: Plan) {
    let total = plan.keys * plan.per_key;
    let mut churn = Churn::new(plan.tag, plan.queue_type, plan.instances, plan.capped).await;
    let (mut producer, mut said) = start_producer(
        &churn.queue,
        plan.keys,
        plan.per_key,
        "even-keys",
        plan.rate,
    );

    // Kills while publishing: at even steps of the producer's progress.
    let mut refused: BTreeSet<String> = BTreeSet::new();
    let (confirmed, unconfirmed) = loop {
        match said.recv().await {
            Some(Said::Published(n)) => {
                let due = (churn.kills.len() + 1) * total / (plan.kills_while_publishing + 1);
                if churn.kills.len() < plan.kills_while_publishing && n >= due {
                    churn.stop_one("publishing", Stop::Kill).await;
                }
            }
            Some(Said::Refused(id)) => {
                refused.insert(id);
            }
            Some(Said::Done {
                confirmed,
                unconfirmed,
            }) => break (confirmed, unconfirmed),
            Some(Said::Ended(why)) => panic!("the producer stopped: {why}"),
            None => panic!("the producer stopped without a word"),
        }
    };
    let _ = producer.wait();
    assert_eq!(
        churn.kills.len(),
        plan.kills_while_publishing,
        "every kill planned during the publishing happened during it"
    );
    let published = i64::try_from(confirmed + unconfirmed).expect("fits");

    // Stops while the backlog is worked off: at even steps of what was
    // left when the producer finished (polling the effects table), a leave
    // among them every so often.
    let left = published - churn.processed().await;
    println!(
        "{}: published {published} ({confirmed} confirmed, {unconfirmed} without confirms, {} refused); \
         {left} left to process when the producer finished",
        plan.tag,
        refused.len()
    );
    let stops = plan.kills_while_draining + plan.leaves_while_draining;
    assert!(
        left > i64::try_from(stops * 100).expect("fits"),
        "the consumers kept up with the producer ({left} left): there is no backlog to stop them in; \
         raise the producer's rate"
    );
    let from = published - left;
    let leaves: BTreeSet<usize> = (1..=plan.leaves_while_draining)
        .map(|i| i * (stops + 1) / (plan.leaves_while_draining + 1))
        .collect();
    for k in 1..=stops {
        let due =
            from + left * i64::try_from(k).expect("fits") / i64::try_from(stops + 1).expect("fits");
        wait_processed(&churn, due, &plan).await;
        let how = if leaves.contains(&k) {
            Stop::Leave
        } else {
            Stop::Kill
        };
        churn.stop_one("draining", how).await;
    }
    wait_processed(&churn, published, &plan).await;
    let processed_at_end = churn.processed().await;
    churn.slots.clear();

    // Figures.
    let takeovers = churn.takeovers().await;
    for (n, (kill, t)) in churn.kills.iter().zip(&takeovers).enumerate() {
        println!(
            "{}: stop {:2} ({}, {}): {} held partitions {:?}; taken over after {}",
            plan.tag,
            n + 1,
            kill.phase,
            match kill.how {
                Stop::Kill => "SIGKILL",
                Stop::Leave => "SIGTERM",
            },
            kill.victim,
            kill.held,
            t.map_or_else(
                || "- (nothing left to process there)".to_owned(),
                |t| format!("{t:.2} s")
            ),
        );
    }
    let sigkill_takeovers: Vec<f64> = churn
        .kills
        .iter()
        .zip(&takeovers)
        .filter(|(k, _)| k.how == Stop::Kill)
        .filter_map(|(_, t)| *t)
        .collect();
    let crashed = churn.crashed_queues();
    let f = figures(&churn).await;
    let duplicates = f.rows - i64::try_from(f.processed.len()).expect("fits");
    let mut lost_confirmed = Vec::new();
    let mut missing_unconfirmed = Vec::new();
    let mut in_crashed = 0;
    for seq in 0..plan.per_key {
        for k in 0..plan.keys {
            let id = format!("order-{k}-{seq}");
            if f.processed.contains(&id) || refused.contains(&id) {
                continue;
            }
            if crashed.contains_key(
                &churn
                    .topology
                    .queue_for_key(format!("order-{k}").as_bytes()),
            ) {
                in_crashed += 1;
            } else if k % 2 == 0 {
                lost_confirmed.push(id);
            } else {
                missing_unconfirmed.push(id);
            }
        }
    }
    let waiting = if missing_unconfirmed.is_empty() && lost_confirmed.is_empty() {
        BTreeMap::new()
    } else {
        churn.ids_in_queues().await
    };
    let unaccounted: Vec<&String> = missing_unconfirmed
        .iter()
        .filter(|id| !waiting.contains_key(*id))
        .collect();
    println!(
        "{}: {} SIGKILLs and {} SIGTERMs over {total} messages: processed {processed_at_end}, \
         lost among confirmed {}, missing without confirms {} (in a queue {}, unaccounted {}), \
         held in a crashed queue {in_crashed} ({:?}), applied twice {duplicates}, inversions {}; \
         takeover after a SIGKILL {:.2} to {:.2} s",
        plan.tag,
        churn.kills.iter().filter(|k| k.how == Stop::Kill).count(),
        churn.kills.iter().filter(|k| k.how == Stop::Leave).count(),
        lost_confirmed.len(),
        missing_unconfirmed.len(),
        missing_unconfirmed.len() - unaccounted.len(),
        unaccounted.len(),
        crashed.keys().collect::<Vec<_>>(),
        f.inversions.len(),
        sigkill_takeovers
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min),
        sigkill_takeovers.iter().copied().fold(0.0, f64::max),
    );
    let logs = churn.logs.display();
    assert!(
        crashed.is_empty() || plan.crash_is_the_brokers,
        "consumers reported partition queues crashed: {crashed:#?} (logs in {logs})"
    );
    for queue in crashed.keys() {
        assert!(
            crate::conformance::amqp::is_crashed(queue).await,
            "a consumer reported {queue} crashed, and RabbitMQ does not say so"
        );
    }
    assert!(
        lost_confirmed.is_empty(),
        "confirmed messages never processed: {:?} (in queues: {:?}; logs in {logs})",
        &lost_confirmed[..lost_confirmed.len().min(20)],
        lost_confirmed
            .iter()
            .filter_map(|id| waiting.get(id).map(|q| (id, q)))
            .take(20)
            .collect::<Vec<_>>()
    );
    assert_eq!(duplicates, 0, "messages applied twice (logs in {logs})");
    assert!(
        f.inversions.is_empty(),
        "{} per-key order inversions, first ones: {:?} (logs in {logs})",
        f.inversions.len(),
        &f.inversions[..f.inversions.len().min(20)]
    );
    assert!(
        f.misplaced.is_empty(),
        "the producer placed keys on other partitions than our publishers: {:?}",
        &f.misplaced[..f.misplaced.len().min(20)]
    );
    assert!(
        unaccounted.is_empty(),
        "messages published without confirms are missing and in no queue: {:?}",
        &unaccounted[..unaccounted.len().min(20)]
    );
    assert_eq!(
        churn.kills.iter().filter(|k| k.how == Stop::Kill).count(),
        plan.kills_while_publishing + plan.kills_while_draining,
        "every SIGKILL planned happened"
    );
    assert_eq!(
        churn.kills.iter().filter(|k| k.how == Stop::Leave).count(),
        plan.leaves_while_draining,
        "every SIGTERM planned happened"
    );
}

/// Polls the effects table until `n` messages are processed (or, once a
/// partition queue was reported crashed and the plan allows it, every
/// message of the other partitions); fails after five minutes without one
/// more.
async fn wait_processed(churn: &Churn, n: i64, plan: &Plan) {
    let mut last = -1;
    let mut since = tokio::time::Instant::now();
    loop {
        let now = churn.processed().await;
        if now >= n {
            return;
        }
        if plan.crash_is_the_brokers {
            let crashed: BTreeSet<String> = churn.crashed_queues().into_keys().collect();
            if !crashed.is_empty() {
                let (done, all) = churn.processed_outside(&crashed, plan).await;
                if done >= all {
                    return;
                }
            }
        }
        if now != last {
            (last, since) = (now, tokio::time::Instant::now());
        }
        assert!(
            since.elapsed() < Duration::from_secs(300),
            "stuck at {now} of {n} processed messages for 5 minutes (logs in {})",
            churn.logs.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_partitions_keep_every_key_in_order_through_16_sigkills() {
    run(Plan {
        tag: "churnq",
        queue_type: QueueType::Quorum,
        instances: 3,
        keys: 64,
        per_key: 625,
        rate: 4000,
        kills_while_publishing: 8,
        kills_while_draining: 8,
        leaves_while_draining: 2,
        crash_is_the_brokers: false,
        capped: true,
    })
    .await;
}

/// Classic partition queues, where a user keeps them: the same promise,
/// except that RabbitMQ may crash one (rabbitmq-server#5460); its messages
/// then wait in it, and the consumers must have said so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_partitions_keep_every_key_in_order_through_16_sigkills() {
    run(Plan {
        tag: "churnc",
        queue_type: QueueType::Classic,
        instances: 3,
        keys: 64,
        per_key: 625,
        rate: 4000,
        kills_while_publishing: 8,
        kills_while_draining: 8,
        leaves_while_draining: 2,
        crash_is_the_brokers: true,
        capped: true,
    })
    .await;
}

/// Two services deploying together on one RabbitMQ node: two partitioned
/// topologies at their defaults (8 quorum partition queues each, a handler
/// whose longest retry delay is 200 ms), three consumer processes each,
/// all started at once, then each consuming a backlog from an outside
/// producer through SIGKILLs. At the old defaults (a delay queue per bucket
/// up to 1 h, per partition: about 161 quorum queues a topology) this made
/// the node's queues unresponsive within a minute; at the defaults now
/// each topology declares 14. Throughout, the node answers
/// `rabbitmqctl list_queues` within its timeout (read every 2 s), and
/// nothing is lost, done twice or reordered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_partitioned_topologies_started_together_keep_the_broker_answering() {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let watch = tokio::task::spawn_blocking(move || watch_list_queues(stopped));
    let plan = |tag| Plan {
        tag,
        queue_type: QueueType::Quorum,
        instances: 3,
        keys: 32,
        per_key: 200,
        rate: 2000,
        kills_while_publishing: 2,
        kills_while_draining: 3,
        leaves_while_draining: 0,
        crash_is_the_brokers: false,
        capped: false,
    };
    tokio::join!(run(plan("twoa")), run(plan("twob")));
    let _ = stop.send(());
    let answers = watch.await.expect("the list_queues watch");
    let slowest = answers.iter().copied().fold(0.0, f64::max);
    println!(
        "rabbitmqctl list_queues answered {} times, the slowest in {slowest:.2} s",
        answers.len()
    );
}

/// Runs `rabbitmqctl list_queues` (a 30 s timeout of its own) every 2 s
/// until `stop`; panics, naming RabbitMQ, when one does not answer or says
/// queues are unresponsive. Returns how long each took; empty where there
/// is no `rabbitmqctl` (a broker on another machine).
fn watch_list_queues(mut stop: tokio::sync::oneshot::Receiver<()>) -> Vec<f64> {
    use tokio::sync::oneshot::error::TryRecvError;
    let mut took = Vec::new();
    loop {
        let t0 = std::time::Instant::now();
        let Ok(out) = Command::new("timeout")
            .args([
                "60",
                "rabbitmqctl",
                "-q",
                "list_queues",
                "--no-table-headers",
                "--timeout",
                "30",
                "name",
            ])
            .stdin(Stdio::null())
            .output()
        else {
            return took;
        };
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && !text.contains("unresponsive"),
            "RabbitMQ did not answer `rabbitmqctl list_queues` within its 30 s timeout while two partitioned topologies ran ({}): {}",
            out.status,
            text.lines().rev().take(5).collect::<Vec<_>>().join(" / ")
        );
        took.push(t0.elapsed().as_secs_f64());
        for _ in 0..20 {
            if !matches!(stop.try_recv(), Err(TryRecvError::Empty)) {
                return took;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
