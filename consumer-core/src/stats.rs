//! Golden-signal counters of one consumer, readable at any time without locks.
//!
//! Counters are plain atomics, and durations go into a log-bucketed
//! histogram (power-of-two microsecond buckets) that answers p50/p95/p99
//! within a factor of two, enough to alert on. Exporting to Prometheus or
//! OpenTelemetry is a loop over [`Stats::snapshot`].

use std::sync::atomic::{
    AtomicBool, AtomicU64, AtomicUsize,
    Ordering::{Acquire, Relaxed, Release},
};

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::Notify;

const BUCKETS: usize = 40;

/// Live counters; share it with `Arc`.
#[derive(Debug)]
pub struct Stats {
    received: AtomicU64,
    processed: AtomicU64,
    duplicates: AtomicU64,
    retries: AtomicU64,
    dead_poison: AtomicU64,
    dead_terminal: AtomicU64,
    dead_exhausted: AtomicU64,
    released: AtomicU64,
    settle_errors: AtomicU64,
    payload_omitted: AtomicU64,
    stored_dead_letters: AtomicU64,
    retry_fallbacks: AtomicU64,
    settle_failures: AtomicU64,
    unknown_types_ignored: AtomicU64,
    circuits_opened: AtomicU64,
    circuits_open: AtomicU64,
    keys_held: AtomicU64,
    keys_drained: AtomicU64,
    parked: AtomicU64,
    handlers_paused: AtomicU64,
    /// The handlers paused now, by name (for the readiness probe's body).
    paused: Mutex<BTreeSet<&'static str>>,
    /// The handlers whose circuit is open now, by name (the same).
    open: Mutex<BTreeSet<&'static str>>,
    in_flight: AtomicU64,
    durations: [AtomicU64; BUCKETS],
    draining: AtomicBool,
    running: AtomicBool,
    notify: Notify,
    waiters: AtomicUsize,
}

/// A point-in-time copy of [`Stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Deliveries taken from the source.
    pub received: u64,
    /// Committed by the handler.
    pub processed: u64,
    /// Skipped because their key was committed before.
    pub duplicates: u64,
    /// Retries scheduled (in place or through the broker).
    pub retries: u64,
    /// Dead-lettered as poison (undecodable, malformed, oversize).
    pub dead_poison: u64,
    /// Dead-lettered on a terminal error.
    pub dead_terminal: u64,
    /// Dead-lettered after the last attempt failed.
    pub dead_exhausted: u64,
    /// Given back to the broker unsettled (shutdown).
    pub released: u64,
    /// Settle operations (ack, dead letter, retry copy) that failed, each
    /// try counted.
    pub settle_errors: u64,
    /// Dead letters the dead-letter destination refused for their size:
    /// kept whole in the store's dead-letter table, and sent again without
    /// their payload.
    pub dead_letters_without_payload: u64,
    /// Dead letters written to the store's dead-letter table: refused by
    /// the broker for good, or for their size.
    pub dead_letters_stored: u64,
    /// Retry copies the broker refused, retried in place instead.
    pub retry_fallbacks: u64,
    /// Tries of a dead letter that nothing took (the broker refused it and
    /// the store could not take it): each one is logged at ERROR, and the
    /// delivery is held, its key's later messages behind it, until a try
    /// succeeds.
    pub settle_failures: u64,
    /// Deliveries a [`Router`](crate::Router) told to ignore unknown types
    /// acked because no handler takes their type.
    pub unknown_types_ignored: u64,
    /// Times a handler's circuit opened (again after a failed probe
    /// included): see [`CircuitPolicy`](crate::runtime::CircuitPolicy).
    pub circuits_opened: u64,
    /// Handlers whose circuit is open or half-open now: the consumer takes
    /// no new deliveries while one is open.
    pub circuits_open: u64,
    /// Keys held because one of their messages was dead-lettered (held
    /// again included): see [`OnDeadLetter::HoldKey`](crate::store::held::OnDeadLetter).
    pub keys_held: u64,
    /// Held keys whose parked messages all ran after an operator released
    /// them: the hold ended.
    pub keys_drained: u64,
    /// Deliveries parked behind a held key (acked on the broker, kept in
    /// the store until the key is released).
    pub parked: u64,
    /// Handlers of the consumer an operator has paused now (see
    /// [`PausedHandlers`](crate::store::paused::PausedHandlers)): their
    /// deliveries wait, spending no attempt.
    pub handlers_paused: u64,
    /// Deliveries held right now.
    pub in_flight: u64,
    /// The consumer passed its start-time checks and takes deliveries.
    pub running: bool,
    /// Shutdown has begun: no new deliveries are taken (report not-ready).
    pub draining: bool,
    /// Processing time percentiles (dequeue to settle).
    pub p50: Duration,
    /// 95th percentile.
    pub p95: Duration,
    /// 99th percentile.
    pub p99: Duration,
}

