//! What the framework costs per message on top of a hand-written tokio loop
//! doing the same work, with tracing spans off and on.
//!
//! Nine sides, in three groups of three, each run over the same N
//! pre-published JSON messages spread over 64 partition keys. Every
//! framework side is a `Consumer` on a `MemoryBroker` source; every raw side
//! is an mpsc channel, a dispatcher, one task per key fed by a bounded
//! channel, and `serde_json::from_slice` of the same struct. Each group has
//! two raw baselines:
//!
//! * `raw-equal...` (the baseline the targets are against) does the
//!   framework's work on each message: its dispatcher reads the message's
//!   headers into an `Envelope` with `Envelope::from_parts` (the call every
//!   source makes: CloudEvents attributes, time, attempt, key), with an
//!   `Origin` written as the memory source writes it, and the lanes use the
//!   envelope's id and key, as a Kafka `raw-consume-equal` loop does
//!   (benches/kafka.rs);
//! * `raw...` (bare) reads id and key out of the headers before the run, so
//!   each message is only decoded (and claimed).
//!
//! The groups:
//!
//! * `framework+sqlite` / `raw-equal+sqlite` / `raw+sqlite`: a no-op
//!   `#[handler]` (no `tx` argument) on a `SqliteStore` over in-memory
//!   SQLite (one connection). The expansion still claims the dedup row, so
//!   each message is `BEGIN; INSERT INTO consumer_processed ... ON CONFLICT
//!   DO NOTHING; COMMIT`; the raw sides run that SQL themselves on the same
//!   kind of pool.
//! * `framework+memory` / `raw-equal+memory` / `raw+memory`: the same no-op
//!   `#[handler]` on a `MemoryStore` (the claim and commit in process
//!   memory); the raw sides call the same `MemoryStore` claim and commit
//!   themselves.
//! * `framework` / `raw-equal` / `raw`: no dedup at all. The framework side
//!   runs a hand-written `Handler` (the public trait `#[handler]`
//!   implements) that only decodes, so it measures the runtime alone:
//!   broker, lanes, permits, acks, stats, span.
//!
//! With spans on, each side creates one `info` span per message with the
//! framework's attributes, recorded by `tracing-opentelemetry` into an SDK
//! tracer whose exporter drops every span.
//!
//! ```text
//! cargo bench --bench runtime_overhead                     # everything
//! BENCH_N=20000 cargo bench --bench runtime_overhead       # a smaller run
//! runtime_overhead --only raw+memory --spans off --n 5000  # one side (callgrind)
//! runtime_overhead --only raw+memory --spans off --n 5000 --setup-only
//! ```
//!
//! `--setup-only` does everything but consume (building messages, runtime,
//! store, publishing), so that `scripts/bench-callgrind` can subtract it.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use consumer::memory::MemoryAcker;
use consumer::metrics::SourceGauges;
use consumer::store::Claim;
use consumer::{
    Consumer, DedupStore, Envelope, Handler, MemoryBroker, MemoryStore, Message, RetryPolicy,
    SqliteStore, Stats,
    envelope::{Origin, Placement},
    handler,
    handler::{Invocation, Outcome},
    memory::MemorySource,
    source::Source,
};
use cpu_time::ProcessTime;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use serde::{Deserialize, Serialize};
use sqlx::sqlite::{SqlitePool, SqlitePoolOptions};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::{Dispatch, Instrument};
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;

const TOPIC: &str = "payments";
const KEYS: usize = 64;
const DEFAULT_N: usize = 20_000;
/// Messages a raw lane may hold queued before the dispatcher waits: the raw
/// loop's backpressure, like the framework's `max_in_flight` (256) split
/// over 64 keys.
const RAW_LANE_CAPACITY: usize = 4;
/// The framework's claim, verbatim (`consumer-core/src/store/sqlite.rs`).
const CLAIM_SQL: &str = "INSERT INTO consumer_processed (handler, key, message_id, processed_at) \
     VALUES (?1, ?2, ?3, ?4) ON CONFLICT (handler, key) DO NOTHING";

#[derive(Debug, Serialize, Deserialize)]
struct Payment {
    account: String,
    seq: u64,
    cents: i64,
    currency: String,
}

