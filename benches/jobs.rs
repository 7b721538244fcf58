//! The database job queue beside a hand-written `FOR UPDATE SKIP LOCKED`
//! loop (the limit) and apalis's PostgreSQL backend, on one PostgreSQL, in
//! one run.
//!
//! Each side runs the same job (decode a small JSON payload, note when it
//! started) in two modes:
//!
//! * **throughput**: N jobs enqueued before the workers start (then
//!   `VACUUM ANALYZE`), drained; jobs per second from the workers' start to
//!   the N-th job's start;
//! * **paced**: the workers wait on an empty table while jobs are enqueued
//!   at R a second for S seconds (each enqueue in a task of its own at its
//!   tick, committed, then announced); enqueue-to-start latency, from the
//!   instant before the enqueue (carried in the job) to the handler's start,
//!   p50 and p99.
//!
//! The sides:
//!
//! * `consumer-jobs`: a `Consumer` on a `JobSource` (claims of `--batch`
//!   jobs, `--in-flight` jobs at once), a `PgStore`, and a hand-written
//!   `Handler` that decodes and claims no dedup row (neither other side
//!   has one); each ack deletes its job's row; enqueue with
//!   `Jobs::enqueue_now` (its own transaction, then `NOTIFY`).
//! * `hand loop` (the baseline): `--in-flight / --batch` loops, each claiming
//!   `--batch` jobs with one `UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP
//!   LOCKED) RETURNING` that leases them, running them, and deleting the
//!   batch with one `DELETE … WHERE id = ANY($1)`; an idle loop waits for a
//!   `LISTEN` wake-up or 500 ms; enqueue is one statement (`INSERT` and
//!   `pg_notify`), then a wake-up of this process's loops (as
//!   `Jobs::enqueue_now` rings this process's sources).
//! * `apalis`: apalis 1 with apalis-postgres 1 (`PostgresStorage` with its
//!   `LISTEN` wake-up, batch `--batch`, concurrency `--in-flight`, otherwise
//!   its defaults), built in `benches/peers` (a workspace of its own, which
//!   the suite does not build) and run as a child process per mode; only
//!   with `--peers PATH` (`scripts/bench-jobs` builds and passes it).
//!
//! ```text
//! scripts/bench-jobs                                   # everything, 3 rounds
//! cargo bench --bench jobs -- --rounds 1 --n 5000     # without apalis
//! ```
//!
//! Environment: `DATABASE_URL` (each side a fresh `bench_` schema; apalis
//! a database of its own on the same server).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use consumer::handler::{Invocation, Outcome};
use consumer::jobs::Jobs;
use consumer::testing::FreshSchema;
use consumer::{Consumer, DedupStore, Handler, Message, PgStore, RetryPolicy};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::watch;

const QUEUE: &str = "bench";
const HAND_CHANNEL: &str = "bench_hand_jobs";

/// The job: its number and when it was enqueued (µs since the Unix epoch).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Tick {
    n: u64,
    enqueued_us: u64,
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// What one side's run records as its jobs start.
struct Run {
    expected: usize,
    done: AtomicUsize,
    latencies: Mutex<Vec<u64>>,
    finished: OnceLock<Instant>,
    all: watch::Sender<bool>,
}

impl Run {
    fn new(expected: usize) -> Arc<Self> {
        Arc::new(Self {
            expected,
            done: AtomicUsize::new(0),
            latencies: Mutex::new(Vec::with_capacity(expected)),
            finished: OnceLock::new(),
            all: watch::channel(false).0,
        })
    }

    /// The job's work: note when it started.
    fn started(&self, tick: &Tick) {
        let lat = now_us().saturating_sub(tick.enqueued_us);
        if let Ok(mut l) = self.latencies.lock() {
            l.push(lat);
        }
        if self.done.fetch_add(1, Ordering::SeqCst) + 1 == self.expected {
            let _ = self.finished.set(Instant::now());
            self.all.send_replace(true);
        }
    }

    async fn wait_all(&self) {
        let mut rx = self.all.subscribe();
        let _ = rx.wait_for(|d| *d).await;
    }

