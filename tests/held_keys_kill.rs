//! Sequenced dead letters through SIGKILLs (real processes, real RabbitMQ
//! `AMQP_URL`, real PostgreSQL `DATABASE_URL`): a consumer of a handler
//! that holds keys is killed and restarted at random points while one
//! account's entry is dead-lettered and the account's later entries are
//! parked, again between the dead letter and its release, and again while
//! the released account drains. Every entry is applied once, each account's
//! in order, and the account is drained whole.
//!
//! The consumers are child processes (this test binary re-run with
//! `--ignored --exact child_consumer`), one at a time: a plain queue keeps
//! a key's order for one consumer. `HELD_KILL_SEED` replays a schedule.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use consumer::amqp::{AmqpPublisher, AmqpSource, Topology};
use consumer::envelope::names;
use consumer::store::held::{HeldKeys, Release};
use consumer::testing::{FreshSchema, database_url};
use consumer::{Consumer, Headers, Message, PgStore, PgTx, handler};
use rand::{RngExt, SeedableRng};

const SCHEMA_ENV: &str = "HELD_KILL_SCHEMA";
const QUEUE_ENV: &str = "HELD_KILL_QUEUE";
const ACCOUNTS: [&str; 4] = ["a0", "a1", "a2", "a3"];
const PER_ACCOUNT: i32 = 40;
/// The entry whose dead letter holds its account.
const REFUSED: (&str, i32) = ("a1", 5);

fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Entry {
    account: String,
    n: i32,
}

#[derive(Debug, thiserror::Error)]
enum LedgerError {
    #[error("entry {0} of {1} refused")]
    Refused(i32, String),
    #[error("database error")]
    Db(#[from] sqlx::Error),
}

#[handler(retry = none, terminal = LedgerError::Refused(..), on_dead_letter = hold_key)]
async fn apply_entry(entry: Entry, tx: &mut PgTx) -> Result<(), LedgerError> {
    let refused: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM refused WHERE account = $1 AND n = $2)")
            .bind(&entry.account)
            .bind(entry.n)
            .fetch_one(&mut **tx)
            .await?;
    if refused {
        return Err(LedgerError::Refused(entry.n, entry.account));
    }
    sqlx::query("INSERT INTO ledger (account, n) VALUES ($1, $2)")
        .bind(&entry.account)
        .bind(entry.n)
        .execute(&mut **tx)
        .await?;
    // Work that takes a while, so that kills land while entries run.
    tokio::time::sleep(Duration::from_millis(3)).await;
    Ok(())
}

fn topology(queue: &str) -> Topology {
    Topology::new(queue.to_owned())
        .expect("queue name")
        .with_max_retry_delay(Duration::from_secs(1))
        .with_expires(Duration::from_secs(600))
}

async fn source(queue: &str) -> AmqpSource {
    let url = amqp_url();
    AmqpSource::builder(url.clone(), topology(queue))
        .connect()
        .await
        .unwrap_or_else(|e| {
            panic!("RabbitMQ is not reachable at {url} ({e}): start it (scripts/services rabbitmq does) or set AMQP_URL")
        })
}

async fn pool_in(schema: &str) -> sqlx::PgPool {
    FreshSchema::pool_on(schema, 6).await.unwrap_or_else(|e| {
        panic!("PostgreSQL is not reachable at {} ({e}): start it (scripts/services postgres does) or set DATABASE_URL", database_url())
    })
}

/// The consumer process. Runs only when the parent test starts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "entry point of the consumer child processes of a_held_key_keeps_order_and_once_through_sigkills"]
async fn child_consumer() {
    let (Ok(schema), Ok(queue)) = (std::env::var(SCHEMA_ENV), std::env::var(QUEUE_ENV)) else {
        return;
    };
    let pool = pool_in(&schema).await;
    let consumer = Consumer::new(source(&queue).await, PgStore::new(pool), apply_entry)
        .with_max_in_flight(16)
        .with_held_key_lease(Duration::from_secs(1));
    let _ = consumer.run_until(std::future::pending()).await;
}

fn spawn_consumer(schema: &str, queue: &str) -> Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--ignored",
            "--exact",
            "child_consumer",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SCHEMA_ENV, schema)
        .env(QUEUE_ENV, queue)
        .env("DATABASE_URL", database_url())
        .env("AMQP_URL", amqp_url())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn a consumer process")
}

async fn count(pool: &sqlx::PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(pool)
        .await
        .expect("count")
}