/// The framework side with the dedup claim (`#[handler]` always claims),
/// on any store.
#[handler(retry = none)]
async fn noop(payment: Payment) -> Result<(), Infallible> {
    black_box(&payment);
    Ok(())
}

/// The framework side without a database: decodes like the expansion does,
/// and skips the claim.
struct DecodeOnly;

impl<S: DedupStore> Handler<S> for DecodeOnly {
    fn name(&self) -> &'static str {
        "noop"
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::none()
    }

    async fn handle(&self, invocation: &mut Invocation<'_, S>) -> Outcome {
        match invocation.decode::<Payment>() {
            Ok(payment) => {
                black_box(&payment);
                Outcome::Processed
            }
            Err(outcome) => outcome,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dedup {
    Sqlite,
    Memory,
    None,
}

/// Which loop a side runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `Consumer` on a `MemoryBroker` source.
    Framework,
    /// The raw loop doing the framework's work on each message: the
    /// envelope read from the message's headers (`Envelope::from_parts`, as
    /// every source does), then the decode and the claim. The baseline.
    RawEqual,
    /// The bare raw loop: id and key read out of the headers before the
    /// run, so each message is only decoded (and claimed). A second
    /// baseline.
    Raw,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Side {
    kind: Kind,
    dedup: Dedup,
}

impl Side {
    const ALL: [Side; 9] = [
        Side::new(Kind::Framework, Dedup::Sqlite),
        Side::new(Kind::RawEqual, Dedup::Sqlite),
        Side::new(Kind::Raw, Dedup::Sqlite),
        Side::new(Kind::Framework, Dedup::Memory),
        Side::new(Kind::RawEqual, Dedup::Memory),
        Side::new(Kind::Raw, Dedup::Memory),
        Side::new(Kind::Framework, Dedup::None),
        Side::new(Kind::RawEqual, Dedup::None),
        Side::new(Kind::Raw, Dedup::None),
    ];

    const fn new(kind: Kind, dedup: Dedup) -> Self {
        Self { kind, dedup }
    }

    fn name(self) -> &'static str {
        match (self.kind, self.dedup) {
            (Kind::Framework, Dedup::Sqlite) => "framework+sqlite",
            (Kind::RawEqual, Dedup::Sqlite) => "raw-equal+sqlite",
            (Kind::Raw, Dedup::Sqlite) => "raw+sqlite",
            (Kind::Framework, Dedup::Memory) => "framework+memory",
            (Kind::RawEqual, Dedup::Memory) => "raw-equal+memory",
            (Kind::Raw, Dedup::Memory) => "raw+memory",
            (Kind::Framework, Dedup::None) => "framework",
            (Kind::RawEqual, Dedup::None) => "raw-equal",
            (Kind::Raw, Dedup::None) => "raw",
        }
    }

    fn parse(s: &str) -> anyhow::Result<Self> {
        Self::ALL
            .into_iter()
            .find(|side| side.name() == s)
            .with_context(|| {
                let names: Vec<&str> = Self::ALL.into_iter().map(Side::name).collect();
                format!("unknown side {s:?}: expected one of {}", names.join(", "))
            })
    }

    /// The raw side of the same dedup doing `kind`'s work.
    fn baseline(self, kind: Kind) -> Self {
        Self::new(kind, self.dedup)
    }

    fn what(self) -> &'static str {
        match (self.kind, self.dedup) {
            (Kind::Framework, Dedup::Sqlite) => {
                "no-op #[handler] on SqliteStore (in-memory SQLite, 1 connection): decode, \
                 BEGIN; INSERT consumer_processed ON CONFLICT DO NOTHING; COMMIT; ack"
            }
            (Kind::RawEqual, Dedup::Sqlite) => {
                "Envelope::from_parts, decode, the same BEGIN; INSERT; COMMIT on the same \
                 kind of pool"
            }
            (Kind::Raw, Dedup::Sqlite) => {
                "decode, the same BEGIN; INSERT; COMMIT on the same kind of pool"
            }
            (Kind::Framework, Dedup::Memory) => {
                "no-op #[handler] on MemoryStore: decode, claim + commit in process memory; ack"
            }
            (Kind::RawEqual, Dedup::Memory) => {
                "Envelope::from_parts, decode, the same MemoryStore claim + commit, called directly"
            }
            (Kind::Raw, Dedup::Memory) => {
                "decode, the same MemoryStore claim + commit, called directly"
            }
            (Kind::Framework, Dedup::None) => "hand-written Handler: decode only, no claim; ack",
            (Kind::RawEqual, Dedup::None) => "Envelope::from_parts, decode",
            (Kind::Raw, Dedup::None) => "decode only",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spans {
    Off,
    On,
}

impl Spans {
    fn name(self) -> &'static str {
        match self {
            Spans::Off => "off",
            Spans::On => "on",
        }
    }
}

struct Options {
    n: usize,
    workers: usize,
    rounds: usize,
    only: Option<Side>,
    spans: Vec<Spans>,
    setup_only: bool,
}

fn options() -> anyhow::Result<Options> {
    let mut o = Options {
        n: match std::env::var("BENCH_N") {
            Ok(v) => v.parse().context("BENCH_N must be a number of messages")?,
            Err(_) => DEFAULT_N,
        },
        workers: 2,
        rounds: 3,
        only: None,
        spans: vec![Spans::Off, Spans::On],
        setup_only: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--n" => o.n = value()?.parse().context("--n takes a number of messages")?,
            "--rounds" => o.rounds = value()?.parse().context("--rounds takes a number")?,
            "--workers" => o.workers = value()?.parse().context("--workers takes a number")?,
            "--only" => o.only = Some(Side::parse(&value()?)?),
            "--spans" => {
                o.spans = match value()?.as_str() {
                    "off" => vec![Spans::Off],
                    "on" => vec![Spans::On],
                    "both" => vec![Spans::Off, Spans::On],
                    other => bail!("--spans takes off, on or both, not {other:?}"),
                }
            }
            "--setup-only" => o.setup_only = true,
            // `cargo bench` appends `--bench`.
            "--bench" => {}
            other => bail!(
                "unknown argument {other:?}; accepted: --n N, --rounds R, --workers W, \
                 --only SIDE, --spans off|on|both, --setup-only"
            ),
        }
    }
    if o.setup_only && o.only.is_none() {
        bail!("--setup-only goes with --only SIDE");
    }
    if o.n == 0 || o.rounds == 0 || o.workers == 0 {
        bail!("--n, --rounds and --workers must be at least 1");
    }
    Ok(o)
}

/// Drops every span: the cost measured is recording and ending spans, not
/// shipping them anywhere.
/// Counts them, so a run can check that every message had its span.
#[derive(Debug, Clone, Default)]
struct DiscardSpans(Arc<AtomicU64>);

impl SpanExporter for DiscardSpans {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.fetch_add(batch.len() as u64, Ordering::Relaxed);
        drop(black_box(batch));
        Ok(())
    }
}