    fn figures(&self, started: Instant, paced: bool) -> Figures {
        let finished = self.finished.get().copied().unwrap_or_else(Instant::now);
        let secs = finished.duration_since(started).as_secs_f64();
        let mut l = self.latencies.lock().map(|l| l.clone()).unwrap_or_default();
        l.sort_unstable();
        Figures {
            jobs_per_s: self.expected as f64 / secs,
            p50_us: if paced { percentile(&l, 0.50) } else { 0 },
            p99_us: if paced { percentile(&l, 0.99) } else { 0 },
        }
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    let i = ((sorted.len() as f64 * p) as usize).min(sorted.len().saturating_sub(1));
    sorted.get(i).copied().unwrap_or(0)
}

#[derive(Debug, Clone, Copy, Default)]
struct Figures {
    jobs_per_s: f64,
    p50_us: u64,
    p99_us: u64,
}

/// The `consumer-jobs` side's handler: decodes and records, no dedup row.
struct Record(Arc<Run>);

impl<S: DedupStore> Handler<S> for Record {
    fn name(&self) -> &'static str {
        "record"
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::none()
    }

    async fn handle(&self, invocation: &mut Invocation<'_, S>) -> Outcome {
        match invocation.decode::<Tick>() {
            Ok(tick) => {
                self.0.started(&tick);
                Outcome::Processed
            }
            Err(outcome) => outcome,
        }
    }
}

#[derive(Debug, Clone)]
struct Opts {
    n: usize,
    rate: u64,
    secs: u64,
    rounds: usize,
    batch: u32,
    in_flight: u32,
    peers: Option<PathBuf>,
    only: Option<String>,
}

impl Opts {
    fn parse() -> anyhow::Result<Self> {
        let mut o = Self {
            n: 20_000,
            rate: 1_000,
            secs: 10,
            rounds: 3,
            batch: 16,
            in_flight: 32,
            peers: None,
            only: None,
        };
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            if flag == "--bench" {
                continue;
            }
            let value = it.next().with_context(|| format!("{flag} wants a value"))?;
            match flag.as_str() {
                "--n" => o.n = value.parse()?,
                "--rate" => o.rate = value.parse()?,
                "--secs" => o.secs = value.parse()?,
                "--rounds" => o.rounds = value.parse()?,
                "--batch" => o.batch = value.parse()?,
                "--in-flight" => o.in_flight = value.parse()?,
                "--peers" => o.peers = Some(PathBuf::from(value)),
                "--only" => o.only = Some(value),
                _ => bail!("unknown flag {flag}"),
            }
        }
        if o.batch == 0 || o.in_flight < o.batch || o.rate == 0 {
            bail!("--batch must be at least 1, --in-flight at least --batch, --rate at least 1");
        }
        Ok(o)
    }

    fn paced_jobs(&self) -> usize {
        usize::try_from(self.rate * self.secs).unwrap_or(usize::MAX)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Ours,
    Hand,
    Apalis,
}

