//! The relay: claims unpublished events, publishes them with broker
//! confirmation, marks them published. At least once, per-aggregate order,
//! never two events of one aggregate in flight.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use opentelemetry::metrics::Meter;
use tokio::sync::Notify;

use super::relay_metrics::RelayMetrics;
use super::relay_stats::RelayStats;
use super::{Backlog, Outbox, OutboxDatabase, Row, RowOutcome};
use crate::envelope::{Headers, Message, format_time, names};
use crate::error::{BrokerErrorKind, Error};
use crate::publish::{Outgoing, Publisher};
use crate::retry::RetryPolicy;

/// How an idle relay notices new events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WakeUp {
    /// Poll: right away while batches come back full, then waiting twice
    /// as long after each empty round, from `min` up to `max`. A wake-up
    /// through [`OutboxRelay::waker`] (in-process writers, or a LISTEN task)
    /// cuts the wait short.
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
}

impl<DB: OutboxDatabase, P: Publisher> OutboxRelay<DB, P> {
    /// What the service's AsyncAPI document says of this relay: each
    /// event type its outbox declares, with its destination's channel.
    pub(crate) fn describe(&self, name: String) -> crate::asyncapi::PartDescription {
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
        crate::asyncapi::PartDescription::Relay {
            name,
            system: self.publisher.system(),
            events,
        }
    }