/// Kills and restarts the consumer at random intervals (`every` ms apart,
/// looks that kill or not at even odds, the first always) until `done`
/// holds (read from the database), within 90 s; the kills it made.
async fn kill_until<F, Fut>(
    rng: &mut rand::rngs::StdRng,
    every: std::ops::Range<u64>,
    consumer: &mut Child,
    start: impl Fn() -> Child,
    what: &str,
    done: F,
) -> u32
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    let mut kills = 0;
    loop {
        let wait = Duration::from_millis(rng.random_range(every.clone()));
        tokio::time::sleep(wait).await;
        if done().await {
            return kills;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not reached within 90 s ({kills} kills)"
        );
        // About every other look, a kill: the consumer also gets time to
        // work.
        if kills == 0 || rng.random_bool(0.5) {
            let _ = consumer.kill();
            let _ = consumer.wait();
            kills += 1;
            *consumer = start();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_key_keeps_order_and_once_through_sigkills() {
    let seed: u64 = std::env::var("HELD_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("HELD_KILL_SEED={seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let FreshSchema { pool, schema, .. } = FreshSchema::create("ct_hkill", 8)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    sqlx::raw_sql(
        "CREATE TABLE ledger (id BIGSERIAL PRIMARY KEY, account TEXT NOT NULL, n INTEGER NOT NULL); \
         CREATE TABLE refused (account TEXT NOT NULL, n INTEGER NOT NULL)",
    )
    .execute(&pool)
    .await
    .expect("ledger tables");
    sqlx::query("INSERT INTO refused VALUES ($1, $2)")
        .bind(REFUSED.0)
        .bind(REFUSED.1)
        .execute(&pool)
        .await
        .expect("refuse one entry");
    let queue = format!("ct.held.kill.{}", uuid::Uuid::now_v7().simple());
    // Declares the topology, so that what is published now is kept.
    drop(source(&queue).await);
    let publisher = AmqpPublisher::builder(amqp_url()).build();
    for n in 0..PER_ACCOUNT {
        for account in ACCOUNTS {
            let mut headers = Headers::new();
            headers.insert(names::ID, format!("{account}-{n}"));
            let message = Message {
                key: Some(account.to_owned()),
                headers,
                payload: serde_json::to_vec(&Entry {
                    account: account.to_owned(),
                    n,
                })
                .expect("json")
                .into(),
            };
            publisher
                .publish_to("", &queue, &message, None)
                .await
                .expect("publish an entry");
        }
    }

    let start = || spawn_consumer(&schema, &queue);
    let mut consumer = start();
    let others = i64::from(PER_ACCOUNT) * (ACCOUNTS.len() as i64 - 1);
    let before = i64::from(REFUSED.1);
    let behind = i64::from(PER_ACCOUNT - REFUSED.1);
    // Until the head is dead-lettered and everything behind it parked
    // (the head included), the other accounts applied whole.
    let held = kill_until(
        &mut rng,
        150..600,
        &mut consumer,
        start,
        "the account held",
        || async {
            count(&pool, "SELECT count(*) FROM ledger").await == others + before
                && count(&pool, "SELECT count(*) FROM consumer_parked").await == behind
                && count(
                    &pool,
                    "SELECT count(*) FROM consumer_held_keys WHERE status = 'held'",
                )
                .await
                    == 1
        },
    )
    .await;
    // Between the dead letter and its release.
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..400))).await;
        let _ = consumer.kill();
        let _ = consumer.wait();
        consumer = start();
    }
    sqlx::query("DELETE FROM refused")
        .execute(&pool)
        .await
        .expect("fix the cause");
    let store = PgStore::new(pool.clone());
    assert_eq!(
        store
            .release_key("apply_entry", REFUSED.0, false)
            .await
            .expect("release"),
        Release::Released
    );
    let total = i64::from(PER_ACCOUNT) * ACCOUNTS.len() as i64;
    let drained = kill_until(
        &mut rng,
        50..300,
        &mut consumer,
        start,
        "the account drained",
        || async {
            count(&pool, "SELECT count(*) FROM ledger").await == total
                && count(&pool, "SELECT count(*) FROM consumer_held_keys").await == 0
        },
    )
    .await;
    let _ = consumer.kill();
    let _ = consumer.wait();
    println!("kills: {held} before the hold, 2 while held, {drained} while draining");

    for account in ACCOUNTS {
        let ns: Vec<i32> =
            sqlx::query_scalar("SELECT n FROM ledger WHERE account = $1 ORDER BY id")
                .bind(account)
                .fetch_all(&pool)
                .await
                .expect("ledger");
        assert_eq!(
            ns,
            (0..PER_ACCOUNT).collect::<Vec<_>>(),
            "{account}: each entry once, in order (seed {seed})"
        );
    }
    assert_eq!(
        count(&pool, "SELECT count(*) FROM consumer_parked").await,
        0
    );
}