impl Side {
    fn label(self) -> &'static str {
        match self {
            Self::Ours => "consumer-jobs",
            Self::Hand => "hand loop (baseline)",
            Self::Apalis => "apalis-postgres 1.0",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Self::Ours => "ours",
            Self::Hand => "hand",
            Self::Apalis => "apalis",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Throughput,
    Paced,
}

async fn fresh(connections: u32) -> anyhow::Result<(FreshSchema, PgPool)> {
    let schema = FreshSchema::create("bench", 2)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let pool = FreshSchema::pool_with(schema.connect_options()?, connections).await?;
    Ok((schema, pool))
}

fn tick_message(n: u64, enqueued_us: u64) -> anyhow::Result<Message> {
    Ok(Message::json("Tick", &Tick { n, enqueued_us })?)
}

/// The `consumer-jobs` side in one mode.
async fn run_ours(o: &Opts, mode: Mode) -> anyhow::Result<Figures> {
    let (schema, pool) = fresh(o.in_flight / 2 + 8).await?;
    consumer::jobs::migrate(&pool).await?;
    let jobs = Jobs::new(QUEUE);
    let expected = match mode {
        Mode::Throughput => o.n,
        Mode::Paced => o.paced_jobs(),
    };
    if mode == Mode::Throughput {
        let mut tx = pool.begin().await?;
        for n in 0..o.n as u64 {
            jobs.enqueue(&mut tx, tick_message(n, 0)?).await?;
        }
        tx.commit().await?;
        sqlx::raw_sql("VACUUM ANALYZE consumer_jobs")
            .execute(&pool)
            .await?;
    }
    let run = Run::new(expected);
    let source = jobs.source(pool.clone()).with_batch_size(o.batch);
    let consumer = Consumer::new(source, PgStore::new(pool.clone()), Record(Arc::clone(&run)))
        .with_max_in_flight(o.in_flight as usize);
    let started = Instant::now();
    let waiter = Arc::clone(&run);
    let working = tokio::spawn(consumer.run_until(async move { waiter.wait_all().await }));
    if mode == Mode::Paced {
        let pool = pool.clone();
        pace(o, move |n| {
            let (pool, jobs) = (pool.clone(), jobs.clone());
            async move {
                jobs.enqueue_now(&pool, tick_message(n, now_us())?).await?;
                Ok(())
            }
        })
        .await?;
    }
    working.await??;
    let figures = run.figures(started, mode == Mode::Paced);
    pool.close().await;
    schema.drop_schema().await?;
    Ok(figures)
}

/// Enqueues `rate` jobs a second for `secs` seconds, each in a task of its
/// own at its tick, after the workers had time to start listening.
async fn pace<F, Fut>(o: &Opts, enqueue: F) -> anyhow::Result<()>
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut every = tokio::time::interval(Duration::from_nanos(1_000_000_000 / o.rate));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut enqueues = tokio::task::JoinSet::new();
    for n in 0..o.paced_jobs() as u64 {
        every.tick().await;
        enqueues.spawn(enqueue(n));
    }
    while let Some(done) = enqueues.join_next().await {
        done??;
    }
    Ok(())
}

const HAND_TABLE: &str = "CREATE TABLE hand_jobs (\
     id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, \
     payload JSONB NOT NULL, \
     run_at TIMESTAMPTZ NOT NULL DEFAULT now(), \
     locked_until TIMESTAMPTZ NULL)";

const HAND_CLAIM: &str = "UPDATE hand_jobs SET locked_until = now() + interval '30 seconds' \
     WHERE id IN (SELECT id FROM hand_jobs \
       WHERE run_at <= now() AND (locked_until IS NULL OR locked_until < now()) \
       ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED) \
     RETURNING id, payload::text";

const HAND_ENQUEUE: &str = "WITH j AS (INSERT INTO hand_jobs (payload) VALUES ($1::jsonb) RETURNING id) \
     SELECT pg_notify('bench_hand_jobs', '') FROM j";

