//! The job queue's statements, written once for every database on the
//! core's [SQL seam](consumer_core::sql): enqueue, the claim (`SKIP LOCKED`
//! on PostgreSQL, SQLite's single writer), the lease's renewal, and what
//! settling a delivery does to its row.

use consumer_core::sql::{Columns, Dialect, Migrations, Statement, args, render};
use sqlx::{AssertSqlSafe, SqlSafeStr};

use super::row::JobRow;

/// A job due at `$6` (Unix ms) or, without one, `$7` ms from now; a job
/// whose unique key `$9` is pending already in its queue is not written.
static INSERT: Statement = Statement::new(
    "INSERT INTO consumer_jobs \
       (queue, id, job_key, headers, payload, attempt, run_at, priority, unique_key, created_at) \
     VALUES ($1, $2, $3, {$4::jsonb}, $5, 1, coalesce({at $6}, {later $7}), $8, $9, {now}) \
     ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING",
);

/// The `$4` due jobs of queue `$1`, highest priority then oldest first, that no worker holds (or whose
/// holder's lease has ended), none behind an earlier job of its key (one
/// running or waiting to retry holds the key's next back), leased to `$2`
/// for `$3` ms; none while the queue is paused. The subquery's rows are locked `SKIP LOCKED` on PostgreSQL,
/// so concurrent claims take disjoint batches without waiting.
static CLAIM: Statement = Statement::new(
    "UPDATE consumer_jobs SET claims = claims + 1, lease_holder = $2, lease_until = {later $3} \
     WHERE seq IN (SELECT j.seq FROM consumer_jobs j \
       WHERE j.queue = $1 AND j.run_at <= {now} \
         AND NOT EXISTS (SELECT 1 FROM consumer_job_pauses p WHERE p.queue = $1) \
         AND (j.lease_until IS NULL OR j.lease_until < {now}) \
         AND (j.job_key IS NULL OR NOT EXISTS (SELECT 1 FROM consumer_jobs e \
              WHERE e.queue = j.queue AND e.job_key = j.job_key AND e.seq < j.seq)) \
       ORDER BY j.priority DESC, j.run_at, j.seq LIMIT $4 {skip_locked}) \
     RETURNING seq, claims, id, job_key, {headers::text}, payload",
);

static DELETE: Statement =
    Statement::new("DELETE FROM consumer_jobs WHERE seq = $1 AND claims = $2");

static RELEASE: Statement = Statement::new(
    "UPDATE consumer_jobs SET lease_holder = NULL, lease_until = NULL \
     WHERE seq = $1 AND claims = $2",
);

static RESCHEDULE: Statement = Statement::new(
    "UPDATE consumer_jobs SET headers = {$3::jsonb}, attempt = $4, run_at = {at $5}, \
       last_error = $6, lease_holder = NULL, lease_until = NULL \
     WHERE seq = $1 AND claims = $2",
);

/// Jobs of queue `$1`: all, those held under a lease not ended, those
/// not due yet, those of them waiting to retry; and when the oldest due
/// job no worker holds fell due (Unix ms).
static COUNT: Statement = Statement::new(
    "SELECT count(*), \
       coalesce(sum(CASE WHEN lease_until IS NOT NULL AND lease_until >= {now} THEN 1 ELSE 0 END), 0), \
       coalesce(sum(CASE WHEN run_at > {now} THEN 1 ELSE 0 END), 0), \
       coalesce(sum(CASE WHEN run_at > {now} AND attempt > 1 THEN 1 ELSE 0 END), 0), \
       (SELECT {ms min(r.run_at)} FROM consumer_jobs r WHERE r.queue = $1 AND r.run_at <= {now} \
          AND (r.lease_until IS NULL OR r.lease_until < {now})) \
     FROM consumer_jobs WHERE queue = $1",
);

/// Moves schedule `$2` of queue `$1` to period `$4` (Unix ms) if it is
/// later than the last one enqueued: one row changed means this
/// transaction won the period (concurrent upserts of one row wait for each
/// other and re-read the row, on PostgreSQL as under SQLite's one writer).
static ADVANCE: Statement = Statement::new(
    "INSERT INTO consumer_job_schedules (queue, name, pattern, last_period, enqueued_at) \
     VALUES ($1, $2, $3, {at $4}, {now}) \
     ON CONFLICT (queue, name) DO UPDATE \
       SET pattern = excluded.pattern, last_period = excluded.last_period, \
           enqueued_at = excluded.enqueued_at \
     WHERE consumer_job_schedules.last_period < excluded.last_period",
);

