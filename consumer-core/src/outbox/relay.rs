//! The relay: claims unpublished events, publishes them with broker
//! confirmation, marks them published. At least once, per-aggregate order,
//! never two events of one aggregate in flight.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use opentelemetry::metrics::Meter;
use tokio::sync::Notify;

use super::observe::{self, Happened, RelayMetrics, RelayStats, RoundThen, Waited};
use super::schedule_seen::{RELEASE_LOOK_EVERY, ScheduleSeen};
use super::waves::Waves;
use super::{Backlog, Outbox, OutboxDatabase, Row, RowOutcome, message};
use crate::error::{BrokerErrorKind, Error};
use crate::publish::Publisher;
use crate::retry::RetryPolicy;

/// The least time between two sends of an event the broker could not take
/// for now.
const UNAVAILABLE_BACKOFF: Duration = Duration::from_millis(100);

/// How an idle relay notices new events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WakeUp {
    /// Poll: right away while batches come back full, then waiting twice
    /// as long after each empty round, from `min` up to `max`. A wake-up
    /// through [`OutboxRelay::waker`] (in-process writers, or a LISTEN task)
    /// cuts the wait short, and so does the moment the earliest scheduled
    /// event falls due (as read at the last round): `max` caps how late a
    /// relay notices an event scheduled since, by another process, to fall
    /// due earlier.
    Poll {
        /// First wait after an empty round.
        min: Duration,
        /// Longest wait: the worst-case latency of an idle relay.
        max: Duration,
    },
}

/// Relays one outbox table to a [`Publisher`].
pub struct OutboxRelay<DB: sqlx::Database, P> {
    pool: sqlx::Pool<DB>,
    outbox: Outbox,
    publisher: P,
    batch: u32,
    retry: RetryPolicy,
    source: String,
    wake: WakeUp,
    waker: Arc<Notify>,
    stats: Arc<RelayStats>,
    holder: String,
    meter: Option<Meter>,
    metrics: OnceLock<RelayMetrics>,
    backlog_every: Duration,
    /// What the relay knows of the scheduled events.
    schedule: Mutex<ScheduleSeen>,
}

impl<DB: OutboxDatabase, P: Publisher> OutboxRelay<DB, P> {
    /// What the service's AsyncAPI document says of this relay: each
    /// event type its outbox declares, with its destination's channel.
    pub(crate) fn describe(&self, name: String) -> crate::describe::PartDescription {
        let events = self
            .outbox
            .declared_events()
            .iter()
            .map(|e| {
                let destination = e
                    .destination
                    .clone()
                    .or_else(|| self.outbox.default_destination().map(str::to_owned))
                    .unwrap_or_default();
                let channel = if destination.is_empty() {
                    None
                } else {
                    self.publisher.channel(&destination)
                };
                (e.clone(), destination, channel)
            })
            .collect();
        crate::describe::PartDescription::Relay {
            name,
            system: self.publisher.system(),
            events,
        }
    }

    /// A relay with the defaults: batches of 200, events the broker refuses
    /// for good (too large, no such destination, not authorised) retried 10
    /// times (backoff 200 ms to 60 s) before being marked failed, events it
    /// could not take for now (unavailable) retried with the same backoff
    /// until it takes them, polling between 1 ms and 10 ms when idle,
    /// CloudEvents source `/outbox`.
    pub fn new(pool: sqlx::Pool<DB>, outbox: Outbox, publisher: P) -> Self {
        Self {
            pool,
            outbox,
            publisher,
            batch: 200,
            retry: RetryPolicy::exponential(
                Duration::from_millis(200),
                Duration::from_secs(60),
                10,
            ),
            source: "/outbox".to_owned(),
            wake: WakeUp::Poll {
                min: Duration::from_millis(1),
                max: Duration::from_millis(10),
            },
            waker: Arc::new(Notify::new()),
            stats: Arc::default(),
            holder: uuid::Uuid::new_v4().to_string(),
            meter: None,
            metrics: OnceLock::new(),
            backlog_every: Duration::from_secs(15),
            schedule: Mutex::default(),
        }
    }

