//! Job workers killed at random points (SIGKILL on real processes) while
//! jobs run, with writers enqueueing in their own transactions: every job
//! takes effect exactly once, and each key's jobs take effect in the order
//! they were enqueued. A killed worker's jobs come back when its leases end
//! (one second here) and run on another worker; the store's dedup row, in
//! the handler's transaction, absorbs a job whose effect committed before
//! its worker died unacked.
//!
//! A second test stops a worker (SIGSTOP) inside a job until its lease has
//! ended and another worker has taken the job, then lets it go on: the job
//! still takes effect once.
//!
//! The workers are child processes (this test binary re-run with
//! `--ignored --exact child_worker`). Needs PostgreSQL (`DATABASE_URL`).

use std::collections::{BTreeMap, HashMap};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use consumer::jobs::{JobTables, Jobs};
use consumer::testing::{FreshSchema, database_url};
use consumer::{Consumer, Message, PgTx, Store, handler};
use rand::RngExt;

const SCHEMA_ENV: &str = "JOBS_KILL_SCHEMA";
const QUEUE: &str = "kill";
const KEYS: u32 = 12;
const STEPS: u32 = 60;

async fn pool_in(schema: &str, max: u32) -> sqlx::PgPool {
    FreshSchema::pool_on(schema, max).await.unwrap_or_else(|e| {
        panic!("PostgreSQL is not reachable at {} ({e}): start it (scripts/services postgres does) or set DATABASE_URL", database_url())
    })
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Step {
    key: String,
    n: u32,
}

/// The worker's own pool, for what it writes outside the handler's
/// transaction.
static POOL: std::sync::OnceLock<sqlx::PgPool> = std::sync::OnceLock::new();

/// The key of the job the pause test stops its worker in.
const PAUSED: &str = "paused";

#[handler]
async fn apply(step: Step, tx: &mut PgTx) -> Result<(), sqlx::Error> {
    if step.key == PAUSED
        && let Some(pool) = POOL.get()
    {
        // Says, outside the transaction, that the job is running; then
        // gives the test time to stop this process before it commits.
        sqlx::query("INSERT INTO entered (pid) VALUES ($1)")
            .bind(i64::from(std::process::id()))
            .execute(pool)
            .await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    sqlx::query("INSERT INTO effects (key, n) VALUES ($1, $2)")
        .bind(&step.key)
        .bind(i64::from(step.n))
        .execute(&mut **tx)
        .await?;
    // Work that takes a while, so that kills land while jobs run.
    tokio::time::sleep(Duration::from_millis(2)).await;
    Ok(())
}

/// The worker process. Runs only when the parent test starts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "entry point of the worker child processes of workers_killed_while_jobs_run_lose_nothing_and_apply_nothing_twice"]
async fn child_worker() {
    let Ok(schema) = std::env::var(SCHEMA_ENV) else {
        return;
    };
    let pool = pool_in(&schema, 6).await;
    let _ = POOL.set(pool.clone());
    let source = Jobs::new(QUEUE)
        .source(pool.clone())
        .with_lease(Duration::from_secs(1))
        .with_poll_interval(Duration::from_millis(50));
    let consumer = Consumer::new(source, Store::new(pool), apply).with_max_in_flight(8);
    let _ = consumer.run_until(std::future::pending()).await;
}

fn spawn_worker(schema: &str) -> Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--ignored",
            "--exact",
            "child_worker",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SCHEMA_ENV, schema)
        .env("DATABASE_URL", database_url())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn worker process")
}

/// The queue's table, the effects, and where a paused job says it runs.
async fn create_tables(pool: &sqlx::PgPool) {
    Store::new(pool.clone())
        .with_extension(JobTables)
        .migrate()
        .await
        .expect("the queue's table");
    for ddl in [
        "CREATE TABLE effects (seq BIGSERIAL PRIMARY KEY, key TEXT NOT NULL, n BIGINT NOT NULL)",
        "CREATE TABLE entered (pid BIGINT NOT NULL)",
    ] {
        sqlx::query(ddl).execute(pool).await.expect("a test table");
    }
}

/// Sends `signal` (`STOP`, `CONT`) to `child`.
fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .args([format!("-{signal}"), child.id().to_string()])
        .status()
        .expect("kill(1)");
    assert!(status.success(), "kill -{signal} failed");
}