fn otel_dispatch() -> (Dispatch, SdkTracerProvider, DiscardSpans) {
    let exporter = DiscardSpans::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let tracer = provider.tracer("runtime_overhead");
    // INFO, as deployments filter: sqlx logs every statement at DEBUG.
    let subscriber = tracing_subscriber::registry().with(
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(LevelFilter::INFO),
    );
    (Dispatch::new(subscriber), provider, exporter)
}

/// A multi-thread runtime (two workers by default, the size of this
/// machine). With spans on, every runtime thread gets the subscriber as its
/// default: a scoped dispatcher rather than a global one, so both modes run
/// in one process.
fn runtime(workers: usize, dispatch: Option<&Dispatch>) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(workers).enable_all();
    if let Some(dispatch) = dispatch {
        let dispatch = dispatch.clone();
        builder.on_thread_start(move || {
            // Kept for the thread's life; the thread-local dies with it.
            std::mem::forget(tracing::dispatcher::set_default(&dispatch));
        });
    }
    Ok(builder.build()?)
}

fn messages(n: usize) -> anyhow::Result<Vec<Message>> {
    (0..n)
        .map(|i| {
            let account = format!("acct-{:02}", i % KEYS);
            let payment = Payment {
                account: account.clone(),
                seq: i as u64,
                cents: 1200 + (i % 97) as i64,
                currency: "EUR".to_owned(),
            };
            Ok(Message::json("PaymentReceived", &payment)?.with_key(account))
        })
        .collect()
}

