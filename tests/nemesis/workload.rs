//! The campaign's processes, each this test binary run again on
//! `child_campaign_process` with a [`Spec`]: writers committing business
//! rows with outbox events, relays publishing them to the broker under
//! test ([`Backend`]), consumers applying them to a state row with the
//! dedup row, every third effect opening a [settlement](super::settlement)
//! (a follow-up event that starts a saga with a reply timeout, which a
//! participant in the same consumers answers). Each records its part of
//! the [history](super::history).
//! The writers, the handler and the history are the same on every
//! backend; only the relay's publisher and the consumer's source differ.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use consumer::amqp::{AmqpPublisher, PartitionedSource, PartitionedTopology};
use consumer::backend::Source;
use consumer::kafka::{KafkaPublisher, KafkaSource, Topics};
use consumer::sqs::{SqsClient, SqsPublisher, SqsSource};
use consumer::{
    Consumer, MessageContext, NewEvent, Outbox, OutboxRelay, Outgoing, PgTx, Publisher, Router,
    handler,
};
use serde::{Deserialize, Serialize};

use super::history::{HISTORY_DDL, JsonLines, Kind, record_in_tx};
use super::settlement::{self, OPEN_EVERY};
use crate::conformance::links::RELAY_RETRY;

/// The environment variable a child reads its [`Spec`] from.
pub const SPEC_ENV: &str = "CONSUMER_CAMPAIGN_CHILD";

/// Partition queues of the campaign's topology (partitions of its topic
/// on Kafka): few, so three instances hand them over often and the
/// broker's footprint stays small.
pub const PARTITIONS: u32 = 4;

/// The Kafka consumers' session timeout: short, so that a consumer paused
/// past it is a zombie within the run (its partitions go to the others),
/// as `tests/kafka_faults.rs` does.
pub const KAFKA_SESSION: Duration = Duration::from_secs(6);

/// The Kafka consumers' `max.poll.interval.ms`, which is also how long a
/// rebalance waits for a member to rejoin.
pub const KAFKA_MAX_POLL: Duration = Duration::from_secs(8);

/// The handler's name: the dedup rows and dead-letter marks are its.
pub const HANDLER: &str = "apply";

/// Aggregates each writer owns.
pub const AGGREGATES_PER_WRITER: usize = 8;

/// What a child process is.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spec {
    pub role: Role,
    /// Its name in the history (`writer-1`, `relay-2`, `consumer-3`).
    pub name: String,
    /// PostgreSQL's URL, through this process's link proxy.
    pub database: String,
    pub schema: String,
    pub backend: Backend,
    /// The queue name of the partitioned topology (RabbitMQ), or the
    /// topic (Kafka, whose consumer group is named after it).
    pub queue: String,
    pub dir: PathBuf,
    /// The broker URL (RabbitMQ: through this process's link proxy), the
    /// bootstrap brokers (Kafka, through the node proxies every client
    /// shares), or the SQS endpoint (through this
    /// process's link proxy).
    pub url: String,
    /// Writers commit until this time (microseconds since the Unix
    /// epoch), then exit: the load spans the faults, and a run waits for
    /// what was committed to settle, not for a count a slow machine may
    /// not reach.
    pub write_until_us: i64,
    /// Pause between a writer's commits, in milliseconds.
    pub every_ms: u64,
}

/// The broker under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Backend {
    /// A partitioned topology of quorum queues ([`topology`]).
    RabbitMq,
    /// A topic of [`PARTITIONS`] partitions and one consumer group.
    Kafka,
    /// A FIFO queue (a key is a message group) and its dead-letter queue,
    /// on moto.
    Sqs,
}

impl Backend {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::RabbitMq => "RabbitMQ",
            Self::Kafka => "Kafka",
            Self::Sqs => "SQS",
        }
    }

    /// The outbox destination of the campaign's events.
    pub fn destination(self, queue: &str) -> String {
        match self {
            Self::RabbitMq => format!("/{queue}"),
            Self::Kafka | Self::Sqs => queue.to_owned(),
        }
    }
}

/// The three kinds of process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    Writer,
    Relay,
    Consumer,
}

/// The event each aggregate's writer commits, and consumers apply.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Changed {
    pub event_id: String,
    pub aggregate: String,
    pub seq: i64,
    pub poison: bool,
}

/// The workload's poison messages: every 13th event of every other
/// aggregate, which the handler refuses for good.
pub fn is_poison(aggregate_index: usize, seq: i64) -> bool {
    aggregate_index.is_multiple_of(2) && seq % 13 == 7
}