/// The hand-written loop in one mode.
async fn run_hand(o: &Opts, mode: Mode) -> anyhow::Result<Figures> {
    let (schema, pool) = fresh(o.in_flight / 2 + 8).await?;
    sqlx::raw_sql(HAND_TABLE).execute(&pool).await?;
    let expected = match mode {
        Mode::Throughput => o.n,
        Mode::Paced => o.paced_jobs(),
    };
    if mode == Mode::Throughput {
        let payloads: Vec<String> = (0..o.n as u64)
            .map(|n| serde_json::to_string(&Tick { n, enqueued_us: 0 }))
            .collect::<Result<_, _>>()?;
        sqlx::query("INSERT INTO hand_jobs (payload) SELECT p::jsonb FROM unnest($1::text[]) AS p")
            .bind(&payloads)
            .execute(&pool)
            .await?;
        sqlx::raw_sql("VACUUM ANALYZE hand_jobs")
            .execute(&pool)
            .await?;
    }
    let run = Run::new(expected);
    let (wake, _) = watch::channel(0u64);
    let mut listener = PgListener::connect_with(&pool).await?;
    listener.listen(HAND_CHANNEL).await?;
    let ring = wake.clone();
    let listening = tokio::spawn(async move {
        while listener.recv().await.is_ok() {
            ring.send_modify(|n| *n += 1);
        }
    });
    let started = Instant::now();
    let mut loops = tokio::task::JoinSet::new();
    for _ in 0..(o.in_flight / o.batch) {
        loops.spawn(hand_loop(
            pool.clone(),
            Arc::clone(&run),
            wake.subscribe(),
            o.batch,
        ));
    }
    if mode == Mode::Paced {
        let pool = pool.clone();
        pace(o, move |n| {
            let (pool, wake) = (pool.clone(), wake.clone());
            async move {
                let payload = serde_json::to_string(&Tick {
                    n,
                    enqueued_us: now_us(),
                })?;
                sqlx::query(HAND_ENQUEUE)
                    .bind(payload)
                    .execute(&pool)
                    .await?;
                // As `Jobs::enqueue_now` does: the loops of this process
                // are woken at once, other processes' by the NOTIFY.
                wake.send_modify(|n| *n += 1);
                Ok(())
            }
        })
        .await?;
    }
    run.wait_all().await;
    let figures = run.figures(started, mode == Mode::Paced);
    loops.abort_all();
    while loops.join_next().await.is_some() {}
    listening.abort();
    pool.close().await;
    schema.drop_schema().await?;
    Ok(figures)
}

async fn hand_loop(
    pool: PgPool,
    run: Arc<Run>,
    mut wake: watch::Receiver<u64>,
    batch: u32,
) -> anyhow::Result<()> {
    loop {
        wake.borrow_and_update();
        let claimed: Vec<(i64, String)> = sqlx::query_as(HAND_CLAIM)
            .bind(i64::from(batch))
            .fetch_all(&pool)
            .await?;
        if claimed.is_empty() {
            let _ = tokio::time::timeout(Duration::from_millis(500), wake.changed()).await;
            continue;
        }
        let mut ids = Vec::with_capacity(claimed.len());
        for (id, payload) in claimed {
            let tick: Tick = serde_json::from_str(&payload)?;
            run.started(&tick);
            ids.push(id);
        }
        sqlx::query("DELETE FROM hand_jobs WHERE id = ANY($1)")
            .bind(&ids)
            .execute(&pool)
            .await?;
    }
}

