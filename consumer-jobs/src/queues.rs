//! [`JobQueues`]: the queues of one database as an operator sees them
//! (what `consumer jobs` runs): the jobs by queue and state, one job in
//! full, a waiting job made due now, a job cancelled, a queue paused.

use std::fmt;
use std::str::FromStr;

use consumer_core::error::Error;
use consumer_core::sql::{Columns, Statement, args, time_from_ms};
use sqlx::Pool;
use time::OffsetDateTime;

use super::JobDatabase;

/// Where a job is, as `consumer jobs list --state` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum JobState {
    /// Due, held by no worker: waiting for one.
    Ready,
    /// Held by a worker whose lease has not ended.
    Running,
    /// Not due yet, never tried: scheduled for later.
    Scheduled,
    /// Not due yet after a failed attempt: waiting to retry.
    Retrying,
}

impl JobState {
    /// The state's name: `ready`, `running`, `scheduled`, `retrying`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::Running => "running",
            Self::Scheduled => "scheduled",
            Self::Retrying => "retrying",
        }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobState {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "ready" => Ok(Self::Ready),
            "running" => Ok(Self::Running),
            "scheduled" => Ok(Self::Scheduled),
            "retrying" => Ok(Self::Retrying),
            other => Err(Error::Config(format!(
                "job state {other:?}: expected one of ready, running, scheduled, retrying"
            ))),
        }
    }
}

/// One job as [`JobQueues::list`] and [`JobQueues::show`] read it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobInfo {
    /// Its place in the enqueueing order (the row's primary key).
    pub seq: i64,
    /// Its queue.
    pub queue: String,
    /// Its message id.
    pub id: String,
    /// The key whose order it keeps, if any.
    pub key: Option<String>,
    /// Where it is.
    pub state: JobState,
    /// The attempt it is on (1 until it fails once).
    pub attempt: i64,
    /// Its priority (higher first).
    pub priority: i64,
    /// When it is (or was) due.
    pub run_at: OffsetDateTime,
    /// When it was enqueued.
    pub created_at: OffsetDateTime,
    /// How many times it was claimed.
    pub claims: i64,
    /// The worker holding it, while running.
    pub lease_holder: Option<String>,
    /// The error of its last failed attempt.
    pub last_error: Option<String>,
    /// Its unique key, if enqueued as unique.
    pub unique_key: Option<String>,
}

/// One job in full: [`JobInfo`], its headers and body.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobDetail {
    /// What the list shows.
    pub info: JobInfo,
    /// Its headers, as the JSON object the table keeps.
    pub headers: String,
    /// Its body.
    pub payload: Vec<u8>,
}

/// A paused queue: by whom, why, since when.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PausedQueue {
    /// The queue.
    pub queue: String,
    /// Who paused it.
    pub by: String,
    /// Why.
    pub reason: String,
    /// Since when.
    pub at: OffsetDateTime,
}

/// What [`JobQueues::retry_now`] and [`JobQueues::cancel`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Changed {
    /// The job was changed (made due, or deleted).
    Done,
    /// The job is running: a worker holds it, so it was left alone.
    Running,
    /// No job of its queue has this id (finished, cancelled, or never
    /// there), or, for a retry, it is due already.
    NotFound,
}

/// The rows of `consumer_jobs` with their state, computed once for
/// every statement that reads it.
macro_rules! with_state {
    () => {
        "(SELECT *, CASE WHEN lease_until IS NOT NULL AND lease_until >= {now} THEN 'running' \
           WHEN run_at > {now} THEN (CASE WHEN attempt > 1 THEN 'retrying' ELSE 'scheduled' END) \
           ELSE 'ready' END AS state FROM consumer_jobs"
    };
}

/// The columns [`info`] reads, in its order.
macro_rules! info_columns {
    () => {
        "seq, queue, id, job_key, state, attempt, priority, {ms run_at}, {ms created_at}, \
         claims, lease_holder, last_error, unique_key"
    };
}

/// Jobs of queue `$1` (any if NULL) in state `$2` (any if NULL), after
/// `seq` `$3`, in enqueueing order, at most `$4`.
static LIST: Statement = Statement::new(concat!(
    "SELECT ",
    info_columns!(),
    " FROM ",
    with_state!(),
    " WHERE ($1 IS NULL OR queue = $1) AND seq > $3) j \
     WHERE ($2 IS NULL OR state = $2) ORDER BY seq LIMIT $4"
));

/// The jobs with id `$1`, in full.
static SHOW: Statement = Statement::new(concat!(
    "SELECT ",
    info_columns!(),
    ", {headers::text}, payload FROM ",
    with_state!(),
    " WHERE id = $1) j ORDER BY seq"
));

/// Makes queue `$1`'s waiting job `$2` due now, where no worker holds it.
static RETRY_NOW: Statement = Statement::new(
    "UPDATE consumer_jobs SET run_at = {now} \
     WHERE queue = $1 AND id = $2 AND run_at > {now} \
       AND (lease_until IS NULL OR lease_until < {now})",
);

/// Deletes queue `$1`'s job `$2`, where no worker holds it.
static CANCEL: Statement = Statement::new(
    "DELETE FROM consumer_jobs WHERE queue = $1 AND id = $2 \
       AND (lease_until IS NULL OR lease_until < {now})",
);

/// Whether queue `$1` has a running job `$2`.
static RUNNING: Statement = Statement::new(
    "SELECT count(*) FROM consumer_jobs WHERE queue = $1 AND id = $2 \
       AND lease_until IS NOT NULL AND lease_until >= {now}",
);

static PAUSE: Statement = Statement::new(
    "INSERT INTO consumer_job_pauses (queue, paused_by, reason, paused_at) \
     VALUES ($1, $2, $3, {now}) ON CONFLICT (queue) DO NOTHING",
);

