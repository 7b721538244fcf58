//! Test support shared by every backend: stores on real databases, a
//! message whose content says how the handler misbehaves, call logs, gates,
//! and an in-memory OpenTelemetry exporter.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use consumer::{Message, MessageContext, Store, store::Tx};
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, watch};

/// A valid W3C traceparent for tests.
pub const SAMPLE_TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Guards against hangs: a behaviour that never completes fails the test
/// with a sentence instead of blocking the suite.
pub async fn within<F: Future>(f: F) -> F::Output {
    match tokio::time::timeout(Duration::from_secs(60), f).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after 60 s: the behaviour under test never completed"),
    }
}

/// Waits until `remaining` reads zero on three readings in a row, one
/// every `every`: the "drained" of a broker that has no such event
/// (RabbitMQ's ready counts, Kafka's unsettled offsets, each with the
/// sources' in-flight counts). Three readings, so a message moving between
/// places (a delay queue expiring into the work queue, a retry copy on its
/// way to the retry topic) is not missed.
pub async fn until_drained<F, Fut>(every: Duration, mut remaining: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = usize>,
{
    let mut zero_readings = 0;
    while zero_readings < 3 {
        if remaining().await == 0 {
            zero_readings += 1;
        } else {
            zero_readings = 0;
        }
        tokio::time::sleep(every).await;
    }
}

/// A test message. Its fields say how the handler behaves.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Job {
    pub id: String,
    pub key: String,
    pub seq: i64,
    #[serde(default)]
    pub fail_times: u32,
    #[serde(default)]
    pub terminal: bool,
    #[serde(default)]
    pub panic: bool,
    #[serde(default)]
    pub jitter: bool,
    #[serde(default)]
    pub gate: Option<u64>,
    #[serde(default)]
    pub probe: Option<u64>,
    /// An [`Outage`] that fails the call transiently while it lasts.
    #[serde(default)]
    pub outage: Option<u64>,
}

impl Job {
    pub fn new(key: &str, seq: i64) -> Self {
        Self {
            id: uuid::Uuid::new_v4().to_string(),
            key: key.to_owned(),
            seq,
            fail_times: 0,
            terminal: false,
            panic: false,
            jitter: false,
            gate: None,
            probe: None,
            outage: None,
        }
    }

    pub fn message(&self) -> Message {
        self.event("Job")
    }

    /// The job as a CloudEvent of type `kind`, keyed by its key.
    pub fn event(&self, kind: &str) -> Message {
        Message::json(kind, self)
            .expect("a Job serialises")
            .with_key(self.key.clone())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("transient failure on attempt {0}")]
    Transient(u32),
    #[error("terminal failure: {0}")]
    Terminal(String),
    #[error("database error")]
    Db(#[from] sqlx::Error),
}

#[derive(Debug, Clone)]
pub struct Call {
    pub attempt: u32,
    pub message_id: String,
    pub at: Instant,
}

fn call_logs() -> &'static Mutex<HashMap<String, Vec<Call>>> {
    static LOGS: OnceLock<Mutex<HashMap<String, Vec<Call>>>> = OnceLock::new();
    LOGS.get_or_init(Mutex::default)
}

/// Every call of the handler for this job or message id, in order.
pub fn call_log(id: &str) -> Vec<Call> {
    call_logs()
        .lock()
        .expect("log")
        .get(id)
        .cloned()
        .unwrap_or_default()
}

/// How many times the handler ran for this job id.
pub fn calls(id: &str) -> usize {
    call_log(id).len()
}

/// What the test handlers do before their business write.
pub async fn behave(job: &Job, ctx: &MessageContext) -> Result<(), JobError> {
    call_logs()
        .lock()
        .expect("log")
        .entry(job.id.clone())
        .or_default()
        .push(Call {
            attempt: ctx.attempt(),
            message_id: ctx.message_id().to_owned(),
            at: Instant::now(),
        });
    let _probe = job.probe.map(ConcurrencyProbe::enter);
    if let Some(gate) = job.gate {
        Gate::by_id(gate).pass().await;
    }
    if job.jitter {
        // Shakes the interleaving of keys; not a synchronisation.
        let micros = rand::random_range(0..400u64);
        tokio::time::sleep(Duration::from_micros(micros)).await;
    }
    if job.panic {
        panic!("boom: the handler has a bug");
    }
    if job.terminal {
        return Err(JobError::Terminal("card declined".into()));
    }
    if job.outage.is_some_and(Outage::is_down) {
        return Err(JobError::Transient(ctx.attempt()));
    }
    if ctx.attempt() <= job.fail_times {
        return Err(JobError::Transient(ctx.attempt()));
    }
    Ok(())
}

