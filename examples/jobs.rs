//! Background jobs on the database, with no services: SQLite holds the
//! application's rows, the store and the job queue, and one consumer runs
//! the jobs through ordinary `#[handler]`s.
//!
//! A sign-up writes its user and enqueues the welcome email in one
//! transaction (a sign-up that rolls back leaves no email to send); a
//! reminder is scheduled for later, at a higher priority; a digest is
//! enqueued twice but is unique while pending; and the mail server fails
//! once, so one email is retried.
//!
//! ```sh
//! cargo run --example jobs
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use consumer::jobs::{Enqueued, Job, JobTables, Jobs};
use consumer::{Consumer, Message, SqliteStore, SqliteTx, handler};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Email {
    user: String,
    kind: String,
}

#[derive(Debug, thiserror::Error)]
#[error("the mail server did not answer")]
struct MailServerDown;

/// The mail server is down for the first email it is given.
static DOWN_ONCE: AtomicBool = AtomicBool::new(true);

#[handler(
    idempotency_key = email.user.clone() + "/" + &email.kind,
    retry = exponential(base = "50ms", max_delay = "200ms", attempts = 3),
)]
async fn send_email(email: Email, tx: &mut SqliteTx) -> Result<(), MailServerDown> {
    if DOWN_ONCE.swap(false, Ordering::SeqCst) {
        return Err(MailServerDown);
    }
    sqlx::query("INSERT INTO emails (user_id, kind) VALUES ($1, $2)")
        .bind(&email.user)
        .bind(&email.kind)
        .execute(&mut **tx)
        .await
        .map_err(|_| MailServerDown)?;
    Ok(())
}

fn email(user: &str, kind: &str) -> anyhow::Result<Message> {
    let body = Email {
        user: user.into(),
        kind: kind.into(),
    };
    // Keyed by user: a user's emails go out in the order they were asked for.
    Ok(Message::json("SendEmail", &body)?.with_key(user))
}

/// Signs `user` up: the user's row and the welcome email commit together,
/// or (`commit == false`) neither exists.
async fn sign_up(
    pool: &sqlx::SqlitePool,
    jobs: &Jobs,
    user: &str,
    commit: bool,
) -> anyhow::Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query("INSERT INTO users (id) VALUES ($1)")
        .bind(user)
        .execute(&mut *tx)
        .await?;
    jobs.enqueue(&mut tx, email(user, "welcome")?).await?;
    if commit {
        tx.commit().await?;
        jobs.notify(pool).await?; // start it now, not at the next poll
    } else {
        tx.rollback().await?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let started = Instant::now();
    let dir = std::env::temp_dir().join("consumer-examples");
    std::fs::create_dir_all(&dir)?;
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(dir.join(format!("jobs-{}.db", uuid::Uuid::new_v4())))
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await?;
    let store = SqliteStore::new(pool.clone()).with_extension(JobTables);
    store.migrate().await?;
    sqlx::query("CREATE TABLE users (id TEXT PRIMARY KEY)")
        .execute(&pool)
        .await?;
    sqlx::query(
        "CREATE TABLE emails (n INTEGER PRIMARY KEY AUTOINCREMENT, user_id TEXT, kind TEXT)",
    )
    .execute(&pool)
    .await?;

    let jobs = Jobs::new("emails");
    sign_up(&pool, &jobs, "ada", true).await?;
    sign_up(&pool, &jobs, "bob", false).await?; // rolled back: no email
    sign_up(&pool, &jobs, "cyd", true).await?;
    let reminder = Job::new(email("ada", "reminder")?)
        .with_due(Duration::from_millis(300))
        .with_priority(10);
    jobs.enqueue_now(&pool, reminder).await?;
    for _ in 0..2 {
        let digest = Job::new(email("cyd", "digest")?).unique_while_pending("digest/cyd");
        if jobs.enqueue_now(&pool, digest).await? == Enqueued::AlreadyPending {
            println!("digest for cyd: already pending, not enqueued again");
        }
    }

    let consumer = Consumer::new(jobs.source(pool.clone()), store, send_email);
    let stats = consumer.stats();
    let done = stats.clone();
    consumer
        .run_until(async move {
            done.wait_for(|s| s.processed >= 4).await;
        })
        .await?;

    let sent: Vec<(String, String)> = sqlx::query_as("SELECT user_id, kind FROM emails ORDER BY n")
        .fetch_all(&pool)
        .await?;
    for (user, kind) in &sent {
        println!("sent {kind} to {user}");
    }
    let s = stats.snapshot();
    println!(
        "{} emails, {} retried, {} jobs left, finished in {:.2?}",
        sent.len(),
        s.retries,
        jobs.pending(&pool).await?,
        started.elapsed()
    );
    Ok(())
}