impl StatsSnapshot {
    /// All dead letters.
    pub fn dead_letters(&self) -> u64 {
        self.dead_poison + self.dead_terminal + self.dead_exhausted
    }
}

#[derive(Clone, Copy)]
pub(crate) enum Counter {
    Received,
    Processed,
    Duplicates,
    Retries,
    DeadPoison,
    DeadTerminal,
    DeadExhausted,
    Released,
    SettleErrors,
    PayloadOmitted,
    StoredDeadLetters,
    RetryFallbacks,
    SettleFailures,
    UnknownTypesIgnored,
    CircuitsOpened,
    KeysHeld,
    KeysDrained,
    Parked,
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            received: AtomicU64::new(0),
            processed: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            dead_poison: AtomicU64::new(0),
            dead_terminal: AtomicU64::new(0),
            dead_exhausted: AtomicU64::new(0),
            released: AtomicU64::new(0),
            settle_errors: AtomicU64::new(0),
            payload_omitted: AtomicU64::new(0),
            stored_dead_letters: AtomicU64::new(0),
            retry_fallbacks: AtomicU64::new(0),
            settle_failures: AtomicU64::new(0),
            unknown_types_ignored: AtomicU64::new(0),
            circuits_opened: AtomicU64::new(0),
            circuits_open: AtomicU64::new(0),
            keys_held: AtomicU64::new(0),
            keys_drained: AtomicU64::new(0),
            parked: AtomicU64::new(0),
            handlers_paused: AtomicU64::new(0),
            paused: Mutex::default(),
            open: Mutex::default(),
            in_flight: AtomicU64::new(0),
            durations: std::array::from_fn(|_| AtomicU64::new(0)),
            draining: AtomicBool::new(false),
            running: AtomicBool::new(false),
            notify: Notify::new(),
            waiters: AtomicUsize::new(0),
        }
    }
}

impl Stats {
    pub(crate) fn incr(&self, c: Counter) {
        let a = match c {
            Counter::Received => &self.received,
            Counter::Processed => &self.processed,
            Counter::Duplicates => &self.duplicates,
            Counter::Retries => &self.retries,
            Counter::DeadPoison => &self.dead_poison,
            Counter::DeadTerminal => &self.dead_terminal,
            Counter::DeadExhausted => &self.dead_exhausted,
            Counter::Released => &self.released,
            Counter::SettleErrors => &self.settle_errors,
            Counter::PayloadOmitted => &self.payload_omitted,
            Counter::StoredDeadLetters => &self.stored_dead_letters,
            Counter::RetryFallbacks => &self.retry_fallbacks,
            Counter::SettleFailures => &self.settle_failures,
            Counter::UnknownTypesIgnored => &self.unknown_types_ignored,
            Counter::CircuitsOpened => &self.circuits_opened,
            Counter::KeysHeld => &self.keys_held,
            Counter::KeysDrained => &self.keys_drained,
            Counter::Parked => &self.parked,
        };
        a.fetch_add(1, Relaxed);
        self.changed();
    }

    fn changed(&self) {
        // Only pay for a wake-up when someone waits (tests, health checks).
        if self.waiters.load(Relaxed) > 0 {
            self.notify.notify_waiters();
        }
    }

    /// `handler`'s circuit is open now (`true`) or closed.
    pub(crate) fn circuit_open(&self, handler: &'static str, open: bool) {
        let mut all = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if open {
            all.insert(handler);
        } else {
            all.remove(handler);
        }
        self.circuits_open
            .store(u64::try_from(all.len()).unwrap_or(u64::MAX), Relaxed);
        drop(all);
        self.changed();
    }

