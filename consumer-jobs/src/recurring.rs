//! Recurring jobs: [`Recurring`] (a cron pattern and the job each period
//! enqueues) and the [`Scheduler`] that enqueues them, exactly once per
//! period however many instances run it.

use std::str::FromStr;
use std::time::Duration;

use consumer_core::Message;
use consumer_core::error::Error;
use consumer_core::sql::{ms_of, time_from_ms};
use croner::Cron;
use sqlx::Pool;
use time::OffsetDateTime;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::job::Job;
use super::jobs::Jobs;
use super::{JobDatabase, statements};

/// The header a recurring job carries: its period's start, RFC 3339 (UTC).
pub const PERIOD_HEADER: &str = "x-consumer-period";

/// How long a scheduler whose tick failed (the database unreachable) waits
/// before it tries again, at most: the period stays due meanwhile.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// A job enqueued once per period of a cron pattern.
///
/// The pattern has five fields (minute, hour, day of month, month, day of
/// week) or six with seconds first, in UTC; `L`, `W` and `#` as in
/// [croner](https://docs.rs/croner). A period starts at each time the
/// pattern matches; its job is due then, carries its start in
/// [`PERIOD_HEADER`], and has the id `{queue}:{name}:{start in Unix ms}`,
/// so the store's dedup also knows one period's job from the next.
///
/// ```
/// use consumer_core::Message;
/// use consumer_jobs::Recurring;
///
/// # fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let report = Message::json("NightlyReport", &serde_json::json!({}))?;
/// let nightly = Recurring::new("nightly-report", "0 3 * * *", report)?; // 03:00 UTC
/// # let _ = nightly;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Recurring {
    name: String,
    cron: Cron,
    message: Message,
    priority: i32,
}

impl Recurring {
    /// Enqueues `message` once per period of `pattern`, under the
    /// schedule's `name` (unique in its queue: instances that register the
    /// same name share its periods). A pattern that does not parse, or an
    /// empty name, is a [`Error::Config`].
    pub fn new(name: impl Into<String>, pattern: &str, message: Message) -> Result<Self, Error> {
        let name = name.into();
        if name.is_empty() {
            return Err(Error::Config("a recurring job needs a name".into()));
        }
        let cron = Cron::from_str(pattern).map_err(|e| {
            Error::Config(format!(
                "recurring job {name:?}: cron pattern {pattern:?}: {e}"
            ))
        })?;
        Ok(Self {
            name,
            cron,
            message,
            priority: 0,
        })
    }

    /// The priority of each period's job (see [`Job::with_priority`]).
    #[must_use]
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// The schedule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The latest period that started at or before `now_ms` (Unix ms).
    fn latest(&self, now_ms: i64) -> Option<i64> {
        let now = chrono::DateTime::from_timestamp_millis(now_ms)?;
        let at = self.cron.find_previous_occurrence(&now, true).ok()?;
        Some(at.timestamp_millis())
    }

    /// The first period that starts after `now_ms` (Unix ms).
    fn next(&self, now_ms: i64) -> Option<i64> {
        let now = chrono::DateTime::from_timestamp_millis(now_ms)?;
        let at = self.cron.find_next_occurrence(&now, false).ok()?;
        Some(at.timestamp_millis())
    }
}

/// One period's job a [`Scheduler::tick_at`] enqueued.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fired {
    /// The schedule's name.
    pub name: String,
    /// The period's start.
    pub period: OffsetDateTime,
    /// The job's id.
    pub id: String,
}

/// Enqueues the recurring jobs of one queue: at the start of each period,
/// one job, whichever and however many instances run a scheduler with the
/// same schedules on the same database.
///
/// **One run per period.** Each schedule has one row in
/// `consumer_job_schedules`, the latest period enqueued. A tick moves it
/// forward with one upsert (`ON CONFLICT DO UPDATE … WHERE last_period <
/// new`) in the transaction that writes the period's job: the instance
/// whose upsert changed the row writes the job; the others, whose upserts
/// waited for its commit and then found the period taken, write nothing.
/// Nothing is read first and written after, so no race lets two in.
///
/// **Missed periods run once, for the latest.** A tick enqueues only the
/// latest period that has started; a period whose tick never came (every
/// instance down, the database unreachable past the next period) is not
/// enqueued later, and a period older than the last one enqueued never is.
/// An instance that starts (or reconnects) enqueues the latest period at
/// once if nobody had: a new schedule's first job is due at the start of
/// its current period.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use consumer_core::Message;
/// use consumer_jobs::{Jobs, Recurring};
///
/// let jobs = Jobs::new("reports");
/// let report = Message::json("NightlyReport", &serde_json::json!({}))?;
/// let scheduler = jobs
///     .scheduler(pool.clone())
///     .with(Recurring::new("nightly-report", "0 3 * * *", report)?)
///     .spawn(); // on every instance: each night, one report
/// // ... workers take the jobs from `jobs.source(pool)` ...
/// scheduler.stop().await;
/// # Ok(())
/// # }
/// ```
pub struct Scheduler<DB: JobDatabase> {
    pool: Pool<DB>,
    jobs: Jobs,
    schedules: Vec<Recurring>,
}

impl<DB: JobDatabase> std::fmt::Debug for Scheduler<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("queue", &self.jobs.queue())
            .field("schedules", &self.schedules)
            .finish_non_exhaustive()
    }
}

impl<DB: JobDatabase> Scheduler<DB> {
    pub(crate) fn new(pool: Pool<DB>, jobs: Jobs) -> Self {
        Self {
            pool,
            jobs,
            schedules: Vec::new(),
        }
    }