/// Counts handlers running at once.
pub struct ConcurrencyProbe {
    id: u64,
    inner: Arc<ProbeInner>,
}

#[derive(Default)]
struct ProbeInner {
    now: AtomicUsize,
    max: AtomicUsize,
}

fn probes() -> &'static Mutex<HashMap<u64, Arc<ProbeInner>>> {
    static P: OnceLock<Mutex<HashMap<u64, Arc<ProbeInner>>>> = OnceLock::new();
    P.get_or_init(Mutex::default)
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

pub struct ProbeGuard(Arc<ProbeInner>);

impl Drop for ProbeGuard {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}

impl ConcurrencyProbe {
    pub fn new() -> Self {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let inner = Arc::new(ProbeInner::default());
        probes()
            .lock()
            .expect("probes")
            .insert(id, Arc::clone(&inner));
        Self { id, inner }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn max(&self) -> usize {
        self.inner.max.load(Ordering::SeqCst)
    }

    fn enter(id: u64) -> ProbeGuard {
        let inner = Arc::clone(probes().lock().expect("probes").get(&id).expect("probe"));
        let now = inner.now.fetch_add(1, Ordering::SeqCst) + 1;
        inner.max.fetch_max(now, Ordering::SeqCst);
        ProbeGuard(inner)
    }
}

/// Holds handlers until opened; counts who is waiting.
#[derive(Clone)]
pub struct Gate {
    id: u64,
    inner: Arc<GateInner>,
}

struct GateInner {
    open: watch::Sender<bool>,
    entered: AtomicUsize,
    entered_changed: Notify,
}

fn gates() -> &'static Mutex<HashMap<u64, Gate>> {
    static G: OnceLock<Mutex<HashMap<u64, Gate>>> = OnceLock::new();
    G.get_or_init(Mutex::default)
}

impl Gate {
    pub fn new() -> Self {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let gate = Self {
            id,
            inner: Arc::new(GateInner {
                open: watch::channel(false).0,
                entered: AtomicUsize::new(0),
                entered_changed: Notify::new(),
            }),
        };
        gates().lock().expect("gates").insert(id, gate.clone());
        gate
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    fn by_id(id: u64) -> Self {
        gates()
            .lock()
            .expect("gates")
            .get(&id)
            .expect("gate")
            .clone()
    }

    async fn pass(&self) {
        let mut rx = self.inner.open.subscribe();
        self.inner.entered.fetch_add(1, Ordering::SeqCst);
        self.inner.entered_changed.notify_waiters();
        let _ = rx.wait_for(|open| *open).await;
    }

    pub fn open(&self) {
        self.inner.open.send_replace(true);
    }

    /// Waits until `n` handlers have reached the gate.
    pub async fn wait_entered(&self, n: usize) {
        loop {
            let notified = self.inner.entered_changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.inner.entered.load(Ordering::SeqCst) >= n {
                return;
            }
            notified.await;
        }
    }
}

/// The in-memory span exporter, installed once per test binary.
pub fn tracing_exporter() -> opentelemetry_sdk::trace::InMemorySpanExporter {
    consumer::testing::in_memory_spans()
}

#[allow(unused_imports)]
pub use consumer::testing::trace_id_of;

/// The exported `process` span of the message whose job id is `job_id`.
pub fn process_span(
    exporter: &opentelemetry_sdk::trace::InMemorySpanExporter,
    job_id: &str,
) -> Option<opentelemetry_sdk::trace::SpanData> {
    spans_of(exporter, job_id, "process ").into_iter().next()
}

/// The exported spans about `job_id`'s messages whose name starts with
/// `prefix` (`process `, `send `, `ack `, ...).
pub fn spans_of(
    exporter: &opentelemetry_sdk::trace::InMemorySpanExporter,
    job_id: &str,
    prefix: &str,
) -> Vec<opentelemetry_sdk::trace::SpanData> {
    let Ok(spans) = exporter.get_finished_spans() else {
        return Vec::new();
    };
    spans
        .into_iter()
        .filter(|s| {
            s.name.starts_with(prefix)
                && s.attributes.iter().any(|kv| {
                    kv.key.as_str() == "messaging.message.id"
                        && message_ids_of(job_id).contains(&kv.value.to_string())
                })
        })
        .collect()
}

/// The value of attribute `key` on `span`, as text.
pub fn attribute(span: &opentelemetry_sdk::trace::SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

fn message_id_index() -> &'static Mutex<HashMap<String, Vec<String>>> {
    static M: OnceLock<Mutex<HashMap<String, Vec<String>>>> = OnceLock::new();
    M.get_or_init(Mutex::default)
}

/// Remembers which message ids carried a job (the harness records it on
/// every effect write).
pub fn note_message_id(job_id: &str, message_id: &str) {
    message_id_index()
        .lock()
        .expect("index")
        .entry(job_id.to_owned())
        .or_default()
        .push(message_id.to_owned());
}

fn message_ids_of(job_id: &str) -> Vec<String> {
    message_id_index()
        .lock()
        .expect("index")
        .get(job_id)
        .cloned()
        .unwrap_or_default()
}

/// A store on a fresh database, and queries on the effects it saw.
pub trait Harness: Sized + Send + Sync + 'static {
    type Db: consumer::store::StoreDatabase;
    /// Write transactions that can be open at once. SQLite has one writer:
    /// handler transactions on it run one at a time, whatever the lanes do.
    const CONCURRENT_WRITERS: usize;