    /// The handlers whose circuit is open now, by name.
    pub fn open_circuits(&self) -> Vec<&'static str> {
        let all = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        all.iter().copied().collect()
    }

    /// `handler` is paused now (`true`) or not.
    pub(crate) fn set_paused(&self, handler: &'static str, paused: bool) {
        let mut all = self.paused.lock().unwrap_or_else(PoisonError::into_inner);
        if paused {
            all.insert(handler);
        } else {
            all.remove(handler);
        }
        self.handlers_paused
            .store(u64::try_from(all.len()).unwrap_or(u64::MAX), Relaxed);
        drop(all);
        self.changed();
    }

    /// The handlers an operator has paused now, by name.
    pub fn paused_handlers(&self) -> Vec<&'static str> {
        let all = self.paused.lock().unwrap_or_else(PoisonError::into_inner);
        all.iter().copied().collect()
    }

    pub(crate) fn set_running(&self) {
        self.running.store(true, Relaxed);
        self.changed();
    }

    /// Marks the drain begun. Release: whoever sees `draining` also sees
    /// what the runtime did before (the stop its lanes check).
    pub(crate) fn set_draining(&self) {
        self.draining.store(true, Release);
        self.changed();
    }

    /// Waits until `condition` holds for a snapshot; re-checked after
    /// every change of a counter.
    pub async fn wait_for(&self, condition: impl Fn(&StatsSnapshot) -> bool) -> StatsSnapshot {
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Relaxed);
            }
        }
        self.waiters.fetch_add(1, Relaxed);
        // Decrements even when the caller drops this future (a timeout).
        let _waiting = Waiting(&self.waiters);
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let snapshot = self.snapshot();
            if condition(&snapshot) {
                return snapshot;
            }
            notified.await;
        }
    }

    pub(crate) fn enter(&self) {
        self.in_flight.fetch_add(1, Relaxed);
        self.changed();
    }

    /// A delivery was settled (`Some(time since it was received)`) or
    /// released (`None`, which does not count as a processing time).
    pub(crate) fn leave(&self, took: Option<Duration>) {
        self.in_flight.fetch_sub(1, Relaxed);
        let Some(took) = took else {
            self.changed();
            return;
        };
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX).max(1);
        let bucket = (63 - micros.leading_zeros() as usize).min(BUCKETS - 1);
        self.durations[bucket].fetch_add(1, Relaxed);
        self.changed();
    }

    /// Reads every counter.
    pub fn snapshot(&self) -> StatsSnapshot {
        let counts: Vec<u64> = self.durations.iter().map(|b| b.load(Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        let pct = |p: u64| {
            if total == 0 {
                return Duration::ZERO;
            }
            let rank = (total * p).div_ceil(100);
            let mut seen = 0;
            for (i, c) in counts.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    // Upper edge of the bucket: a conservative figure.
                    return Duration::from_micros(1u64 << (i + 1).min(63));
                }
            }
            Duration::MAX
        };
        StatsSnapshot {
            received: self.received.load(Relaxed),
            processed: self.processed.load(Relaxed),
            duplicates: self.duplicates.load(Relaxed),
            retries: self.retries.load(Relaxed),
            dead_poison: self.dead_poison.load(Relaxed),
            dead_terminal: self.dead_terminal.load(Relaxed),
            dead_exhausted: self.dead_exhausted.load(Relaxed),
            released: self.released.load(Relaxed),
            settle_errors: self.settle_errors.load(Relaxed),
            dead_letters_without_payload: self.payload_omitted.load(Relaxed),
            dead_letters_stored: self.stored_dead_letters.load(Relaxed),
            retry_fallbacks: self.retry_fallbacks.load(Relaxed),
            settle_failures: self.settle_failures.load(Relaxed),
            unknown_types_ignored: self.unknown_types_ignored.load(Relaxed),
            circuits_opened: self.circuits_opened.load(Relaxed),
            circuits_open: self.circuits_open.load(Relaxed),
            keys_held: self.keys_held.load(Relaxed),
            keys_drained: self.keys_drained.load(Relaxed),
            parked: self.parked.load(Relaxed),
            handlers_paused: self.handlers_paused.load(Relaxed),
            in_flight: self.in_flight.load(Relaxed),
            draining: self.draining.load(Acquire),
            running: self.running.load(Relaxed),
            p50: pct(50),
            p95: pct(95),
            p99: pct(99),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_land_in_the_right_power_of_two() {
        let s = Stats::default();
        for _ in 0..90 {
            s.enter();
            s.leave(Some(Duration::from_micros(100)));
        }
        for _ in 0..10 {
            s.enter();
            s.leave(Some(Duration::from_millis(50)));
        }
        let snap = s.snapshot();
        assert_eq!(snap.p50, Duration::from_micros(128));
        assert_eq!(snap.p99, Duration::from_micros(65_536));
        assert_eq!(snap.in_flight, 0);
    }
}