    /// Rows claimed per round.
    pub fn with_batch_size(mut self, n: u32) -> Self {
        self.batch = n.max(1);
        self
    }

    /// Backoff and threshold for events the broker refuses: after
    /// `max_attempts` attempts an event refused for good is marked failed
    /// (its aggregate blocked until [`Outbox::retry_failed`]). An event the
    /// broker could not take for now (unavailable, timed out) is never
    /// marked failed: it is sent again with this backoff, at least
    /// 100 ms apart, until the broker takes it.
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// The CloudEvents `source` attribute of published events.
    pub fn with_source(mut self, source: impl Into<String>) -> Self {
        self.source = source.into();
        self
    }

    /// How an idle relay waits for new events.
    pub fn with_wake_up(mut self, wake: WakeUp) -> Self {
        self.wake = wake;
        self
    }

    /// Notifying this wakes an idle relay at once: call it after committing
    /// an enqueue in the same process, or from a LISTEN task.
    pub fn waker(&self) -> Arc<Notify> {
        Arc::clone(&self.waker)
    }

    /// Where this relay's instruments come from (see
    /// [`metrics`](crate::metrics)); by default the global meter provider's,
    /// as installed when the relay first runs.
    pub fn with_meter(mut self, meter: Meter) -> Self {
        self.meter = Some(meter);
        self
    }

    /// How often [`run_until`](Self::run_until) counts what waits in the
    /// table for the gauges (`consumer.outbox.pending`,
    /// `consumer.outbox.oldest.age`, `consumer.outbox.blocked_aggregates`):
    /// two indexed counts, default every 15 s.
    pub fn with_backlog_interval(mut self, every: Duration) -> Self {
        self.backlog_every = every;
        self
    }

    fn metrics(&self) -> &RelayMetrics {
        self.metrics.get_or_init(|| {
            let meter = self
                .meter
                .clone()
                .unwrap_or_else(crate::metrics::global_meter);
            RelayMetrics::new(
                &meter,
                DB::SYSTEM,
                self.outbox.table(),
                self.publisher.system(),
            )
        })
    }

    /// Counts what waits in the table now and hands it to the gauges
    /// ([`run_until`](Self::run_until) does this every backlog interval).
    pub async fn read_backlog(&self) -> Result<Backlog, Error> {
        let backlog = super::statements::backlog(&self.outbox, &self.pool).await?;
        self.emit(&Happened::BacklogRead(backlog));
        Ok(backlog)
    }

    /// Live counters.
    pub fn stats(&self) -> Arc<RelayStats> {
        Arc::clone(&self.stats)
    }

    /// Runs one claim-publish-mark round; returns the rows claimed.
    pub async fn run_once(&self) -> Result<usize, Error> {
        self.schedule().looked = None;
        let result = match self.claim_and_publish().await {
            Ok(round) => self.finish(round).await,
            Err(e) => Err(e),
        };
        self.ended(&result, RoundThen::Told);
        result
    }

    /// Tells every listener `what` (see [`observe`]).
    fn emit(&self, what: &Happened<'_>) {
        observe::emit(self.metrics(), &self.stats, what);
    }

    /// Emits how a round ended, well or not.
    fn ended(&self, result: &Result<usize, Error>, then: RoundThen) {
        match result {
            Ok(n) => self.emit(&Happened::RoundEnded { claimed: *n }),
            Err(error) => self.emit(&Happened::RoundFailed { error, then }),
        }
    }