    /// A relay with the defaults: batches of 200, refused events retried 10
    /// times (backoff 200 ms to 60 s) before being marked failed, polling
    /// between 1 ms and 10 ms when idle, CloudEvents source `/outbox`.
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
        }
    }

    /// Rows claimed per round.
    pub fn with_batch_size(mut self, n: u32) -> Self {
        self.batch = n.max(1);
        self
    }

    /// Backoff and threshold for events the broker refuses: after
    /// `max_attempts` attempts the event is marked failed.
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
        let backlog = DB::backlog(&self.outbox, &self.pool).await?;
        self.metrics().set_backlog(backlog);
        Ok(backlog)
    }

    /// Live counters.
    pub fn stats(&self) -> Arc<RelayStats> {
        Arc::clone(&self.stats)
    }

    /// Runs one claim-publish-mark round; returns the rows claimed.
    pub async fn run_once(&self) -> Result<usize, Error> {
        let result = self.round().await;
        self.stats.rounds.fetch_add(1, Relaxed);
        match &result {
            Ok(n) => {
                self.stats.claimed.fetch_add(*n as u64, Relaxed);
            }
            Err(_) => {
                self.metrics().round_failed();
                self.stats.errors.fetch_add(1, Relaxed);
            }
        }
        result
    }

    async fn round(&self) -> Result<usize, Error> {
        let (guard, rows) = DB::claim(
            &self.outbox,
            &self.pool,
            &self.holder,
            i64::from(self.batch),
        )
        .await?;
        let n = rows.len();
        let outcomes = self.publish_in_order(rows).await;
        DB::finish(&self.outbox, &self.pool, guard, &outcomes).await?;
        Ok(n)
    }

    /// Relays until `shutdown` completes. Errors (a database or broker
    /// that is down) are logged and retried; nothing is marked published
    /// that the broker did not confirm.
    ///
    /// Shutdown is graceful: a round in progress is finished (its
    /// confirmed events marked published) before the relay returns, and no
    /// new round starts. What is left stays in the table for the next
    /// start. A relay that is killed instead loses nothing either: its
    /// round's transaction rolls back and the events are published again.
    pub async fn run_until<F: Future<Output = ()> + Send>(self, shutdown: F) -> Result<(), Error> {
        let WakeUp::Poll { min, max } = self.wake;
        let mut wait = min;
        let mut backlog_read: Option<Instant> = None;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                biased;
                () = &mut shutdown => return Ok(()),
                () = std::future::ready(()) => {}
            }
            if backlog_read.is_none_or(|at| at.elapsed() >= self.backlog_every) {
                if let Err(e) = self.read_backlog().await {
                    tracing::debug!(target: "consumer::outbox", error = %e, "could not count the outbox backlog");
                }
                backlog_read = Some(Instant::now());
            }
            match self.run_once().await {
                Ok(n) if n >= self.batch as usize => {
                    wait = min;
                    continue;
                }
                Ok(0) => wait = wait.saturating_mul(2).min(max),
                Ok(_) => wait = min,
                Err(e) => {
                    tracing::warn!(target: "consumer::outbox", error = %e, "relay round failed; trying again");
                    wait = max.max(Duration::from_millis(100));
                }
            }
            tokio::select! {
                biased;
                () = &mut shutdown => return Ok(()),
                () = self.waker.notified() => wait = min,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Publishes claimed rows in waves: each wave holds at most one event
    /// per aggregate (the next one in version order), so an aggregate never
    /// has two events in flight, and an event that is refused stops the
    /// events behind it while other aggregates keep flowing.
    async fn publish_in_order(&self, rows: Vec<Row>) -> Vec<(Row, RowOutcome)> {
        let mut queues: BTreeMap<(String, String), std::collections::VecDeque<Row>> =
            BTreeMap::new();
        for row in rows {
            queues
                .entry((row.aggregate_type.clone(), row.aggregate_id.clone()))
                .or_default()
                .push_back(row);
        }
        let mut done = Vec::new();
        loop {
            let mut wave = Vec::new();
            let mut stopped = Vec::new();
            for (agg, queue) in &mut queues {
                let Some(row) = queue.pop_front() else {
                    continue;
                };
                if row.held {
                    stopped.push(agg.clone());
                    done.push((row, RowOutcome::Skipped));
                } else {
                    wave.push(row);
                }
            }
            for agg in stopped {
                if let Some(rest) = queues.remove(&agg) {
                    done.extend(rest.into_iter().map(|r| (r, RowOutcome::Skipped)));
                }
            }
            if wave.is_empty() {
                break;
            }
            let batch: Vec<Outgoing> = wave.iter().map(|r| self.outgoing(r)).collect();
            let started = Instant::now();
            let results = self.publisher.publish(&batch).await;
            let took = started.elapsed();
            let now_ms = crate::store::now_ms();
            let mut results = results.into_iter();
            for row in wave {
                let result = results.next().unwrap_or_else(|| {
                    Err(Error::broker(
                        BrokerErrorKind::Unavailable,
                        "the publisher returned too few results",
                        None,
                    ))
                });
                let age = Duration::from_millis(
                    now_ms
                        .saturating_sub(row.created_at_ms)
                        .max(0)
                        .cast_unsigned(),
                );
                self.metrics().sent(
                    &row.destination,
                    took,
                    age,
                    result.as_ref().err().map(crate::metrics::error_type),
                );
                match result {
                    Ok(()) => {
                        self.stats.published.fetch_add(1, Relaxed);
                        done.push((row, RowOutcome::Published));
                    }
                    Err(e) => {
                        let attempt = u32::try_from(row.attempts).unwrap_or(0).saturating_add(1);
                        let give_up = !self.retry.should_retry(attempt);
                        let retry_after = self.retry.delay(attempt, &mut rand::rng());
                        let error = e.to_string();
                        if give_up {
                            self.metrics().failed(&row.destination);
                            self.stats.failed.fetch_add(1, Relaxed);
                            tracing::error!(
                                target: "consumer::outbox",
                                event_id = %row.id,
                                aggregate_type = %row.aggregate_type,
                                aggregate_id = %row.aggregate_id,
                                attempts = attempt,
                                error = %error,
                                "outbox event failed for good; its aggregate is blocked until Outbox::retry_failed"
                            );
                        } else {
                            self.stats.retried.fetch_add(1, Relaxed);
                            tracing::warn!(
                                target: "consumer::outbox",
                                event_id = %row.id,
                                attempts = attempt,
                                ?retry_after,
                                error = %error,
                                "broker refused an outbox event; retrying later"
                            );
                        }
                        let agg = (row.aggregate_type.clone(), row.aggregate_id.clone());
                        done.push((
                            row,
                            RowOutcome::Failed {
                                error,
                                retry_after,
                                give_up,
                            },
                        ));
                        if let Some(rest) = queues.remove(&agg) {
                            done.extend(rest.into_iter().map(|r| (r, RowOutcome::Skipped)));
                        }
                    }
                }
            }
        }
        done
    }

    /// The broker message of a row: CloudEvents binary mode, the aggregate
    /// id as partition key, and the trace context restored from the row.
    fn outgoing(&self, row: &Row) -> Outgoing {
        let mut headers = Headers::new();
        if let Some(extra) = &row.headers
            && let Ok(map) = serde_json::from_str::<BTreeMap<String, String>>(extra)
        {
            for (k, v) in map {
                headers.insert(k, v);
            }
        }
        headers.insert(names::ID, row.id.as_str());
        headers.insert(names::SOURCE, self.source.as_str());
        headers.insert(names::TYPE, row.event_type.as_str());
        headers.insert(names::SPEC_VERSION, "1.0");
        headers.insert(names::SUBJECT, row.aggregate_id.as_str());
        headers.insert(names::CONTENT_TYPE, "application/json");
        if let Ok(t) = time::OffsetDateTime::from_unix_timestamp_nanos(
            i128::from(row.created_at_ms) * 1_000_000,
        ) {
            headers.insert(names::TIME, format_time(t));
        }
        self.inject_trace(row, &mut headers);
        Outgoing {
            destination: row.destination.clone(),
            message: Message {
                key: Some(row.aggregate_id.clone()),
                headers,
                payload: bytes::Bytes::from(row.payload.clone().into_bytes()),
            },
        }
    }

    /// Restores the enqueuing transaction's context from the row (never the
    /// relay's own): the publisher's `send` span is its child (see
    /// [`trace::Sends`](crate::trace::Sends)), so the trace goes from the
    /// transaction through the relay to the consumers.
    fn inject_trace(&self, row: &Row, headers: &mut Headers) {
        let Some(meta) = &row.trace_metadata else {
            return;
        };
        let Ok(map) = serde_json::from_str::<BTreeMap<String, String>>(meta) else {
            tracing::debug!(target: "consumer::outbox", event_id = %row.id, "unreadable trace_metadata ignored");
            return;
        };
        let mut saved = Headers::new();
        for (k, v) in map {
            saved.insert(k, v);
        }
        if let Ok(Some(parent)) = crate::trace::extract(&saved) {
            crate::trace::inject(&parent, headers);
        }
    }
}