async fn sqlite_pool() -> anyhow::Result<SqlitePool> {
    // One connection: every connection to `sqlite::memory:` is its own
    // database, and it must not be closed while the run lasts.
    Ok(SqlitePoolOptions::new()
        .max_connections(1)
        .min_connections(1)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect("sqlite::memory:")
        .await?)
}

struct Measurement {
    wall: Duration,
    cpu: Duration,
}

/// Runs one side once over `o.n` fresh messages; `None` with `--setup-only`.
fn run_side(side: Side, spans: Spans, o: &Options) -> anyhow::Result<Option<Measurement>> {
    let (n, setup_only) = (o.n, o.setup_only);
    let otel = match spans {
        Spans::On => Some(otel_dispatch()),
        Spans::Off => None,
    };
    let dispatch = otel.as_ref().map(|(d, _, _)| d);
    let rt = runtime(o.workers, dispatch)?;
    let msgs = messages(n)?;
    let run = async {
        match side.kind {
            Kind::Framework => framework(side, msgs, setup_only).await,
            Kind::RawEqual | Kind::Raw => raw(side, msgs, spans, setup_only).await,
        }
    };
    let result = match dispatch {
        Some(d) => tracing::dispatcher::with_default(d, || rt.block_on(run)),
        None => rt.block_on(run),
    };
    drop(rt);
    if let Some((_, provider, exported)) = otel {
        provider.shutdown()?;
        let spans = exported.0.load(Ordering::Relaxed);
        if !setup_only && spans < n as u64 {
            bail!("{}: {spans} spans exported for {n} messages", side.name());
        }
    }
    result
}

async fn framework(
    side: Side,
    msgs: Vec<Message>,
    setup_only: bool,
) -> anyhow::Result<Option<Measurement>> {
    let n = msgs.len() as u64;
    let sqlite = match side.dedup {
        Dedup::Sqlite => {
            let pool = sqlite_pool().await?;
            let store = SqliteStore::new(pool.clone());
            store.migrate().await?;
            Some((pool, store))
        }
        Dedup::Memory | Dedup::None => None,
    };
    let memory = MemoryStore::new();
    let broker = MemoryBroker::default();
    for m in msgs {
        broker.publish(TOPIC, m).await?;
    }
    if setup_only {
        return Ok(None);
    }
    let source = Exhausting {
        source: broker.source(TOPIC),
        broker: broker.clone(),
        left: n,
    };
    let shutdown = std::future::pending();

    let cpu = ProcessTime::try_now()?;
    let wall = Instant::now();
    let stats = match (side.dedup, &sqlite) {
        (Dedup::Sqlite, Some((_, store))) => consume(source, store.clone(), noop, shutdown).await?,
        (Dedup::Memory, _) => consume(source, memory.clone(), noop, shutdown).await?,
        _ => consume(source, memory.clone(), DecodeOnly, shutdown).await?,
    };
    let measured = Measurement {
        wall: wall.elapsed(),
        cpu: cpu.try_elapsed()?,
    };

    let s = stats.snapshot();
    if s.processed != n || s.dead_letters() != 0 {
        bail!("{}: processed {} of {n} ({s:?})", side.name(), s.processed);
    }
    match (side.dedup, &sqlite) {
        (Dedup::Sqlite, Some((pool, _))) => check_claims(pool, n).await?,
        (Dedup::Memory, _) => check_memory_claims(&memory, n)?,
        _ => {}
    }
    Ok(Some(measured))
}

/// The broker's source, which closes once it gave out every message and
/// all were settled: the end of input, as the raw loop's closed channel.
/// (A shutdown future waiting on the broker instead would wake the
/// dispatcher at every settle, which no deployment's shutdown does.)
struct Exhausting {
    source: MemorySource,
    broker: MemoryBroker,
    left: u64,
}

impl Source for Exhausting {
    type Acker = MemoryAcker;

    fn system(&self) -> &'static str {
        self.source.system()
    }

    fn gauges(&self) -> Option<Arc<dyn SourceGauges>> {
        self.source.gauges()
    }

    async fn recv(&mut self) -> consumer::backend::Result<Option<(Arc<Envelope>, MemoryAcker)>> {
        if self.left == 0 {
            self.broker.wait_drained(TOPIC).await;
            return Ok(None);
        }
        let delivery = self.source.recv().await?;
        self.left -= u64::from(delivery.is_some());
        Ok(delivery)
    }
}