    fn new() -> impl Future<Output = Self> + Send;
    fn store(&self) -> Store<Self::Db>;
    fn insert_effect(
        tx: &mut Tx<Self::Db>,
        handler: &str,
        job: &Job,
        message_id: &str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;
    fn effects_of(&self, handler: &str, job_id: &str) -> impl Future<Output = i64> + Send;
    /// `(key, seq)` of every effect of `handler` in commit order.
    /// Every effect as `(handler, key, seq)`, in commit order.
    fn all_effects_in_commit_order(
        &self,
    ) -> impl Future<Output = Vec<(String, String, i64)>> + Send;
    fn effects_in_commit_order(
        &self,
        handler: &str,
    ) -> impl Future<Output = Vec<(String, i64)>> + Send;
    fn insert_old_dedup_rows(&self, n: i64, age: Duration) -> impl Future<Output = ()> + Send;
    fn dedup_rows(&self) -> impl Future<Output = i64> + Send;
    /// The store's dead-letter table: `(message_id, kind, refusal, payload)`
    /// per row, oldest first.
    fn stored_dead_letters(&self) -> impl Future<Output = Vec<StoredLetter>> + Send;
}

/// One row of the store's dead-letter table.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredLetter {
    pub handler: String,
    pub message_id: String,
    pub kind: String,
    pub error: String,
    pub refusal: String,
    pub payload: Vec<u8>,
}

/// The `Harness` methods whose SQL is the same on SQLite and PostgreSQL,
/// written once for both impls: the effects table, the dedup rows and the
/// dead-letter table, on `self.pool` and the store's own transaction.
macro_rules! same_sql_on_both {
    () => {
        async fn insert_effect(
            tx: &mut Tx<Self::Db>,
            handler: &str,
            job: &Job,
            message_id: &str,
        ) -> Result<(), sqlx::Error> {
            note_message_id(&job.id, message_id);
            sqlx::query(
                "INSERT INTO effects (handler, job_id, key, seq, message_id) VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(handler)
            .bind(&job.id)
            .bind(&job.key)
            .bind(job.seq)
            .bind(message_id)
            .execute(&mut **tx)
            .await?;
            Ok(())
        }

        async fn effects_of(&self, handler: &str, job_id: &str) -> i64 {
            sqlx::query_scalar("SELECT count(*) FROM effects WHERE handler = $1 AND job_id = $2")
                .bind(handler)
                .bind(job_id)
                .fetch_one(&self.pool)
                .await
                .expect("count effects")
        }

        async fn all_effects_in_commit_order(&self) -> Vec<(String, String, i64)> {
            sqlx::query_as("SELECT handler, key, seq FROM effects ORDER BY id")
                .fetch_all(&self.pool)
                .await
                .expect("effects")
        }

        async fn effects_in_commit_order(&self, handler: &str) -> Vec<(String, i64)> {
            sqlx::query_as("SELECT key, seq FROM effects WHERE handler = $1 ORDER BY id")
                .bind(handler)
                .fetch_all(&self.pool)
                .await
                .expect("effects")
        }

        async fn dedup_rows(&self) -> i64 {
            sqlx::query_scalar("SELECT count(*) FROM consumer_processed")
                .fetch_one(&self.pool)
                .await
                .expect("count")
        }

        async fn stored_dead_letters(&self) -> Vec<StoredLetter> {
            sqlx::query_as(
                "SELECT handler, message_id, kind, error, refusal, payload FROM consumer_dead_letters ORDER BY id",
            )
            .fetch_all(&self.pool)
            .await
            .expect("dead-letter table")
        }
    };
}

/// SQLite on a fresh file per test (WAL, like a real deployment).
pub struct SqliteHarness {
    pool: sqlx::SqlitePool,
}

impl Harness for SqliteHarness {
    type Db = sqlx::Sqlite;
    const CONCURRENT_WRITERS: usize = 1;

    async fn new() -> Self {
        let dir = std::env::temp_dir().join("consumer-tests");
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join(format!("{}.db", uuid::Uuid::new_v4()));
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(30));
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .expect("SQLite database file could not be created in the temp dir");
        sqlx::query(
            "CREATE TABLE effects (id INTEGER PRIMARY KEY AUTOINCREMENT, handler TEXT NOT NULL, \
             job_id TEXT NOT NULL, key TEXT NOT NULL, seq INTEGER NOT NULL, message_id TEXT NOT NULL)",
        )
        .execute(&pool)
        .await
        .expect("effects table");
        let h = Self { pool };
        h.store().migrate().await.expect("migrations");
        h
    }

    fn store(&self) -> Store<sqlx::Sqlite> {
        Store::new(self.pool.clone()).with_extension(consumer::saga::SagaTables)
    }

    same_sql_on_both!();

    async fn insert_old_dedup_rows(&self, n: i64, age: Duration) {
        let now_ms = time::OffsetDateTime::now_utc().unix_timestamp() * 1000;
        let old = now_ms - i64::try_from(age.as_millis()).expect("age");
        for i in 0..n {
            sqlx::query(
                "INSERT INTO consumer_processed (handler, key, message_id, processed_at) VALUES ('old', $1, $1, $2)",
            )
            .bind(format!("old-{i}"))
            .bind(old)
            .execute(&self.pool)
            .await
            .expect("old row");
        }
    }
}