/// Takes unique key `$2` of queue `$1` for `$3` ms from now, where it is
/// free or its window has ended: one row changed means taken (concurrent
/// takers of one key wait for each other and re-read the row).
static TAKE_UNIQUE: Statement = Statement::new(
    "INSERT INTO consumer_job_uniques (queue, unique_key, until) VALUES ($1, $2, {later $3}) \
     ON CONFLICT (queue, unique_key) DO UPDATE SET until = excluded.until \
     WHERE consumer_job_uniques.until <= {now}",
);

/// Deletes up to `$1` unique keys whose window has ended.
static PURGE_UNIQUES: Statement = Statement::new(
    "DELETE FROM consumer_job_uniques WHERE (queue, unique_key) IN \
       (SELECT queue, unique_key FROM consumer_job_uniques WHERE until <= {now} LIMIT $1)",
);

static PENDING: Statement = Statement::new("SELECT count(*) FROM consumer_jobs WHERE queue = $1");

/// What [`insert`] writes.
pub(crate) struct JobInsert<'a> {
    pub queue: &'a str,
    pub id: &'a str,
    pub key: Option<&'a str>,
    pub headers: &'a str,
    pub payload: &'a [u8],
    /// Due at this instant (Unix ms), or
    pub at_ms: Option<i64>,
    /// this long after the insert (ms).
    pub delay_ms: i64,
    pub priority: i32,
    pub unique_key: Option<&'a str>,
}

/// Creates or upgrades `consumer_jobs`, tracked in
/// [`MIGRATIONS_TABLE`](super::MIGRATIONS_TABLE).
pub(crate) async fn migrate<DB: Dialect>(
    pool: &sqlx::Pool<DB>,
) -> Result<(), consumer_core::Error> {
    let migrations = Migrations {
        postgres: sqlx::migrate!("./migrations/postgres"),
        sqlite: sqlx::migrate!("./migrations/sqlite"),
        table: super::MIGRATIONS_TABLE,
        ignore_missing: false,
    };
    DB::migrate(pool, migrations).await
}

/// Writes one job on `conn` (the caller's transaction, or a connection of
/// its own); `false` when its unique key is pending already.
pub(crate) async fn insert<DB: Dialect>(
    conn: &mut DB::Connection,
    job: &JobInsert<'_>,
) -> Result<bool, sqlx::Error> {
    let args = args![
        job.queue,
        job.id,
        job.key,
        job.headers,
        job.payload,
        job.at_ms,
        job.delay_ms,
        job.priority,
        job.unique_key
    ];
    Ok(DB::execute(conn, INSERT.sql::<DB>(), args).await? == 1)
}

/// Claims up to `batch` jobs of `queue` for `holder`, leased for
/// `lease_ms`; in enqueueing order.
pub(crate) async fn claim<DB: Dialect>(
    conn: &mut DB::Connection,
    queue: &str,
    holder: &str,
    lease_ms: i64,
    batch: i64,
) -> Result<Vec<JobRow>, sqlx::Error> {
    let args = args![queue, holder, lease_ms, batch];
    let rows = DB::fetch_all(conn, CLAIM.sql::<DB>(), args).await?;
    let mut jobs = rows
        .iter()
        .map(|row| {
            let mut c = Columns::<DB>::of(row);
            Ok(JobRow {
                seq: c.int()?,
                claims: c.int()?,
                id: c.text()?,
                key: c.maybe_text()?,
                headers: c.text()?,
                payload: c.bytes()?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    // RETURNING promises no order.
    jobs.sort_by_key(|j| j.seq);
    Ok(jobs)
}

/// Deletes a finished job; `false` when this delivery no longer holds it
/// (its lease ended and another worker claimed it).
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))] // PostgreSQL deletes in groups
pub(crate) async fn delete<DB: Dialect>(
    conn: &mut DB::Connection,
    seq: i64,
    claims: i64,
) -> Result<bool, sqlx::Error> {
    Ok(DB::execute(conn, DELETE.sql::<DB>(), args![seq, claims]).await? == 1)
}

/// Gives a job back unsettled: claimable again at once.
pub(crate) async fn release<DB: Dialect>(
    conn: &mut DB::Connection,
    seq: i64,
    claims: i64,
) -> Result<bool, sqlx::Error> {
    Ok(DB::execute(conn, RELEASE.sql::<DB>(), args![seq, claims]).await? == 1)
}

/// What [`reschedule`] writes: the retry copy's.
pub(crate) struct Retry<'a> {
    pub headers: &'a str,
    pub attempt: i64,
    pub due_ms: i64,
    pub error: Option<&'a str>,
}