async fn consume<S: DedupStore, H: Handler<S>>(
    source: Exhausting,
    store: S,
    handler: H,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<Arc<Stats>> {
    let consumer = Consumer::new(source, store, handler);
    let stats = consumer.stats();
    consumer.run_until(shutdown).await?;
    Ok(stats)
}

/// A message of the bare raw loop: id and key read before the run.
struct RawMessage {
    key: String,
    id: String,
    payload: Bytes,
}

/// What a raw lane needs of a message, bare or read into an envelope.
trait RawItem: Send + Sync + 'static {
    fn key(&self) -> &str;
    fn id(&self) -> &str;
    fn payload(&self) -> &[u8];
}

impl RawItem for RawMessage {
    fn key(&self) -> &str {
        &self.key
    }

    fn id(&self) -> &str {
        &self.id
    }

    fn payload(&self) -> &[u8] {
        &self.payload
    }
}

impl RawItem for Envelope {
    fn key(&self) -> &str {
        self.key.as_deref().unwrap_or_default()
    }

    fn id(&self) -> &str {
        &self.id
    }

    fn payload(&self) -> &[u8] {
        &self.payload
    }
}

/// The dedup work a raw lane does, the same as its framework side's store.
#[derive(Clone)]
enum RawDedup {
    Sqlite(SqlitePool),
    Memory(MemoryStore),
    None,
}

async fn raw(
    side: Side,
    msgs: Vec<Message>,
    spans: Spans,
    setup_only: bool,
) -> anyhow::Result<Option<Measurement>> {
    let n = msgs.len() as u64;
    let dedup = match side.dedup {
        Dedup::Sqlite => {
            let pool = sqlite_pool().await?;
            // The framework's tables, created by the same migrations.
            SqliteStore::new(pool.clone()).migrate().await?;
            RawDedup::Sqlite(pool)
        }
        Dedup::Memory => RawDedup::Memory(MemoryStore::new()),
        Dedup::None => RawDedup::None,
    };
    match side.kind {
        Kind::Raw => {
            let (tx, rx) = mpsc::unbounded_channel();
            for m in msgs {
                let id = m
                    .headers
                    .get(consumer::envelope::names::ID)?
                    .context("Message::json sets ce_id")?
                    .to_owned();
                let key = m.key.context("every message has a key")?;
                tx.send(RawMessage {
                    key,
                    id,
                    payload: m.payload,
                })?;
            }
            drop(tx);
            if setup_only {
                return Ok(None);
            }
            raw_run(side, n, rx, |m| m, dedup, spans).await.map(Some)
        }
        Kind::Framework => bail!("{} is not a raw side", side.name()),
        Kind::RawEqual => {
            let (tx, rx) = mpsc::unbounded_channel();
            for (offset, m) in (0u64..).zip(msgs) {
                tx.send((offset, m))?;
            }
            drop(tx);
            if setup_only {
                return Ok(None);
            }
            raw_run(side, n, rx, read_envelope, dedup, spans)
                .await
                .map(Some)
        }
    }
}

/// What every source does with a message it received: reads its headers
/// into an [`Envelope`], with where it came from (as the memory source
/// does: the topic's name shared, the position written only if read).
fn read_envelope((offset, m): (u64, Message)) -> Envelope {
    static TOPIC_NAME: std::sync::OnceLock<std::sync::Arc<str>> = std::sync::OnceLock::new();
    let position = i64::try_from(offset).unwrap_or(i64::MAX);
    let origin = Origin {
        channel: std::sync::Arc::clone(TOPIC_NAME.get_or_init(|| TOPIC.into())).into(),
        position: consumer::envelope::Position::log(0, position),
        placement: Placement::Log {
            partition: 0,
            offset: position,
        },
    };
    Envelope::from_parts(m.payload, m.headers, m.key, origin, || {
        format!("{TOPIC}/0/{offset}")
    })
}