    /// Releases the scheduled events that fell due, then claims and
    /// publishes. What the broker confirmed is not marked yet: that is
    /// [`finish`](Self::finish), which a relay on PostgreSQL overlaps with
    /// the next round's claim.
    async fn claim_and_publish(&self) -> Result<Round<DB::ClaimGuard>, Error> {
        let released = if self.schedule().look_now(Instant::now()) {
            let released = DB::release_due(&self.outbox, &self.pool, i64::from(self.batch)).await;
            if let Ok(r) = &released {
                self.set_next_due(r.next_due_in);
            }
            released.map(|_| ())
        } else {
            Ok(())
        };
        let (guard, rows) = DB::claim(
            &self.outbox,
            &self.pool,
            &self.holder,
            i64::from(self.batch),
        )
        .await?;
        let claimed = rows.len();
        let outcomes = self.publish_in_order(rows).await;
        Ok(Round {
            guard,
            outcomes,
            claimed,
            released,
        })
    }

    /// Marks what happened to a round's rows and commits, which releases
    /// its claim. A release that failed does not stop the claim (the
    /// events already in the table go out), but fails the round.
    async fn finish(&self, round: Round<DB::ClaimGuard>) -> Result<usize, Error> {
        DB::finish(&self.outbox, &self.pool, round.guard, &round.outcomes).await?;
        round.released?;
        Ok(round.claimed)
    }

    fn schedule(&self) -> std::sync::MutexGuard<'_, ScheduleSeen> {
        self.schedule.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Remembers a look at the scheduled events, and when the next one
    /// falls due. Zero: some are due that the release could not take
    /// (another relay was releasing): look again before the next claim,
    /// and an idle relay in [`RELEASE_LOOK_EVERY`], not after its whole
    /// polling wait, which may be long.
    fn set_next_due(&self, due_in: Option<Duration>) {
        let now = Instant::now();
        let mut seen = self.schedule();
        if due_in.is_some_and(|d| d.is_zero()) {
            *seen = ScheduleSeen {
                looked: None,
                next_due: Some(now + RELEASE_LOOK_EVERY),
            };
            return;
        }
        *seen = ScheduleSeen {
            looked: Some(now),
            next_due: due_in.map(|d| now + d),
        };
    }

    /// How long an idle relay sleeps: the polling wait, cut short when the
    /// next scheduled event falls due sooner.
    fn idle_wait(&self, wait: Duration) -> Duration {
        let due = self.schedule().next_due;
        due.map_or(wait, |at| {
            at.saturating_duration_since(Instant::now()).min(wait)
        })
    }