#[allow(unused_imports)]
pub use consumer::testing::database_url;

/// PostgreSQL with a fresh schema per test.
pub struct PgHarness {
    pool: sqlx::PgPool,
    pub schema: String,
}

impl PgHarness {
    pub fn pool(&self) -> &sqlx::PgPool {
        &self.pool
    }

    /// The harness on `pool`, whose tables go in `schema` (the pool's
    /// search path): the effects table and the store's tables are made
    /// there. [`Harness::new`] takes a fresh schema on `DATABASE_URL`; a
    /// test with a PostgreSQL server of its own passes that server's pool.
    pub async fn on_pool(pool: sqlx::PgPool, schema: String) -> Self {
        sqlx::query(
            "CREATE TABLE effects (id BIGSERIAL PRIMARY KEY, handler TEXT NOT NULL, \
             job_id TEXT NOT NULL, key TEXT NOT NULL, seq BIGINT NOT NULL, message_id TEXT NOT NULL)",
        )
        .execute(&pool)
        .await
        .expect("effects table");
        let h = Self { pool, schema };
        // The fresh schema has the store's tables; the sagas' come with
        // the store's extension.
        h.store().migrate().await.expect("migrations");
        h
    }
}

impl Harness for PgHarness {
    type Db = sqlx::Postgres;
    const CONCURRENT_WRITERS: usize = usize::MAX;

    async fn new() -> Self {
        let fresh = consumer::testing::FreshSchema::create("ct", 8)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        Self::on_pool(fresh.pool, fresh.schema).await
    }

    fn store(&self) -> Store<sqlx::Postgres> {
        Store::new(self.pool.clone()).with_extension(consumer::saga::SagaTables)
    }

    same_sql_on_both!();

    async fn insert_old_dedup_rows(&self, n: i64, age: Duration) {
        sqlx::query(
            "INSERT INTO consumer_processed (handler, key, message_id, processed_at) \
             SELECT 'old', 'old-' || g, 'old-' || g, now() - ($2::double precision * interval '1 second') \
             FROM generate_series(1, $1) g",
        )
        .bind(n)
        .bind(age.as_secs_f64())
        .execute(&self.pool)
        .await
        .expect("old rows");
    }
}

/// What is behind a handler going down for a while: every call of a job
/// that names it fails transiently until [`Outage::end`].
pub struct Outage {
    id: u64,
}

fn outages() -> &'static Mutex<HashMap<u64, bool>> {
    static O: OnceLock<Mutex<HashMap<u64, bool>>> = OnceLock::new();
    O.get_or_init(Mutex::default)
}

impl Outage {
    /// An outage that has begun.
    pub fn begin() -> Self {
        let outage = Self::later();
        outage.start();
        outage
    }

    /// An outage that has not begun yet: [`Outage::start`] begins it.
    pub fn later() -> Self {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        outages().lock().expect("outages").insert(id, false);
        Self { id }
    }

    /// The downstream goes down.
    pub fn start(&self) {
        outages().lock().expect("outages").insert(self.id, true);
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// The downstream is back.
    pub fn end(&self) {
        outages().lock().expect("outages").insert(self.id, false);
    }

    fn is_down(id: u64) -> bool {
        outages()
            .lock()
            .expect("outages")
            .get(&id)
            .copied()
            .unwrap_or(false)
    }
}