/// The raw loop: a dispatcher taking each message from the channel (`read`
/// turns it into what the lanes take) and handing it to its key's lane.
async fn raw_run<In, T: RawItem>(
    side: Side,
    n: u64,
    mut rx: mpsc::UnboundedReceiver<In>,
    read: impl Fn(In) -> T,
    dedup: RawDedup,
    spans: Spans,
) -> anyhow::Result<Measurement> {
    let cpu = ProcessTime::try_now()?;
    let wall = Instant::now();
    let mut lanes: HashMap<String, mpsc::Sender<T>> = HashMap::new();
    let mut tasks: JoinSet<anyhow::Result<u64>> = JoinSet::new();
    while let Some(incoming) = rx.recv().await {
        let m = read(incoming);
        let lane = match lanes.get(m.key()) {
            Some(lane) => lane,
            None => {
                let (lane_tx, lane_rx) = mpsc::channel(RAW_LANE_CAPACITY);
                tasks.spawn(raw_lane(lane_rx, dedup.clone(), spans));
                lanes.entry(m.key().to_owned()).or_insert(lane_tx)
            }
        };
        if lane.send(m).await.is_err() {
            bail!("{}: a lane ended early", side.name());
        }
    }
    drop(lanes);
    let mut done = 0;
    while let Some(r) = tasks.join_next().await {
        done += r??;
    }
    let measured = Measurement {
        wall: wall.elapsed(),
        cpu: cpu.try_elapsed()?,
    };

    if done != n {
        bail!("{}: processed {done} of {n}", side.name());
    }
    match &dedup {
        RawDedup::Sqlite(pool) => check_claims(pool, n).await?,
        RawDedup::Memory(store) => check_memory_claims(store, n)?,
        RawDedup::None => {}
    }
    Ok(measured)
}

/// One key's messages, strictly in order.
async fn raw_lane<T: RawItem>(
    mut rx: mpsc::Receiver<T>,
    dedup: RawDedup,
    spans: Spans,
) -> anyhow::Result<u64> {
    let mut done = 0;
    while let Some(m) = rx.recv().await {
        let work = raw_process(&m, &dedup);
        match spans {
            Spans::Off => work.await?,
            Spans::On => work.instrument(raw_span(&m)).await?,
        }
        done += 1;
    }
    Ok(done)
}

async fn raw_process<T: RawItem>(m: &T, dedup: &RawDedup) -> anyhow::Result<()> {
    let payment: Payment = serde_json::from_slice(m.payload())?;
    black_box(&payment);
    match dedup {
        RawDedup::Sqlite(pool) => {
            let mut tx = pool.begin().await?;
            let claimed = sqlx::query(CLAIM_SQL)
                .bind("noop")
                .bind(m.id())
                .bind(m.id())
                .bind(now_ms())
                .execute(&mut *tx)
                .await?;
            black_box(claimed.rows_affected());
            tx.commit().await?;
        }
        RawDedup::Memory(store) => match store.claim("noop", m.id(), m.id()).await? {
            Claim::Fresh(tx) => store.commit(tx).await?,
            Claim::Duplicate => {}
        },
        RawDedup::None => {}
    }
    Ok(())
}

/// The attributes the framework's `process` span carries.
fn raw_span<T: RawItem>(m: &T) -> tracing::Span {
    tracing::info_span!(
        "process",
        otel.name = %format_args!("process {TOPIC}"),
        otel.kind = "consumer",
        messaging.system = "memory",
        messaging.operation.type = "process",
        messaging.destination.name = TOPIC,
        messaging.consumer.group.name = "noop",
        messaging.message.id = %m.id(),
        messaging.message.body.size = m.payload().len(),
        messaging.delivery.attempt = 1u32,
        messaging.partition.key = m.key(),
    )
}

fn now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

fn check_memory_claims(store: &MemoryStore, n: u64) -> anyhow::Result<()> {
    if store.len() as u64 != n {
        bail!(
            "expected {n} claims in the MemoryStore, found {}",
            store.len()
        );
    }
    Ok(())
}

async fn check_claims(pool: &SqlitePool, n: u64) -> anyhow::Result<()> {
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM consumer_processed")
        .fetch_one(pool)
        .await?;
    if u64::try_from(rows)? != n {
        bail!("expected {n} dedup rows, found {rows}");
    }
    Ok(())
}

fn per_msg_us(d: Duration, n: usize) -> f64 {
    d.as_secs_f64() * 1e6 / n as f64
}

