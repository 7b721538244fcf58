//! Background jobs on the database: a queue whose table lives in the
//! store's database (PostgreSQL, or SQLite for the embedded default), read
//! by the same consumers, routers and `#[handler]`s as a broker.
//!
//! ```no_run
//! # async fn demo(pool: sqlx::SqlitePool) -> Result<(), Box<dyn std::error::Error>> {
//! use consumer_core::{Message, Store};
//! use consumer_jobs::{JobTables, Jobs};
//!
//! let store = Store::new(pool.clone()).with_extension(JobTables);
//! store.migrate().await?; // the store's tables and `consumer_jobs`
//! let jobs = Jobs::new("emails");
//!
//! // The job exists if and only if the business write commits.
//! let mut tx = pool.begin().await?;
//! sqlx::query("INSERT INTO users (id) VALUES (7)").execute(&mut *tx).await?;
//! let welcome = Message::json("SendWelcome", &serde_json::json!({"user": 7}))?.with_key("user-7");
//! jobs.enqueue(&mut tx, welcome).await?;
//! tx.commit().await?;
//! jobs.notify(&pool).await?; // optional: start it now rather than at the next poll
//!
//! // Workers: the queue is a source like a broker's.
//! let source = jobs.source(pool.clone());
//! # let _ = (source, store);
//! # Ok(())
//! # }
//! ```
//!
//! # What holds
//!
//! * **Transactional enqueue.** [`Jobs::enqueue`] writes in the caller's
//!   transaction (a sqlx transaction or a handler's `tx`); a rollback
//!   leaves no job. [`Jobs::enqueue_now`] and [`JobPublisher`] write in a
//!   transaction of their own.
//! * **Claims in batches.** A [`JobSource`] claims up to a batch of due
//!   jobs in one statement, `FOR UPDATE SKIP LOCKED` on PostgreSQL (workers
//!   never wait on each other's rows), under SQLite's single writer there.
//! * **Leases.** A claim leases its jobs; a heartbeat renews the leases of
//!   the jobs still running. When a worker dies its leases end and its jobs
//!   are claimed again, at least once: the store's dedup keeps their
//!   effects single. A settle names its delivery (the job and its claim
//!   count), so a worker whose lease ended changes nothing of the job's
//!   next delivery.
//! * **Per-key order.** A job's key (the message's key) is its order: a
//!   key's next job is not claimed while an earlier one is running or
//!   waiting to retry; jobs of different keys run in parallel. On
//!   PostgreSQL writers of one key take a transaction-scoped advisory lock,
//!   so the key's order is its commit order.
//! * **Settling.** An ack deletes the job's row. A retry through the queue
//!   ([`RetryMode::Redeliver`](consumer_core::RetryMode)) reschedules the row
//!   (`run_at` at the policy's delay, the attempt on the row); an in-place
//!   retry keeps the lease while the runtime waits. A dead letter goes to
//!   the store's dead-letter table (`consumer_dead_letters`), where
//!   `consumer dead-letters` lists it.
//! * **Scheduling, priorities, uniqueness.** A [`Job`] falls due at an
//!   instant or after a delay ([`Job::with_due`]), goes before the due jobs
//!   of lower priority ([`Job::with_priority`]; a key's order still comes
//!   first), and may be unique in its queue while pending
//!   ([`Job::unique_while_pending`]: [`Enqueued::AlreadyPending`]) or
//!   for a window after its enqueue, finished or not ([`Job::unique_for`]:
//!   [`Enqueued::WithinWindow`]; ended windows go with the store's purge).
//!   Named queues share the table ([`Jobs::new`]); each queue's workers
//!   are a consumer of their own, with its own concurrency.
//! * **Recurring jobs.** A [`Recurring`] job (a cron pattern, UTC) is
//!   enqueued by a [`Scheduler`] ([`Jobs::scheduler`]) once per period
//!   however many instances run it: the period is claimed by one upsert in
//!   the transaction that writes its job. Missed periods run once, for the
//!   latest.
//! * **Operations.** [`JobQueues`] lists the jobs by queue and state,
//!   shows one, makes a waiting one due now, cancels one, and pauses a
//!   queue (its jobs are not claimed until it is resumed): what
//!   `consumer jobs` runs.
//! * **Retention.** An acked job's row is deleted: the table holds only
//!   work not done, and finished jobs need no pruning.
//! * **Wake-ups.** An idle worker waits for a wake-up or its poll interval:
//!   [`Jobs::notify`] (called by [`Jobs::enqueue_now`] and the publisher
//!   after their commit) rings the workers of this process and, on
//!   PostgreSQL, `NOTIFY`s every process's (`LISTEN` on [`CHANNEL`]). No
//!   `NOTIFY` is sent from inside a writer's transaction unless asked for
//!   ([`Jobs::with_notify_in_transaction`]): it serialises every such
//!   writer's commit on PostgreSQL's notification lock.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod acker;
mod database;
mod deletes;
mod gauges;
mod job;
mod jobs;
mod lease;
#[cfg(feature = "postgres")]
mod postgres;
mod publisher;
mod queues;
mod recurring;
mod row;
mod source;
#[cfg(feature = "sqlite")]
mod sqlite;
mod statements;
mod tables;
mod wake;

pub use acker::{DEAD_LETTER_REFUSAL, JobAcker};
pub use database::JobDatabase;
pub use gauges::Backlog;
pub use job::{Enqueued, Job};
pub use jobs::Jobs;
pub use publisher::JobPublisher;
pub use queues::{Changed, JobDetail, JobInfo, JobQueues, JobState, PausedQueue};
pub use recurring::{Fired, PERIOD_HEADER, Recurring, RunningScheduler, Scheduler};
pub use source::JobSource;
pub use tables::JobTables;

/// Name of the table that records which of the job queue's migrations ran
/// (kept apart from the store's `_consumer_migrations`).
pub const MIGRATIONS_TABLE: &str = "_consumer_jobs_migrations";

/// The queue of a [`Jobs::default`] handle.
pub const DEFAULT_QUEUE: &str = "default";

/// The PostgreSQL channel workers `LISTEN` on and [`Jobs::notify`]
/// announces on (the payload names the queue).
pub const CHANNEL: &str = "consumer_jobs";

/// `messaging.system` of the job queue's sources and publishers.
pub const SYSTEM: &str = "consumer_jobs";

/// Creates or upgrades `consumer_jobs` on `pool` (idempotent); or
/// register [`JobTables`] with the store and let [`Store::migrate`](consumer_core::Store::migrate) do it.
pub async fn migrate<DB: JobDatabase>(pool: &sqlx::Pool<DB>) -> Result<(), consumer_core::Error> {
    statements::migrate(pool).await
}