/// The campaign's topic, with its retry and dead-letter topics (Kafka).
pub fn topics(topic: &str) -> Topics {
    Topics::new(topic).expect("valid campaign topic name")
}

/// The Kafka consumer group of the campaign on `topic`.
pub fn group(topic: &str) -> String {
    format!("ct-group-{topic}")
}

/// The campaign's SQS topology: the FIFO queue `queue` and its
/// dead-letter queue, with a redrive count no handler reaches (the
/// framework dead-letters by its own count).
pub fn sqs_topology(queue: &str) -> consumer::sqs::Topology {
    consumer::sqs::Topology::new(queue)
        .expect("valid campaign queue name")
        .with_max_receive_count(1000)
}

/// A client of the SQS the tests use (moto).
pub fn sqs_client() -> SqsClient {
    SqsClient::from_api(crate::conformance::sqs::real_api())
}

/// A client of SQS at `endpoint`: a child's, through its link proxy.
fn sqs_client_at(endpoint: &str) -> SqsClient {
    SqsClient::from_api(std::sync::Arc::new(consumer::sqs::client::AwsSqs::local(
        endpoint,
    )))
}

/// The campaign's partitioned topology (quorum queues).
pub fn topology(queue: &str) -> PartitionedTopology {
    PartitionedTopology::new(queue, PARTITIONS)
        .expect("valid campaign queue name")
        .with_max_retry_delay(Duration::from_millis(256))
        .with_expires(Duration::from_secs(600))
}

/// The business and state tables, the history and the sagas' table, in
/// the campaign's schema (the store's tables are there already).
pub async fn create_tables(pool: &sqlx::PgPool) {
    consumer::Store::new(pool.clone())
        .with_extension(consumer::saga::SagaTables)
        .migrate()
        .await
        .expect("the sagas' table");
    for ddl in [
        HISTORY_DDL,
        "CREATE TABLE campaign_business (aggregate TEXT NOT NULL, seq BIGINT NOT NULL, \
         PRIMARY KEY (aggregate, seq))",
        "CREATE TABLE campaign_state (aggregate TEXT PRIMARY KEY, last_seq BIGINT NOT NULL, \
         applied BIGINT NOT NULL)",
    ] {
        sqlx::query(ddl)
            .execute(pool)
            .await
            .unwrap_or_else(|e| panic!("{ddl}: {e}"));
    }
}

/// Events still to settle: committed and neither applied nor
/// dead-lettered, or settlements whose saga has not finished.
pub async fn unsettled(pool: &sqlx::PgPool) -> i64 {
    let events: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM campaign_history c WHERE c.kind = 'committed' \
         AND NOT EXISTS (SELECT 1 FROM campaign_history a WHERE a.kind = 'applied' AND a.event_id = c.event_id) \
         AND NOT EXISTS (SELECT 1 FROM consumer_attempts d WHERE d.handler = $1 \
                         AND d.message_id = c.event_id AND d.dead_lettered_at IS NOT NULL)",
    )
    .bind(HANDLER)
    .fetch_one(pool)
    .await
    .expect("unsettled events");
    events + settlement::unfinished(pool).await
}

/// Runs the child process `spec` says, until it is killed (a writer
/// returns once its aggregates have all their events).
pub async fn run(spec: Spec) {
    let pool = consumer::testing::FreshSchema::pool_at(&spec.database, &spec.schema, 4)
        .await
        .unwrap_or_else(|e| panic!("{}: PostgreSQL is not reachable ({e})", spec.name));
    match spec.role {
        Role::Writer => write(&spec, &pool).await,
        Role::Relay => relay(&spec, pool).await,
        Role::Consumer => consume(&spec, pool).await,
    }
}

fn writer_index(name: &str) -> usize {
    name.rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a writer's name ends in its number: {name}"))
}