/// The round with the least CPU time: load from other processes on a
/// shared machine only ever adds to it.
fn best(v: Vec<Measurement>) -> Option<Measurement> {
    v.into_iter().min_by_key(|m| m.cpu)
}

fn main() -> anyhow::Result<()> {
    let o = options()?;

    if let Some(side) = o.only {
        for &spans in &o.spans {
            for _ in 0..o.rounds {
                if let Some(m) = run_side(side, spans, &o)? {
                    println!(
                        "{} spans={} n={} wall_ms={:.1} msgs_per_s={:.0} cpu_us_per_msg={:.3}",
                        side.name(),
                        spans.name(),
                        o.n,
                        m.wall.as_secs_f64() * 1e3,
                        o.n as f64 / m.wall.as_secs_f64(),
                        per_msg_us(m.cpu, o.n),
                    );
                } else {
                    println!(
                        "{} spans={} n={} setup only",
                        side.name(),
                        spans.name(),
                        o.n
                    );
                }
            }
        }
        return Ok(());
    }

    println!(
        "runtime_overhead: {} JSON messages over {KEYS} keys, pre-published; {} tokio workers; \
         best of {} rounds (least CPU), sides interleaved",
        o.n, o.workers, o.rounds
    );
    println!("  load average at start: {}", load_average());
    for side in Side::ALL {
        println!("  {:<17} {}", side.name(), side.what());
    }
    println!(
        "  framework sides: Consumer on a MemoryBroker source; raw sides: tokio mpsc -> dispatcher \
         -> one task per key (bounded channel), serde_json::from_slice"
    );
    println!(
        "  spans on: one info span per message with the framework's attributes -> \
         tracing-opentelemetry -> SDK tracer, simple processor, exporter that drops"
    );
    println!();
    println!(
        "{:<7} {:>5} | {:>15} {:>15} {:>14} | {:>12} {:>12} {:>12} | {:>9} {:>9}",
        "dedup",
        "spans",
        "framework msg/s",
        "raw-equal msg/s",
        "raw msg/s",
        "framework µs",
        "raw-equal µs",
        "raw µs",
        "vs equal",
        "vs raw",
    );
    // Spans off first: once a scoped dispatcher has existed, every span
    // callsite consults the thread's default.
    for &spans in &o.spans {
        let mut runs: Vec<(Side, Vec<Measurement>)> =
            Side::ALL.into_iter().map(|s| (s, Vec::new())).collect();
        for _ in 0..o.rounds {
            for (side, r) in &mut runs {
                if let Some(m) = run_side(*side, spans, &o)? {
                    r.push(m);
                }
            }
        }
        let best: Vec<(Side, Measurement)> = runs
            .into_iter()
            .filter_map(|(s, r)| best(r).map(|m| (s, m)))
            .collect();
        let find = |side: Side| best.iter().find(|(s, _)| *s == side).map(|(_, m)| m);
        for (side, fw) in best.iter().filter(|(s, _)| s.kind == Kind::Framework) {
            let (Some(equal), Some(raw)) = (
                find(side.baseline(Kind::RawEqual)),
                find(side.baseline(Kind::Raw)),
            ) else {
                continue;
            };
            let dedup = match side.dedup {
                Dedup::Sqlite => "sqlite",
                Dedup::Memory => "memory",
                Dedup::None => "none",
            };
            let rate = |m: &Measurement| o.n as f64 / m.wall.as_secs_f64();
            let ratio = |m: &Measurement| fw.cpu.as_secs_f64() / m.cpu.as_secs_f64();
            println!(
                "{:<7} {:>5} | {:>15.0} {:>15.0} {:>14.0} | {:>12.2} {:>12.2} {:>12.2} | {:>8.2}x {:>8.2}x",
                dedup,
                spans.name(),
                rate(fw),
                rate(equal),
                rate(raw),
                per_msg_us(fw.cpu, o.n),
                per_msg_us(equal.cpu, o.n),
                per_msg_us(raw.cpu, o.n),
                ratio(equal),
                ratio(raw),
            );
        }
    }
    println!();
    println!(
        "µs = process CPU time (all threads, user + system) per message; \
         vs equal / vs raw = framework CPU / that raw side's; target with spans off: \
         <= 2x the equal-work raw loop (raw-equal)"
    );
    Ok(())
}

/// The machine is shared: a busy one moves every figure, so say how busy.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}
