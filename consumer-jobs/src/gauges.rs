//! What a [`JobSource`](super::JobSource) reports at each metrics
//! collection: its queue's jobs that are ready, waiting to retry
//! (`Delay`), scheduled for later (`Scheduled`) and running (`InFlight`),
//! and how long the oldest ready one has waited, as it last counted them
//! ([`Backlog`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use std::time::Duration;

use consumer_core::backend::{QueueRole, SourceGauges, SourceReadings};
use sqlx::Pool;
use tokio::task::JoinHandle;

use super::{JobDatabase, statements};

/// A queue's jobs not finished, by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Backlog {
    /// Due and held by no worker: waiting for a worker.
    pub ready: u64,
    /// Not due yet: scheduled, or waiting to retry.
    pub waiting: u64,
    /// Of the `waiting`, those waiting to retry (a failed attempt behind
    /// them); the others are scheduled.
    pub retrying: u64,
    /// Held by a worker whose lease has not ended.
    pub running: u64,
    /// How long the oldest ready job has waited since it fell due
    /// (`Duration::ZERO` when none is ready).
    pub oldest_ready: Duration,
}

/// The last count, shared by the source (which writes it) and its gauges
/// (which the collector reads without touching the database).
#[derive(Debug, Default)]
pub(crate) struct LastCount {
    ready: AtomicU64,
    waiting: AtomicU64,
    retrying: AtomicU64,
    running: AtomicU64,
    oldest_ready_ms: AtomicU64,
    counted: AtomicBool,
}

impl LastCount {
    pub(crate) fn record(&self, b: Backlog) {
        self.ready.store(b.ready, Ordering::Relaxed);
        self.waiting.store(b.waiting, Ordering::Relaxed);
        self.retrying.store(b.retrying, Ordering::Relaxed);
        self.running.store(b.running, Ordering::Relaxed);
        let ms = u64::try_from(b.oldest_ready.as_millis()).unwrap_or(u64::MAX);
        self.oldest_ready_ms.store(ms, Ordering::Relaxed);
        self.counted.store(true, Ordering::Release);
    }
}

/// The gauges of one source's queue: `Work` (ready), `Delay` (waiting to
/// retry), `Scheduled` (not due yet, never tried) and `InFlight`
/// (running), and the oldest ready job's age.
pub(crate) struct JobGauges {
    pub(crate) queue: Arc<str>,
    pub(crate) last: Arc<LastCount>,
}

impl SourceGauges for JobGauges {
    fn observe(&self, readings: &mut SourceReadings) {
        if !self.last.counted.load(Ordering::Acquire) {
            return; // nothing counted yet: no reading rather than zeros
        }
        let l = &self.last;
        let retrying = l.retrying.load(Ordering::Relaxed);
        let scheduled = l.waiting.load(Ordering::Relaxed).saturating_sub(retrying);
        for (role, n) in [
            (QueueRole::Work, l.ready.load(Ordering::Relaxed)),
            (QueueRole::Delay, retrying),
            (QueueRole::Scheduled, scheduled),
            (QueueRole::InFlight, l.running.load(Ordering::Relaxed)),
        ] {
            readings.queue(Arc::clone(&self.queue), role, n);
        }
        let oldest = Duration::from_millis(l.oldest_ready_ms.load(Ordering::Relaxed));
        readings.queue_oldest(Arc::clone(&self.queue), oldest);
    }
}

/// Counts `queue`'s jobs into `last` every `every`, until aborted (with
/// its source).
pub(crate) fn count_every<DB: JobDatabase>(
    pool: Pool<DB>,
    queue: Arc<str>,
    last: Arc<LastCount>,
    every: Duration,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let counted = match pool.acquire().await {
                Ok(mut conn) => statements::backlog::<DB>(&mut conn, &queue).await,
                Err(e) => Err(e),
            };
            match counted {
                Ok(backlog) => last.record(backlog),
                Err(e) => {
                    tracing::debug!(target: "consumer::jobs", error = %e, "counting jobs failed");
                }
            }
        }
    })
}
