//! `outbox status | retry`: what waits in the outbox, and unblocking the
//! aggregates whose event failed for good.
//!
//! `status` counts as pending what should go out now: events committed and
//! not published, and scheduled events that have fallen due but that no
//! relay has taken yet. Scheduled events not yet due are listed apart,
//! with the next ones to fall due.
//!
//! An event the relay gave up on is marked failed and blocks its aggregate,
//! so the aggregate's later events wait behind it and keep their order.
//! `retry` makes the failed events eligible again and lifts the block (the
//! store's [`Outbox::retry_failed`]): the relay publishes the failed event
//! first, then the ones behind it, in order.

use std::io::Write;

use consumer_core::outbox::Outbox;
use sqlx::Postgres;
use time::OffsetDateTime;

use crate::args::Services;
use crate::database;
use crate::error::{Error, Result};
use crate::json::line;
use crate::render::{Table, age};

/// One failed event, blocking its aggregate.
#[derive(Debug, sqlx::FromRow, serde::Serialize)]
pub(crate) struct Failed {
    pub(crate) aggregate_type: String,
    pub(crate) aggregate_id: String,
    pub(crate) event_type: String,
    pub(crate) version: i64,
    pub(crate) attempts: i32,
    pub(crate) last_error: Option<String>,
    pub(crate) failed_ms: Option<i64>,
}

/// One scheduled event not yet taken by a relay.
#[derive(Debug, sqlx::FromRow, serde::Serialize)]
pub(crate) struct Scheduled {
    id: String,
    aggregate_type: String,
    aggregate_id: String,
    event_type: String,
    destination: String,
    due_ms: i64,
}

/// What `status` reports of the scheduled table.
#[derive(Debug, serde::Serialize)]
struct ScheduledSummary {
    /// Not yet due.
    count: i64,
    /// The next to fall due (overdue ones, waiting for a relay, first).
    next: Vec<Scheduled>,
}

pub(crate) fn outbox(table: &str) -> Result<Outbox> {
    Outbox::new()
        .with_table(table)
        .map_err(|e| Error::Usage(format!("--outbox-table {table:?}: {e}")))
}

/// What `status` read, at one moment.
pub(crate) struct Status {
    /// Events to go out now: committed and not published, and scheduled
    /// ones due.
    pub(crate) pending: i64,
    /// When the oldest of them was committed or fell due.
    pub(crate) oldest_ms: Option<i64>,
    /// Scheduled events not yet due.
    pub(crate) scheduled: i64,
    /// The next scheduled events to fall due.
    pub(crate) next: Vec<Scheduled>,
    pub(crate) failed: Vec<Failed>,
}

/// `status`.
pub async fn status(
    services: &Services,
    table: &str,
    json: bool,
    next: u32,
    out: &mut impl Write,
) -> Result<()> {
    let outbox = outbox(table)?;
    let pool = database::connect(services).await?;
    let status = read_status(&pool, outbox.table(), next).await?;
    let now_ms =
        i64::try_from(OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000).unwrap_or(0);
    let text = if json {
        status_json(status, now_ms)
    } else {
        status_text(&status, now_ms)
    };
    out.write_all(text.as_bytes())
        .map_err(Error::io("writing the output"))
}

/// Reads the outbox `table` and its scheduled table: what is pending,
/// what is scheduled (the `next` to fall due listed), what failed.
pub(crate) async fn read_status(pool: &sqlx::PgPool, table: &str, next: u32) -> Result<Status> {
    let (pending, oldest_ms): (i64, Option<i64>) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT count(*), (EXTRACT(EPOCH FROM min(coalesce(due_at, created_at))) * 1000)::bigint \
         FROM {table} WHERE published_at IS NULL"
    )))
    .fetch_one(pool)
    .await
    .map_err(|e| database::explain(e, table))?;
    let scheduled_table = format!("{table}_scheduled");
    let (scheduled, due, oldest_due_ms): (i64, i64, Option<i64>) =
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FILTER (WHERE due_at > now()), count(*) FILTER (WHERE due_at <= now()), \
             (EXTRACT(EPOCH FROM min(due_at) FILTER (WHERE due_at <= now())) * 1000)::bigint FROM {scheduled_table}"
        )))
        .fetch_one(pool)
        .await
        .map_err(|e| database::explain(e, &scheduled_table))?;
    let next: Vec<Scheduled> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT id::text AS id, aggregate_type, aggregate_id, event_type, destination, \
         (EXTRACT(EPOCH FROM due_at) * 1000)::bigint AS due_ms \
         FROM {scheduled_table} ORDER BY due_at, seq LIMIT $1"
    )))
    .bind(i64::from(next))
    .fetch_all(pool)
    .await?;
    let failed: Vec<Failed> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT aggregate_type, aggregate_id, event_type, version, attempts, last_error, \
         (EXTRACT(EPOCH FROM failed_at) * 1000)::bigint AS failed_ms \
         FROM {table} WHERE failed_at IS NOT NULL AND published_at IS NULL ORDER BY seq"
    )))
    .fetch_all(pool)
    .await?;
    Ok(Status {
        pending: pending + due,
        oldest_ms: oldest_ms.into_iter().chain(oldest_due_ms).min(),
        scheduled,
        next,
        failed,
    })
}