    /// Adds a schedule (a later one with the same name replaces it).
    #[must_use]
    pub fn with(mut self, recurring: Recurring) -> Self {
        self.schedules.retain(|s| s.name != recurring.name);
        self.schedules.push(recurring);
        self
    }

    /// Enqueues, for each schedule, the latest period started at or
    /// before `now` if no instance has yet; what it enqueued. The
    /// [spawned](Self::spawn) scheduler calls it at each period's start;
    /// call it yourself to run the schedules from a clock of your own.
    pub async fn tick_at(&self, now: OffsetDateTime) -> Result<Vec<Fired>, Error> {
        let now_ms = ms_of(now);
        let mut fired = Vec::new();
        for schedule in &self.schedules {
            let Some(period_ms) = schedule.latest(now_ms) else {
                continue; // the pattern matched no time yet
            };
            if let Some(f) = self.fire(schedule, period_ms).await? {
                fired.push(f);
            }
        }
        if !fired.is_empty() {
            self.jobs.notify(&self.pool).await?;
        }
        Ok(fired)
    }

    /// Writes `schedule`'s job for the period starting at `period_ms`, if
    /// this transaction is the one that moves the schedule to it.
    async fn fire(&self, schedule: &Recurring, period_ms: i64) -> Result<Option<Fired>, Error> {
        let queue = self.jobs.queue();
        let mut tx = self.pool.begin().await?;
        let pattern = schedule.cron.as_str();
        let won =
            statements::advance::<DB>(&mut tx, queue, &schedule.name, pattern, period_ms).await?;
        if !won {
            return Ok(None); // dropped: rolled back, nothing was written
        }
        let period = time_from_ms(period_ms);
        let start = period
            .format(&time::format_description::well_known::Rfc3339)
            .map_err(|e| Error::Config(format!("period {period_ms} ms: {e}")))?;
        let id = format!("{queue}:{}:{period_ms}", schedule.name);
        let message = schedule
            .message
            .clone()
            .with_id(id.clone())
            .with_header(PERIOD_HEADER, start);
        let job = Job::new(message)
            .with_due(period)
            .with_priority(schedule.priority);
        self.jobs.enqueue(&mut tx, job).await?;
        tx.commit().await?;
        tracing::debug!(
            target: "consumer::jobs",
            queue,
            schedule = %schedule.name,
            period = %id,
            "recurring job enqueued"
        );
        Ok(Some(Fired {
            name: schedule.name.clone(),
            period,
            id,
        }))
    }

    /// When the next period of any schedule starts after `now_ms`.
    fn next_after(&self, now_ms: i64) -> Option<i64> {
        self.schedules.iter().filter_map(|s| s.next(now_ms)).min()
    }

    /// Runs the schedules until [stopped](RunningScheduler::stop) (or
    /// dropped): a tick at once (the latest period, if nobody enqueued it),
    /// then one at each period's start, by this process's clock. A tick
    /// that fails is logged and tried again within a second.
    pub fn spawn(self) -> RunningScheduler {
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            loop {
                let now = OffsetDateTime::now_utc();
                let wait = match self.tick_at(now).await {
                    Ok(_) => {
                        let now_ms = ms_of(OffsetDateTime::now_utc());
                        match self.next_after(now_ms) {
                            // A timer wake-up may come a hair early: the
                            // tick then finds nothing new and waits again.
                            Some(next) => Duration::from_millis(
                                u64::try_from(next.saturating_sub(now_ms)).unwrap_or(0),
                            ),
                            None => break, // no schedule has a period left
                        }
                    }
                    Err(e) => {
                        tracing::warn!(
                            target: "consumer::jobs",
                            queue = self.jobs.queue(),
                            error = %e,
                            "enqueueing recurring jobs failed; trying again"
                        );
                        RETRY_AFTER_FAILURE
                    }
                };
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    _ = stopped.changed() => break,
                }
            }
        });
        RunningScheduler {
            stop,
            task: Some(task),
        }
    }
}

/// A [spawned](Scheduler::spawn) scheduler; dropping it aborts the task.
#[derive(Debug)]
pub struct RunningScheduler {
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl RunningScheduler {
    /// Stops the scheduler between ticks and waits for it: once this
    /// returns it writes nothing more (a tick under way finishes first).
    pub async fn stop(mut self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.take()
            && let Err(e) = task.await
        {
            tracing::warn!(target: "consumer::jobs", error = %e, "the scheduler's task failed");
        }
    }
}

impl Drop for RunningScheduler {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every(pattern: &str) -> Recurring {
        Recurring::new("r", pattern, Message::raw(&b"{}"[..])).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_latest_period_is_the_last_match_at_or_before_now() {
        let minutely = every("* * * * *");
        // 10:00:30 → 10:00:00; exactly 10:01:00 → itself.
        let t = 1_700_000_000_000 - 1_700_000_000_000 % 60_000;
        assert_eq!(minutely.latest(t + 30_000), Some(t));
        assert_eq!(minutely.latest(t + 60_000), Some(t + 60_000));
        assert_eq!(minutely.next(t), Some(t + 60_000));
        let secondly = every("* * * * * *");
        assert_eq!(secondly.latest(t + 1_500), Some(t + 1_000));
    }

    #[test]
    fn a_bad_pattern_or_name_is_a_config_error() {
        let m = || Message::raw(&b"{}"[..]);
        assert!(matches!(
            Recurring::new("r", "not cron", m()),
            Err(Error::Config(_))
        ));
        assert!(matches!(
            Recurring::new("", "* * * * *", m()),
            Err(Error::Config(_))
        ));
    }
}