/// Commits events on each of its aggregates, round-robin, until its
/// deadline, resuming after the last one committed (a restart after
/// SIGKILL).
async fn write(spec: &Spec, pool: &sqlx::PgPool) {
    let w = writer_index(&spec.name);
    let outbox = Outbox::new().with_default_destination(spec.backend.destination(&spec.queue));
    let aggregates: Vec<String> = (0..AGGREGATES_PER_WRITER)
        .map(|i| format!("w{w}-a{i}"))
        .collect();
    let mut done = Vec::with_capacity(aggregates.len());
    for a in &aggregates {
        let last: Option<i64> =
            sqlx::query_scalar("SELECT max(seq) FROM campaign_business WHERE aggregate = $1")
                .bind(a)
                .fetch_one(pool)
                .await
                .expect("resume point");
        done.push(last.unwrap_or(0));
    }
    for seq in 1.. {
        for (i, aggregate) in aggregates.iter().enumerate() {
            if seq <= done[i] {
                continue;
            }
            if super::history::now_us() >= spec.write_until_us {
                return;
            }
            let change = Changed {
                event_id: uuid::Uuid::now_v7().to_string(),
                aggregate: aggregate.clone(),
                seq,
                poison: is_poison(i, seq),
            };
            let mut tx = pool.begin().await.expect("begin");
            sqlx::query("INSERT INTO campaign_business (aggregate, seq) VALUES ($1, $2)")
                .bind(aggregate)
                .bind(seq)
                .execute(&mut *tx)
                .await
                .expect("business row");
            let id = uuid::Uuid::parse_str(&change.event_id).expect("a uuid");
            let event = NewEvent::new("Account", aggregate, "Changed", &change)
                .expect("a Changed serialises")
                .with_id(id);
            outbox.enqueue(&mut tx, event).await.expect("enqueue");
            record_in_tx(
                &mut tx,
                &spec.name,
                &Kind::Committed {
                    event_id: change.event_id.clone(),
                    aggregate: aggregate.clone(),
                    seq,
                    poison: change.poison,
                },
            )
            .await
            .expect("history");
            tx.commit().await.expect("commit");
            // The load's pace, so that writes go on while faults happen.
            tokio::time::sleep(Duration::from_millis(spec.every_ms)).await;
        }
    }
}

/// A publisher that records each confirmed publish in its process's lines.
struct Recorded<P> {
    inner: P,
    lines: JsonLines,
}

impl<P: Publisher> Publisher for Recorded<P> {
    fn system(&self) -> &'static str {
        self.inner.system()
    }

    async fn publish(&self, batch: &[Outgoing]) -> Vec<Result<(), consumer::backend::Error>> {
        let results = self.inner.publish(batch).await;
        for (o, r) in batch.iter().zip(&results) {
            if r.is_ok() {
                let event_id = o
                    .message
                    .headers
                    .get("ce_id")
                    .ok()
                    .flatten()
                    .unwrap_or_default()
                    .to_owned();
                let _ = self.lines.append(Kind::Published { event_id });
            }
        }
        results
    }
}

async fn relay(spec: &Spec, pool: sqlx::PgPool) {
    match spec.backend {
        Backend::RabbitMq => {
            let publisher = AmqpPublisher::builder(spec.url.clone())
                .with_connection_name(spec.name.clone())
                .with_partitions(topology(&spec.queue))
                .build();
            relay_with(spec, pool, publisher).await;
        }
        Backend::Kafka => {
            let publisher = KafkaPublisher::builder(spec.url.clone())
                .connect()
                .await
                .unwrap_or_else(|e| panic!("{}: {}", spec.name, with_causes(&e)));
            relay_with(spec, pool, publisher).await;
        }
        Backend::Sqs => {
            let publisher = SqsPublisher::builder(sqs_client_at(&spec.url))
                .connect()
                .await
                .unwrap_or_else(|e| panic!("{}: {}", spec.name, with_causes(&e)));
            relay_with(spec, pool, publisher).await;
        }
    }
}

async fn relay_with<P: Publisher>(spec: &Spec, pool: sqlx::PgPool, publisher: P) {
    let lines = JsonLines::open(&spec.dir, &spec.name, false).expect("history lines");
    let relay = OutboxRelay::new(
        pool,
        Outbox::new(),
        Recorded {
            inner: publisher,
            lines,
        },
    )
    .with_retry_policy(RELAY_RETRY);
    relay
        .run_until(std::future::pending())
        .await
        .unwrap_or_else(|e| panic!("{} stopped: {}", spec.name, with_causes(&e)));
}

static DELIVERIES: OnceLock<JsonLines> = OnceLock::new();