/// apalis in one mode: the peer program, run as a child.
async fn run_apalis(o: &Opts, peers: &Path, mode: Mode) -> anyhow::Result<Figures> {
    let url = consumer::testing::database_url();
    let mut args: Vec<String> = match mode {
        Mode::Throughput => vec!["throughput".into(), "--n".into(), o.n.to_string()],
        Mode::Paced => vec![
            "paced".into(),
            "--rate".into(),
            o.rate.to_string(),
            "--secs".into(),
            o.secs.to_string(),
        ],
    };
    args.extend(["--url".into(), url, "--batch".into(), o.batch.to_string()]);
    args.extend(["--concurrency".into(), o.in_flight.to_string()]);
    let program = peers.to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(program).args(args).output()
    })
    .await?
    .with_context(|| format!("running {}", peers.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "{} failed: {}{}",
            peers.display(),
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .with_context(|| format!("no RESULT line from {}: {stdout}", peers.display()))?;
    let field = |name: &str| -> anyhow::Result<f64> {
        let v = line
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .with_context(|| format!("no {name} in {line}"))?;
        Ok(v.parse()?)
    };
    Ok(Figures {
        jobs_per_s: field("jobs")? / field("secs")?,
        p50_us: field("p50_us")? as u64,
        p99_us: field("p99_us")? as u64,
    })
}

async fn run_side(o: &Opts, side: Side, mode: Mode) -> anyhow::Result<Option<Figures>> {
    Ok(match side {
        Side::Ours => Some(run_ours(o, mode).await?),
        Side::Hand => Some(run_hand(o, mode).await?),
        Side::Apalis => match &o.peers {
            Some(p) => Some(run_apalis(o, p, mode).await?),
            None => None,
        },
    })
}

fn ms(us: u64) -> f64 {
    us as f64 / 1_000.0
}

fn print_table(title: &str, rows: &[(Side, Figures, Figures)]) {
    let Some((_, hand_t, hand_p)) = rows.iter().find(|(s, _, _)| *s == Side::Hand) else {
        return;
    };
    println!("\n{title}");
    println!(
        "| side | jobs/s (drain) | × hand loop | p50 ms (paced) | p99 ms (paced) | p99 × hand loop |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (side, t, p) in rows {
        println!(
            "| {} | {:.0} | {:.2}× | {:.2} | {:.2} | {:.2}× |",
            side.label(),
            t.jobs_per_s,
            t.jobs_per_s / hand_t.jobs_per_s,
            ms(p.p50_us),
            ms(p.p99_us),
            p.p99_us as f64 / hand_p.p99_us.max(1) as f64,
        );
    }
}

/// Every round's figures side by side, each ratio against the hand loop
/// of its own round (the machine's load moves all sides together).
fn print_rounds(all: &[Vec<(Side, Figures, Figures)>]) {
    println!("\nall rounds (each ratio against the same round's hand loop)");
    println!("| side | jobs/s (drain) | × hand loop | p50 ms (paced) | p99 ms (paced) |");
    println!("|---|---:|---:|---:|---:|");
    for side in [Side::Hand, Side::Ours, Side::Apalis] {
        let mut cells = [const { String::new() }; 4];
        for rows in all {
            let hand = rows.iter().find(|(s, _, _)| *s == Side::Hand);
            let Some((_, t, p)) = rows.iter().find(|(s, _, _)| *s == side) else {
                continue;
            };
            let ratio = hand.map_or(0.0, |(_, h, _)| t.jobs_per_s / h.jobs_per_s);
            let sep = if cells[0].is_empty() { "" } else { " / " };
            cells[0] += &format!("{sep}{:.0}", t.jobs_per_s);
            cells[1] += &format!("{sep}{ratio:.2}×");
            cells[2] += &format!("{sep}{:.1}", ms(p.p50_us));
            cells[3] += &format!("{sep}{:.1}", ms(p.p99_us));
        }
        if !cells[0].is_empty() {
            println!(
                "| {} | {} | {} | {} | {} |",
                side.label(),
                cells[0],
                cells[1],
                cells[2],
                cells[3]
            );
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let o = Opts::parse()?;
    println!(
        "jobs: drain {} jobs; paced {} jobs/s for {} s; batch {}, {} in flight; {} rounds; {}",
        o.n,
        o.rate,
        o.secs,
        o.batch,
        o.in_flight,
        o.rounds,
        if o.peers.is_some() {
            "with apalis"
        } else {
            "apalis skipped (no --peers)"
        }
    );
    let sides = [Side::Hand, Side::Ours, Side::Apalis];
    let mut all: Vec<Vec<(Side, Figures, Figures)>> = Vec::new();
    for round in 1..=o.rounds {
        let mut rows = Vec::new();
        // Alternate the order each round, so no side always runs first.
        let order: Vec<Side> = if round % 2 == 1 {
            sides.to_vec()
        } else {
            sides.iter().rev().copied().collect()
        };
        for side in order {
            if o.only.as_deref().is_some_and(|k| k != side.key()) {
                continue;
            }
            let Some(t) = run_side(&o, side, Mode::Throughput).await? else {
                continue;
            };
            let Some(p) = run_side(&o, side, Mode::Paced).await? else {
                continue;
            };
            eprintln!(
                "round {round}: {:<22} {:>8.0} jobs/s   p50 {:>7.2} ms   p99 {:>7.2} ms",
                side.label(),
                t.jobs_per_s,
                ms(p.p50_us),
                ms(p.p99_us)
            );
            rows.push((side, t, p));
        }
        rows.sort_by_key(|(s, _, _)| sides.iter().position(|x| x == s));
        print_table(&format!("round {round}"), &rows);
        all.push(rows);
    }
    print_rounds(&all);
    Ok(())
}