/// Polls `query` (a count) until it reaches `at_least`, within 30 s.
async fn wait_count(pool: &sqlx::PgPool, query: &str, at_least: i64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(query.to_owned()))
            .fetch_one(pool)
            .await
            .expect("count");
        if n >= at_least {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{query}: {n}, never {at_least}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stopped_past_its_lease_and_woken_does_not_apply_its_job_twice() {
    let FreshSchema { pool, schema, .. } = FreshSchema::create("jp", 8)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    create_tables(&pool).await;
    let mut first = spawn_worker(&schema);
    let jobs = Jobs::new(QUEUE);
    let step = Message::json(
        "Step",
        &Step {
            key: PAUSED.into(),
            n: 0,
        },
    )
    .expect("json")
    .with_key(PAUSED);
    jobs.enqueue_now(&pool, step).await.expect("enqueue");

    wait_count(&pool, "SELECT count(*) FROM entered", 1).await;
    signal(&first, "STOP");
    // Its lease (1 s) ends; another worker claims the job (a second claim)
    // and waits on the stopped one's uncommitted dedup row.
    let mut second = spawn_worker(&schema);
    wait_count(
        &pool,
        "SELECT coalesce(max(claims), 0)::bigint FROM consumer_jobs",
        2,
    )
    .await;
    signal(&first, "CONT");

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while jobs.pending(&pool).await.expect("pending") > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the job was never settled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for w in [&mut first, &mut second] {
        let _ = w.kill();
        let _ = w.wait();
    }
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM effects WHERE key = $1")
        .bind(PAUSED)
        .fetch_one(&pool)
        .await
        .expect("effects");
    assert_eq!(applied, 1, "the job took effect once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_killed_while_jobs_run_lose_nothing_and_apply_nothing_twice() {
    let FreshSchema { pool, schema, .. } = FreshSchema::create("jk", 8)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    create_tables(&pool).await;

    let mut workers: Vec<Child> = (0..3).map(|_| spawn_worker(&schema)).collect();
    // Each key's steps enqueued in order, keys interleaved, by two writers.
    let writers: Vec<_> = (0..2u32)
        .map(|w| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let jobs = Jobs::new(QUEUE);
                for n in 0..STEPS {
                    for k in (w..KEYS).step_by(2) {
                        let key = format!("key-{k}");
                        let step = Message::json(
                            "Step",
                            &Step {
                                key: key.clone(),
                                n,
                            },
                        )
                        .expect("json")
                        .with_key(key);
                        let mut tx = pool.begin().await.expect("begin");
                        jobs.enqueue(&mut tx, step).await.expect("enqueue");
                        tx.commit().await.expect("commit");
                        jobs.notify(&pool).await.expect("notify");
                    }
                }
            })
        })
        .collect();

    let jobs = Jobs::new(QUEUE);
    let mut kills = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let writing = writers.iter().any(|w| !w.is_finished());
        let pending = jobs.pending(&pool).await.expect("pending");
        if !writing && pending == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the workers never drained the queue ({pending} pending, {kills} killed)"
        );
        // A random worker dies at a random point, and a new one starts.
        let (victim, pause) = {
            let mut rng = rand::rng();
            (
                rng.random_range(0..workers.len()),
                rng.random_range(50..250u64),
            )
        };
        tokio::time::sleep(Duration::from_millis(pause)).await;
        if kills < 12 {
            workers[victim].kill().expect("SIGKILL");
            let _ = workers[victim].wait();
            workers[victim] = spawn_worker(&schema);
            kills += 1;
        }
    }
    for mut w in workers {
        let _ = w.kill();
        let _ = w.wait();
    }
    for w in writers {
        w.await.expect("writer");
    }

    let effects: Vec<(String, i64)> = sqlx::query_as("SELECT key, n FROM effects ORDER BY seq")
        .fetch_all(&pool)
        .await
        .expect("effects");
    let mut per_key: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    let mut times: HashMap<(&str, i64), u32> = HashMap::new();
    for (key, n) in &effects {
        per_key.entry(key.as_str()).or_default().push(*n);
        *times.entry((key.as_str(), *n)).or_default() += 1;
    }
    let twice: Vec<_> = times.iter().filter(|(_, t)| **t > 1).collect();
    assert!(
        twice.is_empty(),
        "applied twice ({kills} killed): {twice:?}"
    );
    assert_eq!(
        effects.len(),
        usize::try_from(KEYS * STEPS).expect("count"),
        "every job applied once ({kills} workers killed)"
    );
    let in_order: Vec<i64> = (0..i64::from(STEPS)).collect();
    for (key, steps) in &per_key {
        assert_eq!(steps, &in_order, "{key}: applied out of order");
    }
    assert!(kills >= 3, "too few kills to mean anything: {kills}");
}