/// Makes a job due again as its retry says (its headers, attempt, due
/// time and last error); its lease ends.
pub(crate) async fn reschedule<DB: Dialect>(
    conn: &mut DB::Connection,
    seq: i64,
    claims: i64,
    retry: &Retry<'_>,
) -> Result<bool, sqlx::Error> {
    let args = args![
        seq,
        claims,
        retry.headers,
        retry.attempt,
        retry.due_ms,
        retry.error
    ];
    Ok(DB::execute(conn, RESCHEDULE.sql::<DB>(), args).await? == 1)
}

/// Extends the leases of `held` (`(seq, claims)` pairs) by `lease_ms`
/// from now, where `holder` still holds them.
pub(crate) async fn renew<DB: Dialect>(
    conn: &mut DB::Connection,
    holder: &str,
    lease_ms: i64,
    held: &[(i64, i64)],
) -> Result<u64, sqlx::Error> {
    if held.is_empty() {
        return Ok(0);
    }
    // The pairs are integers the queue wrote itself: spliced, not bound,
    // so one statement renews any number on either database.
    let pairs: Vec<String> = held.iter().map(|(s, c)| format!("({s}, {c})")).collect();
    let sql = render::<DB>(&format!(
        "UPDATE consumer_jobs SET lease_until = {{later $1}} \
         WHERE lease_holder = $2 AND (seq, claims) IN (VALUES {})",
        pairs.join(", ")
    ));
    DB::execute(
        conn,
        AssertSqlSafe(sql).into_sql_str(),
        args![lease_ms, holder],
    )
    .await
}

/// Records that `queue`'s schedule `name` (its cron `pattern`) enqueued
/// the period starting at `period_ms`; `false` when that period or a
/// later one was enqueued already (by this instance or another).
pub(crate) async fn advance<DB: Dialect>(
    conn: &mut DB::Connection,
    queue: &str,
    name: &str,
    pattern: &str,
    period_ms: i64,
) -> Result<bool, sqlx::Error> {
    let args = args![queue, name, pattern, period_ms];
    Ok(DB::execute(conn, ADVANCE.sql::<DB>(), args).await? == 1)
}

/// Takes `unique_key` of `queue` for `window_ms`; `false` when a job took
/// it within its window already.
pub(crate) async fn take_unique<DB: Dialect>(
    conn: &mut DB::Connection,
    queue: &str,
    unique_key: &str,
    window_ms: i64,
) -> Result<bool, sqlx::Error> {
    let args = args![queue, unique_key, window_ms];
    Ok(DB::execute(conn, TAKE_UNIQUE.sql::<DB>(), args).await? == 1)
}

/// Deletes up to `batch` unique keys whose window has ended; how many.
pub(crate) async fn purge_uniques<DB: Dialect>(
    pool: &sqlx::Pool<DB>,
    batch: i64,
) -> Result<u64, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    DB::execute(&mut conn, PURGE_UNIQUES.sql::<DB>(), args![batch]).await
}

/// Jobs of `queue` not finished: waiting, running or waiting to retry.
pub(crate) async fn pending<DB: Dialect>(
    conn: &mut DB::Connection,
    queue: &str,
) -> Result<i64, sqlx::Error> {
    let row = DB::fetch_optional(conn, PENDING.sql::<DB>(), args![queue]).await?;
    let row = row.ok_or(sqlx::Error::RowNotFound)?;
    Columns::<DB>::of(&row).int()
}

/// Jobs of `queue` by state.
pub(crate) async fn backlog<DB: Dialect>(
    conn: &mut DB::Connection,
    queue: &str,
) -> Result<crate::Backlog, sqlx::Error> {
    let row = DB::fetch_optional(conn, COUNT.sql::<DB>(), args![queue]).await?;
    let row = row.ok_or(sqlx::Error::RowNotFound)?;
    let mut c = Columns::<DB>::of(&row);
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    let (all, running, waiting) = (count(c.int()?), count(c.int()?), count(c.int()?));
    let retrying = count(c.int()?);
    // By this process's clock (the database's on PostgreSQL decided what
    // is due): a skew between the two shifts the age by as much.
    let now = consumer_core::sql::ms_of(time::OffsetDateTime::now_utc());
    let oldest_ready = c.maybe_int()?.map_or(std::time::Duration::ZERO, |due| {
        std::time::Duration::from_millis(u64::try_from(now.saturating_sub(due)).unwrap_or(0))
    });
    Ok(crate::Backlog {
        ready: all.saturating_sub(running).saturating_sub(waiting),
        waiting,
        retrying,
        running,
        oldest_ready,
    })
}