/// The refusal of a poison message, and the database's errors.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("poison message {0}")]
    Poison(String),
    #[error("database error")]
    Db(#[from] sqlx::Error),
    #[error("outbox")]
    Outbox(#[from] consumer::Error),
}

/// Applies the event to its aggregate's state row, opens a settlement
/// every [`OPEN_EVERY`] events, and records both in the same transaction.
/// The upsert takes the row's lock first, so an aggregate's history rows
/// are inserted in the order its effects apply.
#[handler(
    name = "apply",
    event_type = "Changed",
    idempotency_key = change.event_id,
    retry = exponential(base = "10ms", max_delay = "200ms", attempts = 10),
    terminal = ApplyError::Poison(_),
)]
pub async fn apply(change: Changed, tx: &mut PgTx, ctx: &MessageContext) -> Result<(), ApplyError> {
    if let Some(lines) = DELIVERIES.get() {
        let _ = lines.append(Kind::Delivered {
            event_id: change.event_id.clone(),
            attempt: ctx.attempt(),
        });
    }
    if change.poison {
        return Err(ApplyError::Poison(change.event_id));
    }
    sqlx::query(
        "INSERT INTO campaign_state (aggregate, last_seq, applied) VALUES ($1, $2, 1) \
         ON CONFLICT (aggregate) DO UPDATE SET last_seq = excluded.last_seq, \
         applied = campaign_state.applied + 1",
    )
    .bind(&change.aggregate)
    .bind(change.seq)
    .execute(&mut **tx)
    .await?;
    if change.seq % OPEN_EVERY == 0 {
        settlement::open(
            tx,
            &process_name(),
            &change.event_id,
            &change.aggregate,
            change.seq,
        )
        .await?;
    }
    record_in_tx(
        tx,
        &process_name(),
        &Kind::Applied {
            event_id: change.event_id,
            aggregate: change.aggregate,
            seq: change.seq,
        },
    )
    .await?;
    Ok(())
}

/// An error and its causes, outermost first: what the broker answered is
/// often only in the last.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    text
}

/// This process's name in the history.
pub fn process_name() -> String {
    crate::conformance::scale_out::instance()
}

async fn consume(spec: &Spec, pool: sqlx::PgPool) {
    let lines = JsonLines::open(&spec.dir, &spec.name, false).expect("history lines");
    let _ = DELIVERIES.set(lines);
    match spec.backend {
        Backend::RabbitMq => {
            let source = PartitionedSource::builder(spec.url.clone(), topology(&spec.queue))
                .with_instance_id(spec.name.clone())
                .with_prefetch(16)
                .build()
                .expect("a partitioned source");
            consume_from(spec, pool, source).await;
        }
        Backend::Kafka => {
            // Dynamic membership: a restarted consumer is a new member, and
            // a paused one is dropped from the group after the session
            // timeout, then wakes up with records in hand. A rebalance
            // waits for a member that has not rejoined for up to
            // `max.poll.interval.ms` (5 minutes by default), whatever its
            // session: a pause during a rebalance would hold the group
            // rather than make a zombie, so the interval is short too.
            let source =
                KafkaSource::builder(spec.url.clone(), group(&spec.queue), topics(&spec.queue))
                    .with_property("session.timeout.ms", KAFKA_SESSION.as_millis().to_string())
                    .with_property("heartbeat.interval.ms", "500")
                    .with_property(
                        "max.poll.interval.ms",
                        KAFKA_MAX_POLL.as_millis().to_string(),
                    )
                    .with_property("client.id", spec.name.clone())
                    .with_revoke_timeout(Duration::from_secs(5))
                    .connect()
                    .await
                    .unwrap_or_else(|e| panic!("{}: {}", spec.name, with_causes(&e)));
            consume_from(spec, pool, source).await;
        }
        Backend::Sqs => {
            // A visibility timeout the pauses outlast about half the time:
            // a paused consumer's messages go to another one, and it wakes
            // up holding them (its extensions stopped with it).
            let source = SqsSource::builder(sqs_client_at(&spec.url), sqs_topology(&spec.queue))
                .with_wait_time(Duration::from_secs(1))
                .with_visibility_timeout(Duration::from_secs(6))
                .connect()
                .await
                .unwrap_or_else(|e| panic!("{}: {}", spec.name, with_causes(&e)));
            consume_from(spec, pool, source).await;
        }
    }
}

async fn consume_from<S: Source>(spec: &Spec, pool: sqlx::PgPool, source: S) {
    let to = spec.backend.destination(&spec.queue);
    settlement::send_to(to.clone());
    let router = Router::builder("campaign")
        .route(apply)
        .route(settlement::confirm)
        .route(settlement::saga(&to))
        .build()
        .expect("the campaign's router");
    Consumer::router(source, consumer::Store::new(pool), router)
        .run_until(std::future::pending())
        .await
        .unwrap_or_else(|e| panic!("{} stopped: {}", spec.name, with_causes(&e)));
}

/// The history directory of a run: under the target dir's tmp, named by
/// the queue.
pub fn history_dir(queue: &str) -> PathBuf {
    let base = std::env::var_os("CAMPAIGN_HISTORY_DIR").map_or_else(
        || std::env::temp_dir().join("consumer-campaign"),
        PathBuf::from,
    );
    let dir = base.join(queue);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}
