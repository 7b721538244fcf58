//! Whether the job table stays bounded under a steady load: a soak of the
//! database queue on PostgreSQL that prints, every `--every` seconds, the
//! live and dead tuples (`pg_stat_user_tables`) and the total size
//! (`pg_total_relation_size`, indexes and TOAST included) of
//! `consumer_jobs` and of the store's dedup table, `consumer_processed`.
//!
//! Jobs are enqueued at `--rate` a second (each in its own transaction,
//! then announced) for `--secs` seconds and run by a `#[handler]` on a
//! `PgStore` (a dedup row per job, as a service has), 32 in flight. Pruning
//! is on: an acked job's row is deleted, one job in ten is unique for a
//! second (`Job::unique_for`, a row in `consumer_job_uniques`), and
//! `Store::purge` runs every 10 s with a 30 s retention (dedup rows and
//! ended unique windows). Autovacuum is the server's (its settings are
//! printed first).
//!
//! ```text
//! cargo bench --bench jobs_bloat                        # 300 s at 500 jobs/s
//! cargo bench --bench jobs_bloat -- --secs 20 --every 5 # a short look
//! ```
//!
//! A program run on demand, not part of the suite. Environment:
//! `DATABASE_URL` (a fresh `bench_` schema, dropped at the end).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use consumer::jobs::{Job, JobTables, Jobs};
use consumer::testing::FreshSchema;
use consumer::{Consumer, Message, PgStore, handler};
use sqlx::PgPool;

static HANDLED: AtomicU64 = AtomicU64::new(0);

#[derive(serde::Serialize, serde::Deserialize)]
struct Work {
    n: u64,
}

#[handler(retry = none)]
async fn work(job: Work) -> Result<(), Infallible> {
    std::hint::black_box(job.n);
    HANDLED.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

struct Opts {
    rate: u64,
    secs: u64,
    every: u64,
}

fn opts() -> anyhow::Result<Opts> {
    let mut o = Opts {
        rate: 500,
        secs: 300,
        every: 15,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--bench" {
            continue;
        }
        let value: u64 = it
            .next()
            .with_context(|| format!("{flag} wants a value"))?
            .parse()?;
        match flag.as_str() {
            "--rate" => o.rate = value.max(1),
            "--secs" => o.secs = value,
            "--every" => o.every = value.max(1),
            _ => bail!("unknown flag {flag}"),
        }
    }
    Ok(o)
}

/// One table's figures: live and dead tuples, total bytes, autovacuums.
async fn table(pool: &PgPool, name: &str) -> anyhow::Result<(i64, i64, i64, i64)> {
    sqlx::query("SELECT pg_stat_clear_snapshot()")
        .execute(pool)
        .await?;
    let row: (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT n_live_tup, n_dead_tup, pg_total_relation_size(relid), autovacuum_count \
         FROM pg_stat_user_tables WHERE relname = $1 AND schemaname = current_schema()",
    )
    .bind(name)
    .fetch_one(pool)
    .await?;
    Ok(row)
}

async fn report(pool: &PgPool, at: Duration, enqueued: u64) -> anyhow::Result<()> {
    let (jl, jd, js, ja) = table(pool, "consumer_jobs").await?;
    let (pl, pd, ps, pa) = table(pool, "consumer_processed").await?;
    println!(
        "{:>5.0} | {:>8} | {:>8} | {:>6} | {:>6} | {:>7.0} | {:>3} | {:>7} | {:>7} | {:>7.0} | {:>3}",
        at.as_secs_f64(),
        enqueued,
        HANDLED.load(Ordering::Relaxed),
        jl,
        jd,
        js as f64 / 1024.0,
        ja,
        pl,
        pd,
        ps as f64 / 1024.0,
        pa,
    );
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let o = opts()?;
    let fresh = FreshSchema::create("bench", 2)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let pool = FreshSchema::pool_with(fresh.connect_options()?, 24).await?;
    let store = PgStore::new(pool.clone())
        .with_extension(JobTables)
        .with_retention(Duration::from_secs(30));
    store.migrate().await?;
    let settings: Vec<(String, String)> = sqlx::query_as(
        "SELECT name, setting FROM pg_settings WHERE name IN \
         ('autovacuum', 'autovacuum_naptime', 'autovacuum_vacuum_threshold', \
          'autovacuum_vacuum_scale_factor', 'server_version') ORDER BY name",
    )
    .fetch_all(&pool)
    .await?;
    let settings: Vec<String> = settings
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    println!(
        "jobs_bloat: {} jobs/s for {} s; {}",
        o.rate,
        o.secs,
        settings.join(" ")
    );
    println!(
        "    s | enqueued |  handled | jobs live | dead | KiB | av | processed live | dead | KiB | av"
    );
    let jobs = Jobs::new("soak");
    let consumer =
        Consumer::new(jobs.source(pool.clone()), store.clone(), work).with_max_in_flight(32);
    let stats = consumer.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let working = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));
    let purging = tokio::spawn({
        let store = store.clone();
        async move {
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                if let Err(e) = store.purge().await {
                    eprintln!("purge: {e}");
                }
            }
        }
    });
    let enqueued = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut every = tokio::time::interval(Duration::from_nanos(1_000_000_000 / o.rate));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut next_report = Duration::ZERO;
    let mut enqueues = tokio::task::JoinSet::new();
    for n in 0..o.rate * o.secs {
        every.tick().await;
        let (p, jobs, count) = (pool.clone(), jobs.clone(), Arc::clone(&enqueued));
        enqueues.spawn(async move {
            let mut job = Job::new(Message::json("Work", &Work { n })?);
            if n % 10 == 0 {
                job = job.unique_for(format!("u{n}"), Duration::from_secs(1));
            }
            jobs.enqueue_now(&p, job).await?;
            count.fetch_add(1, Ordering::Relaxed);
            anyhow::Ok(())
        });
        while let Some(done) = enqueues.try_join_next() {
            done??;
        }
        if started.elapsed() >= next_report {
            report(&pool, started.elapsed(), enqueued.load(Ordering::Relaxed)).await?;
            next_report += Duration::from_secs(o.every);
        }
    }
    while let Some(done) = enqueues.join_next().await {
        done??;
    }
    let total = o.rate * o.secs;
    stats.wait_for(|s| s.processed >= total).await;
    report(&pool, started.elapsed(), enqueued.load(Ordering::Relaxed)).await?;
    purging.abort();
    let _ = stop.send(());
    working.await??;
    pool.close().await;
    fresh.drop_schema().await?;
    Ok(())
}
