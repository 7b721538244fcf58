//! apalis's PostgreSQL backend (apalis 1, apalis-postgres 1) running the
//! jobs of `benches/jobs.rs`, one mode per invocation, for that bench to
//! print beside the database queue and the hand-written loop.
//!
//! ```text
//! jobs-peers throughput --url URL --n 20000 --batch 16 --concurrency 32
//! jobs-peers paced --url URL --rate 1000 --secs 10 --batch 16 --concurrency 32
//! ```
//!
//! `--url` names a database on the server; the run creates a database of
//! its own beside it (`jobs_peers_apalis`, dropped and created anew each
//! run, so every run starts from an empty table) and prints one line:
//! `RESULT jobs=N secs=S p50_us=A p99_us=B` (latencies from the paced mode
//! only; enqueue-to-start: from the instant before the enqueue, carried in
//! the job, to the handler's start).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use apalis::prelude::*;
use apalis_postgres::{Config, PgPool, PostgresStorage};
use serde::{Deserialize, Serialize};

const DATABASE: &str = "jobs_peers_apalis";
const QUEUE: &str = "bench";

/// The job: when it was enqueued (µs since the Unix epoch) and its number.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Tick {
    n: u64,
    enqueued_us: u64,
}

struct Run {
    expected: usize,
    done: AtomicUsize,
    latencies: Mutex<Vec<u64>>,
    finished: OnceLock<Instant>,
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

async fn run_job(job: Tick, run: Data<Arc<Run>>, worker: WorkerContext) -> Result<(), BoxDynError> {
    let started = now_us();
    std::hint::black_box(job.n);
    if let Ok(mut l) = run.latencies.lock() {
        l.push(started.saturating_sub(job.enqueued_us));
    }
    if run.done.fetch_add(1, Ordering::SeqCst) + 1 == run.expected {
        let _ = run.finished.set(Instant::now());
        worker.stop()?;
    }
    Ok(())
}

struct Args {
    mode: String,
    url: String,
    n: usize,
    rate: u64,
    secs: u64,
    batch: usize,
    concurrency: usize,
}

fn args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mode = it.next().ok_or("a mode: throughput or paced")?;
    let mut a = Args {
        mode,
        url: String::new(),
        n: 20_000,
        rate: 1_000,
        secs: 10,
        batch: 16,
        concurrency: 32,
    };
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} wants a value"))?;
        let num = || value.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--url" => a.url = value.clone(),
            "--n" => a.n = usize::try_from(num()?).map_err(|e| e.to_string())?,
            "--rate" => a.rate = num()?,
            "--secs" => a.secs = num()?,
            "--batch" => a.batch = usize::try_from(num()?).map_err(|e| e.to_string())?,
            "--concurrency" => {
                a.concurrency = usize::try_from(num()?).map_err(|e| e.to_string())?
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.url.is_empty() {
        return Err("--url is required".into());
    }
    Ok(a)
}

/// A database of the run's own on the server `url` names.
async fn fresh_database(url: &str) -> Result<PgPool, BoxDynError> {
    let admin = PgPool::connect(url).await?;
    sqlx_exec(
        &admin,
        &format!("DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)"),
    )
    .await?;
    sqlx_exec(&admin, &format!("CREATE DATABASE {DATABASE}")).await?;
    admin.close().await;
    let base = url.rsplit_once('/').map_or(url, |(base, _)| base);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(16)
        .connect(&format!("{base}/{DATABASE}"))
        .await?;
    PostgresStorage::setup(&pool).await?;
    Ok(pool)
}

async fn sqlx_exec(pool: &PgPool, sql: &str) -> Result<(), BoxDynError> {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(pool)
        .await?;
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxDynError> {
    let a = args()?;
    let pool = fresh_database(&a.url).await?;
    let config = Config::default().queue(QUEUE).batch_size(a.batch);
    let mut storage = PostgresStorage::<Tick>::new(&pool).with_config(config);
    let expected = match a.mode.as_str() {
        "throughput" => a.n,
        "paced" => usize::try_from(a.rate * a.secs)?,
        other => return Err(format!("unknown mode {other}").into()),
    };
    let run = Arc::new(Run {
        expected,
        done: AtomicUsize::new(0),
        latencies: Mutex::new(Vec::with_capacity(expected)),
        finished: OnceLock::new(),
    });
    if a.mode == "throughput" {
        let ticks: Vec<Tick> = (0..a.n as u64)
            .map(|n| Tick { n, enqueued_us: 0 })
            .collect();
        for chunk in ticks.chunks(1_000) {
            storage.push_bulk(chunk.to_vec()).await?;
        }
        sqlx_exec(&pool, "VACUUM ANALYZE apalis.jobs").await?;
    }
    let worker = WorkerBuilder::new("bench-worker")
        .backend(storage.clone().with_pubsub())
        .data(Arc::clone(&run))
        .concurrency(a.concurrency)
        .build(run_job);
    let started = Instant::now();
    let working = tokio::spawn(worker.run());
    if a.mode == "paced" {
        pace(&storage, a.rate, expected).await?;
    }
    working.await??;
    let finished = run.finished.get().copied().unwrap_or_else(Instant::now);
    let secs = finished.duration_since(started).as_secs_f64();
    let mut l = run.latencies.lock().map_err(|e| e.to_string())?.clone();
    l.sort_unstable();
    let pct = |p: f64| {
        l.get(((l.len() as f64 * p) as usize).min(l.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    let (p50, p99) = if a.mode == "paced" {
        (pct(0.50), pct(0.99))
    } else {
        (0, 0)
    };
    println!("RESULT jobs={expected} secs={secs:.6} p50_us={p50} p99_us={p99}");
    pool.close().await;
    Ok(())
}

/// `rate` jobs a second, each pushed in a task of its own at its tick (the
/// pushes do not wait for each other), `total` in all.
async fn pace(storage: &PostgresStorage<Tick>, rate: u64, total: usize) -> Result<(), BoxDynError> {
    // Let the worker start listening first.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut every = tokio::time::interval(Duration::from_nanos(1_000_000_000 / rate.max(1)));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut pushes = tokio::task::JoinSet::new();
    for n in 0..total as u64 {
        every.tick().await;
        let mut s = storage.clone();
        pushes.spawn(async move {
            s.push(Tick {
                n,
                enqueued_us: now_us(),
            })
            .await
        });
    }
    while let Some(pushed) = pushes.join_next().await {
        pushed?.map_err(|e| format!("push: {e}"))?;
    }
    Ok(())
}