static RESUME: Statement = Statement::new("DELETE FROM consumer_job_pauses WHERE queue = $1");

static PAUSED: Statement = Statement::new(
    "SELECT queue, paused_by, reason, {ms paused_at} FROM consumer_job_pauses ORDER BY queue",
);

/// The queues of one database, for an operator: read the jobs, move one,
/// pause a queue. Every change is one statement, safe beside running
/// workers: a job a worker holds is never changed.
#[derive(Debug, Clone)]
pub struct JobQueues<DB: JobDatabase> {
    pool: Pool<DB>,
}

impl<DB: JobDatabase> JobQueues<DB> {
    /// The queues in `pool`'s database (migrated: [`crate::migrate`]).
    pub fn new(pool: Pool<DB>) -> Self {
        Self { pool }
    }

    /// Up to `limit` jobs, in enqueueing order after `after_seq` (0 for
    /// the first page), of `queue` (or every queue) in `state` (or any).
    pub async fn list(
        &self,
        queue: Option<&str>,
        state: Option<JobState>,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<JobInfo>, Error> {
        let mut conn = self.pool.acquire().await?;
        let state = state.map(JobState::as_str);
        let rows = DB::fetch_all(
            &mut conn,
            LIST.sql::<DB>(),
            args![queue, state, after_seq, limit],
        )
        .await?;
        rows.iter()
            .map(|row| info::<DB>(&mut Columns::<DB>::of(row)))
            .collect()
    }

    /// The jobs with message id `id` (one, unless the same message was
    /// enqueued more than once), with their headers and bodies.
    pub async fn show(&self, id: &str) -> Result<Vec<JobDetail>, Error> {
        let mut conn = self.pool.acquire().await?;
        let rows = DB::fetch_all(&mut conn, SHOW.sql::<DB>(), args![id]).await?;
        rows.iter()
            .map(|row| {
                let mut c = Columns::<DB>::of(row);
                Ok(JobDetail {
                    info: info::<DB>(&mut c)?,
                    headers: c.text()?,
                    payload: c.bytes()?,
                })
            })
            .collect()
    }

    /// Makes `queue`'s job `id`, scheduled or waiting to retry, due now,
    /// and wakes the queue's workers. Its attempt is kept: a retry made
    /// now is the attempt it was waiting for.
    pub async fn retry_now(&self, queue: &str, id: &str) -> Result<Changed, Error> {
        let changed = self.change(&RETRY_NOW, queue, id).await?;
        if changed == Changed::Done {
            DB::announce(&self.pool, queue).await?;
        }
        Ok(changed)
    }

    /// Deletes `queue`'s job `id` unless a worker holds it: it never runs
    /// (a key's next job may then run).
    pub async fn cancel(&self, queue: &str, id: &str) -> Result<Changed, Error> {
        self.change(&CANCEL, queue, id).await
    }

    async fn change(
        &self,
        statement: &'static Statement,
        queue: &str,
        id: &str,
    ) -> Result<Changed, Error> {
        let mut conn = self.pool.acquire().await?;
        if DB::execute(&mut conn, statement.sql::<DB>(), args![queue, id]).await? > 0 {
            return Ok(Changed::Done);
        }
        let row = DB::fetch_optional(&mut conn, RUNNING.sql::<DB>(), args![queue, id]).await?;
        let running = match row {
            Some(row) => Columns::<DB>::of(&row).int()? > 0,
            None => false,
        };
        Ok(if running {
            Changed::Running
        } else {
            Changed::NotFound
        })
    }

    /// Pauses `queue`: its jobs are not claimed until [resumed](Self::resume)
    /// (jobs running now finish; their retries wait). `false` if it was
    /// paused already (the first pause's `by` and `reason` are kept).
    pub async fn pause(&self, queue: &str, by: &str, reason: &str) -> Result<bool, Error> {
        let mut conn = self.pool.acquire().await?;
        let args = args![queue, by, reason];
        Ok(DB::execute(&mut conn, PAUSE.sql::<DB>(), args).await? == 1)
    }

    /// Resumes `queue` and wakes its workers; `false` if it was not paused.
    pub async fn resume(&self, queue: &str) -> Result<bool, Error> {
        let mut conn = self.pool.acquire().await?;
        let resumed = DB::execute(&mut conn, RESUME.sql::<DB>(), args![queue]).await? == 1;
        drop(conn);
        if resumed {
            DB::announce(&self.pool, queue).await?;
        }
        Ok(resumed)
    }

    /// The paused queues, by name.
    pub async fn paused(&self) -> Result<Vec<PausedQueue>, Error> {
        let mut conn = self.pool.acquire().await?;
        let rows = DB::fetch_all(&mut conn, PAUSED.sql::<DB>(), args![]).await?;
        rows.iter()
            .map(|row| {
                let mut c = Columns::<DB>::of(row);
                Ok(PausedQueue {
                    queue: c.text()?,
                    by: c.text()?,
                    reason: c.text()?,
                    at: time_from_ms(c.int()?),
                })
            })
            .collect()
    }
}

/// A [`JobInfo`] from [`info_columns`].
fn info<DB: JobDatabase>(c: &mut Columns<'_, DB>) -> Result<JobInfo, Error> {
    Ok(JobInfo {
        seq: c.int()?,
        queue: c.text()?,
        id: c.text()?,
        key: c.maybe_text()?,
        state: c.text()?.parse()?,
        attempt: c.int()?,
        priority: c.int()?,
        run_at: time_from_ms(c.int()?),
        created_at: time_from_ms(c.int()?),
        claims: c.int()?,
        lease_holder: c.maybe_text()?,
        last_error: c.maybe_text()?,
        unique_key: c.maybe_text()?,
    })
}