/// How many seconds ago `ms` was.
fn age_seconds(now_ms: i64, ms: i64) -> i64 {
    (now_ms - ms) / 1000
}

/// `status --json`: one line.
fn status_json(status: Status, now_ms: i64) -> String {
    let Status {
        pending,
        oldest_ms,
        scheduled,
        next,
        failed,
    } = status;
    format!(
        "{}\n",
        line(&serde_json::json!({
            "pending": pending,
            "oldest_age_seconds": oldest_ms.map(|ms| age_seconds(now_ms, ms)),
            "failed": failed,
            "scheduled": ScheduledSummary { count: scheduled, next },
        }))
    )
}

/// `status` for people: the counts, then the failed events and the next
/// scheduled ones as tables, when there are any.
fn status_text(status: &Status, now_ms: i64) -> String {
    let mut text = format!(
        "pending events: {}\noldest pending: {}\nfailed aggregates: {}\nscheduled events: {}\n",
        status.pending,
        status
            .oldest_ms
            .map_or_else(|| "-".to_owned(), |ms| age(age_seconds(now_ms, ms))),
        status.failed.len(),
        status.scheduled,
    );
    if !status.failed.is_empty() {
        text.push_str(&failed_table_text(&status.failed, now_ms));
    }
    if !status.next.is_empty() {
        text.push_str(&scheduled_table_text(&status.next, now_ms));
    }
    text
}

/// The failed events, one row each, with how long ago each failed.
fn failed_table_text(failed: &[Failed], now_ms: i64) -> String {
    let mut t = Table::new(&[
        "AGGREGATE",
        "EVENT",
        "VERSION",
        "ATTEMPTS",
        "FAILED",
        "ERROR",
    ]);
    for f in failed {
        t.row(vec![
            format!("{}/{}", f.aggregate_type, f.aggregate_id),
            f.event_type.clone(),
            f.version.to_string(),
            f.attempts.to_string(),
            f.failed_ms.map_or_else(
                || "-".to_owned(),
                |ms| format!("{} ago", age(age_seconds(now_ms, ms))),
            ),
            f.last_error.clone().unwrap_or_default(),
        ]);
    }
    t.render()
}

/// The next scheduled events, one row each, with when each falls due.
fn scheduled_table_text(next: &[Scheduled], now_ms: i64) -> String {
    let mut t = Table::new(&["SCHEDULED", "AGGREGATE", "EVENT", "DESTINATION", "DUE"]);
    for s in next {
        let seconds = (s.due_ms - now_ms) / 1000;
        t.row(vec![
            s.id.clone(),
            format!("{}/{}", s.aggregate_type, s.aggregate_id),
            s.event_type.clone(),
            s.destination.clone(),
            if s.due_ms <= now_ms {
                format!("{} ago (waiting for a relay)", age(-seconds))
            } else {
                format!("in {}", age(seconds))
            },
        ]);
    }
    t.render()
}

/// `retry AGGREGATE` or `retry --all`.
pub async fn retry(
    services: &Services,
    table: &str,
    aggregate: Option<&str>,
    all: bool,
    out: &mut impl Write,
) -> Result<()> {
    let outbox = outbox(table)?;
    let pool = database::connect(services).await?;
    let targets: Vec<(String, String)> = match (aggregate, all) {
        (Some(a), false) => {
            let Some((kind, id)) = a.split_once('/') else {
                return Err(Error::Usage(format!(
                    "aggregate {a:?} must be written aggregate_type/aggregate_id, as `outbox status` shows it"
                )));
            };
            vec![(kind.to_owned(), id.to_owned())]
        }
        (None, true) => sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT aggregate_type, aggregate_id FROM {}_aggregates WHERE blocked_at IS NOT NULL ORDER BY aggregate_type, aggregate_id",
            outbox.table()
        )))
        .fetch_all(&pool)
        .await
        .map_err(|e| database::explain(e, outbox.table()))?,
        _ => {
            return Err(Error::Usage(
                "name an aggregate (aggregate_type/aggregate_id) or pass --all".into(),
            ));
        }
    };
    let bar = crate::progress::bar(targets.len() as u64, "retrying", targets.len() < 100);
    let mut events = 0;
    for (kind, id) in &targets {
        let n = outbox
            .retry_failed::<Postgres>(&pool, kind, id)
            .await
            .map_err(|e| Error::Other(format!("retrying {kind}/{id}: {e}")))?;
        if n == 0 && aggregate.is_some() {
            return Err(Error::NoSuchAggregate(format!("{kind}/{id}")));
        }
        events += n;
        bar.inc(1);
    }
    bar.finish_and_clear();
    writeln!(
        out,
        "retrying {events} failed event(s) of {} aggregate(s); the relay publishes them, then what waited behind them, in order",
        targets.len()
    )
    .map_err(Error::io("writing the output"))
}