    /// Relays until `shutdown` completes. Errors (a database or broker
    /// that is down) are logged and retried; nothing is marked published
    /// that the broker did not confirm.
    ///
    /// On PostgreSQL a round's marking and commit run while the next round
    /// claims and publishes, on a second connection of the pool (a relay
    /// uses two): the unfinished round keeps its rows row-locked and its
    /// aggregates advisory-locked until it commits, so the next claim skips
    /// them, exactly as another relay's claim would. SQLite rounds run one
    /// after the other.
    ///
    /// Shutdown is graceful: a round in progress is finished (its
    /// confirmed events marked published) before the relay returns, and no
    /// new round starts. What is left stays in the table for the next
    /// start. A relay that is killed instead loses nothing either: its
    /// rounds' transactions roll back and the events are published again.
    pub async fn run_until<F: Future<Output = ()> + Send>(self, shutdown: F) -> Result<(), Error> {
        let WakeUp::Poll { min, max } = self.wake;
        let mut wait = min;
        let mut backlog_read: Option<Instant> = None;
        // The previous round, marking and committing (at most one).
        let mut finishing: Option<Finishing<'_>> = None;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                () = std::future::ready(()) => {}
            }
            if backlog_read.is_none_or(|at| at.elapsed() >= self.backlog_every) {
                if let Err(e) = self.alongside(&mut finishing, self.read_backlog()).await {
                    self.emit(&Happened::BacklogNotRead { error: &e });
                }
                backlog_read = Some(Instant::now());
            }
            let overlapped = finishing.is_some();
            let claimed = self.round(&mut finishing).await;
            let failed = claimed.is_err();
            match claimed {
                Ok(n) if n >= self.batch as usize => {
                    wait = min;
                    continue;
                }
                // Nothing claimable while our previous round still held its
                // aggregates: claim again once it has committed.
                Ok(0) if overlapped => {
                    self.await_finishing(&mut finishing).await;
                    continue;
                }
                Ok(0) => wait = wait.saturating_mul(2).min(max),
                Ok(_) => wait = min,
                Err(e) => {
                    self.emit(&Happened::ClaimingAgain { error: &e });
                    wait = max.max(Duration::from_millis(100));
                }
            }
            // The unfinished round commits while the relay waits. After a
            // failure, the whole backoff: a due time already past (its
            // release failed too) must not turn the wait into a busy loop.
            let idle = if failed { wait } else { self.idle_wait(wait) };
            let woke = self
                .alongside(&mut finishing, async {
                    tokio::select! {
                        biased;
                        () = &mut shutdown => Woke::Shutdown,
                        () = self.waker.notified() => Woke::Waker,
                        () = tokio::time::sleep(idle) => Woke::Timeout,
                    }
                })
                .await;
            match woke {
                Woke::Shutdown => break,
                Woke::Waker => wait = min,
                Woke::Timeout => {}
            }
        }
        self.await_finishing(&mut finishing).await;
        Ok(())
    }

    /// One round: claims and publishes (while the previous round commits),
    /// then marks and commits, or leaves that to go on beside the next
    /// round where the database allows it. How many events it claimed.
    async fn round<'a>(&'a self, finishing: &mut Option<Finishing<'a>>) -> Result<usize, Error> {
        match self.alongside(finishing, self.claim_and_publish()).await {
            Ok(round) => {
                let claimed = round.claimed;
                // One round finishing at a time; its commit has usually
                // ended while this one claimed and published.
                self.await_finishing(finishing).await;
                if DB::OVERLAPPING_ROUNDS && claimed > 0 {
                    *finishing = Some(Box::pin(self.finish(round)));
                    Ok(claimed)
                } else {
                    let result = self.finish(round).await;
                    self.ended(&result, RoundThen::Told);
                    result
                }
            }
            Err(e) => {
                self.emit(&Happened::RoundFailed {
                    error: &e,
                    then: RoundThen::Told,
                });
                Err(e)
            }
        }
    }

    /// Runs `work` while the unfinished round (if any) goes on marking and
    /// committing; counts that round when it ends.
    async fn alongside<T>(
        &self,
        finishing: &mut Option<Finishing<'_>>,
        work: impl Future<Output = T>,
    ) -> T {
        tokio::pin!(work);
        loop {
            let Some(round) = finishing.as_mut() else {
                return work.await;
            };
            let first = tokio::select! {
                result = round => First::Finished(result),
                out = &mut work => First::Work(out),
            };
            match first {
                First::Finished(result) => {
                    *finishing = None;
                    self.finished(&result);
                }
                First::Work(out) => return out,
            }
        }
    }

    /// Waits for the unfinished round (if any) to commit.
    async fn await_finishing(&self, finishing: &mut Option<Finishing<'_>>) {
        if let Some(round) = finishing.take() {
            let result = round.await;
            self.finished(&result);
        }
    }

    fn finished(&self, result: &Result<usize, Error>) {
        self.ended(result, RoundThen::PublishAgain);
    }

    /// Publishes claimed rows in waves (see [`Waves`]): an aggregate never
    /// has two events in flight, and an event that does not go out stops
    /// the events behind it while other aggregates keep flowing.
    async fn publish_in_order(&self, rows: Vec<Row>) -> Vec<(Row, RowOutcome)> {
        let mut waves = Waves::new(rows);
        let mut done = Vec::new();
        while let Some(wave) = waves.next(&mut done) {
            for (row, outcome) in self.publish_wave(wave).await {
                if !matches!(outcome, RowOutcome::Published) {
                    waves.stop(&row, &mut done);
                }
                done.push((row, outcome));
            }
        }
        done
    }

    /// Publishes one wave (one event per aggregate) as one batch, and says
    /// what happened to each row. A row that cannot become a message fails
    /// without being sent.
    async fn publish_wave(&self, wave: Vec<Row>) -> Vec<(Row, RowOutcome)> {
        let mut outcomes = Vec::with_capacity(wave.len());
        let mut sent = Vec::with_capacity(wave.len());
        let mut batch = Vec::with_capacity(wave.len());
        for mut row in wave {
            match message::outgoing(&mut row, &self.source) {
                Ok(out) => {
                    batch.push(out);
                    sent.push(row);
                }
                Err(unreadable) => {
                    let outcome = self.refused(&row, &unreadable.to_string(), true, false);
                    outcomes.push((row, outcome));
                }
            }
        }
        if batch.is_empty() {
            return outcomes;
        }
        let started = Instant::now();
        let results = self.publisher.publish(&batch).await;
        let took = started.elapsed();
        let now_ms = crate::store::now_ms();
        let mut results = results.into_iter();
        for row in sent {
            let result = results.next().unwrap_or_else(|| {
                Err(consumer_backend::Error::broker(
                    BrokerErrorKind::Unavailable,
                    "the publisher returned too few results",
                    None,
                ))
            });
            let error = result
                .as_ref()
                .err()
                .map(consumer_backend::Error::error_type);
            self.emit(&Happened::Sent {
                destination: &row.destination,
                took,
                waited: waited(&row, now_ms),
                error,
            });
            let outcome = match result {
                Ok(()) => RowOutcome::Published,
                Err(e) => {
                    // A broker that is unavailable heals: the event waits
                    // for it however long it takes (its aggregate's later
                    // events behind it), and is never marked failed for
                    // it. Only a refusal that does not heal counts
                    // towards giving up.
                    let attempt = u32::try_from(row.attempts).unwrap_or(0).saturating_add(1);
                    let give_up = !e.is_retriable() && !self.retry.should_retry(attempt);
                    self.refused(&row, &e.to_string(), give_up, e.is_retriable())
                }
            };
            outcomes.push((row, outcome));
        }
        outcomes
    }

    /// The outcome of a row that did not go out: retried after the policy's
    /// delay, or, when `give_up`, marked failed (its aggregate blocked until
    /// [`Outbox::retry_failed`]), logged with the event id either way.
    fn refused(&self, row: &Row, error: &str, give_up: bool, heals: bool) -> RowOutcome {
        let attempt = u32::try_from(row.attempts).unwrap_or(0).saturating_add(1);
        let mut retry_after = self.retry.delay(attempt, &mut rand::rng());
        if heals {
            // However short the policy's delays (`RetryPolicy::none()` has
            // none), a broker that is down is not asked again at once.
            retry_after = retry_after.max(UNAVAILABLE_BACKOFF);
        }
        if give_up {
            self.emit(&Happened::GaveUp {
                row,
                attempt,
                error,
            });
        } else {
            self.emit(&Happened::Retrying {
                row,
                attempt,
                retry_after,
                error,
            });
        }
        RowOutcome::Failed {
            error: error.to_owned(),
            retry_after,
            give_up,
        }
    }
}

/// A round whose events went out (or did not), its outcomes not yet
/// written.
struct Round<G> {
    guard: G,
    outcomes: Vec<(Row, RowOutcome)>,
    claimed: usize,
    released: Result<(), Error>,
}

/// A round marking and committing while the relay goes on.
type Finishing<'a> = Pin<Box<dyn Future<Output = Result<usize, Error>> + Send + 'a>>;

enum First<R, W> {
    Finished(R),
    Work(W),
}

enum Woke {
    Shutdown,
    Waker,
    Timeout,
}

/// How long a row waited for the broker's confirmation at `now_ms`: since
/// its commit, or since it fell due for a scheduled event.
fn waited(row: &Row, now_ms: i64) -> Waited {
    let since = |at: i64| Duration::from_millis(now_ms.saturating_sub(at).max(0).cast_unsigned());
    match row.due_at_ms {
        Some(due) => Waited::SinceDue(since(due)),
        None => Waited::SinceCommit(since(row.created_at_ms)),
    }
}
