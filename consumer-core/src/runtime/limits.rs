//! Per-handler limits: at most so many attempts of a handler at once, and
//! at most so many started in a period, to protect what is behind it (a
//! payment gateway's quota, a database's connections). A consumer's
//! `max_in_flight` bounds all of its deliveries; a limit bounds one
//! handler's attempts among them.
//!
//! A delivery that waits for its handler's turn waits in its lane, holding
//! its in-flight permit and its attempt unspent: the wait is bounded by
//! `max_in_flight` (nothing piles up in memory), and when every permit is
//! held by deliveries waiting for one limited handler, the consumer takes
//! nothing more until they ran. Shutdown releases waiting deliveries to the
//! broker.
//!
//! The rate is a generic cell rate (GCRA): each attempt reserves the next
//! slot, one per `period / attempts`, and `burst` slots may be taken ahead.
//! It runs on tokio's clock, so a test on paused time sees it exactly.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// How far one handler's attempts are limited, set with
/// [`Consumer::with_handler_limit`](super::Consumer::with_handler_limit):
/// at most so many at once, at most so many started per period (evenly
/// spaced, `burst` of them ahead after a quiet spell, on tokio's clock). A
/// delivery waiting for its handler's turn keeps its lane, its in-flight
/// permit and its attempt; shutdown releases it to the broker.
/// `HandlerLimit::default()` limits nothing.
///
/// ```
/// use std::time::Duration;
/// use consumer_core::runtime::HandlerLimit;
/// // At most 4 charges at once, and 50 a second with bursts of 10.
/// let limit = HandlerLimit::default()
///     .with_concurrency(4)
///     .with_rate(50, Duration::from_secs(1))
///     .with_burst(10);
/// # let _ = limit;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HandlerLimit {
    concurrency: Option<usize>,
    rate: Option<(u32, Duration)>,
    burst: u32,
}

impl HandlerLimit {
    /// At most `n` attempts of the handler at once (at least 1).
    #[must_use]
    pub fn with_concurrency(mut self, n: usize) -> Self {
        self.concurrency = Some(n.clamp(1, Semaphore::MAX_PERMITS));
        self
    }

    /// At most `attempts` attempts started per `period`, evenly spaced
    /// (at least 1 attempt; a zero period limits nothing).
    #[must_use]
    pub fn with_rate(mut self, attempts: u32, period: Duration) -> Self {
        self.rate = (!period.is_zero()).then_some((attempts.max(1), period));
        self
    }

    /// How many attempts may start at once after an idle spell, ahead of
    /// the rate's spacing (default 1: none ahead).
    #[must_use]
    pub fn with_burst(mut self, attempts: u32) -> Self {
        self.burst = attempts;
        self
    }

    /// Whether this limits anything.
    pub fn is_none(&self) -> bool {
        self.concurrency.is_none() && self.rate.is_none()
    }
}

/// When attempts may start: the theoretical arrival time of the next one,
/// each reservation moving it on by one interval.
#[derive(Debug)]
struct Pace {
    interval: Duration,
    /// How far ahead of its slot an attempt may start (the burst).
    tolerance: Duration,
    next: Option<Instant>,
}

impl Pace {
    fn new(attempts: u32, period: Duration, burst: u32) -> Self {
        let interval = period / attempts;
        Self {
            interval,
            tolerance: interval.saturating_mul(burst.max(1) - 1),
            next: None,
        }
    }

    /// Reserves the next slot: the instant the attempt may start (`now`
    /// or later).
    fn reserve(&mut self, now: Instant) -> Instant {
        let slot = self.next.map_or(now, |next| next.max(now));
        self.next = Some(slot + self.interval);
        slot.checked_sub(self.tolerance)
            .map_or(now, |at| at.max(now))
    }
}

/// One handler's limits as they run.
#[derive(Debug)]
struct Limiter {
    slots: Option<Arc<Semaphore>>,
    pace: Option<Mutex<Pace>>,
}

/// A turn to run an attempt: holds the handler's concurrency slot, if it
/// has a limit, until dropped.
#[derive(Debug)]
pub(super) struct Turn(#[allow(dead_code)] Option<OwnedSemaphorePermit>);

impl Limiter {
    fn new(limit: HandlerLimit) -> Self {
        Self {
            slots: limit.concurrency.map(|n| Arc::new(Semaphore::new(n))),
            pace: limit
                .rate
                .map(|(attempts, period)| Mutex::new(Pace::new(attempts, period, limit.burst))),
        }
    }

    async fn enter(&self) -> Turn {
        let slot = match &self.slots {
            // Never closed: an error cannot happen, and would only mean no
            // limit.
            Some(slots) => Arc::clone(slots).acquire_owned().await.ok(),
            None => None,
        };
        if let Some(pace) = &self.pace {
            let at = pace
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .reserve(Instant::now());
            tokio::time::sleep_until(at).await;
        }
        Turn(slot)
    }
}

/// Every limited handler's limiter, fixed when the consumer starts.
#[derive(Debug, Default)]
pub(super) struct Limits {
    by_handler: HashMap<&'static str, Limiter>,
}

impl Limits {
    pub(super) fn new(limits: &[(&'static str, HandlerLimit)]) -> Self {
        Self {
            by_handler: limits
                .iter()
                .filter(|(_, limit)| !limit.is_none())
                .map(|(name, limit)| (*name, Limiter::new(*limit)))
                .collect(),
        }
    }

    /// Whether no handler is limited (the runtime then waits for no turn).
    pub(super) fn is_empty(&self) -> bool {
        self.by_handler.is_empty()
    }

    /// Waits for handler `name`'s turn (at once for a handler without
    /// limits).
    pub(super) async fn enter(&self, name: &str) -> Turn {
        match self.by_handler.get(name) {
            Some(limiter) => limiter.enter().await,
            None => Turn(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn starts(pace: &mut Pace, now: Instant, n: usize) -> Vec<Duration> {
        (0..n).map(|_| pace.reserve(now) - now).collect()
    }

    #[test]
    fn attempts_are_spaced_by_the_rate() {
        let now = Instant::now();
        let mut pace = Pace::new(10, Duration::from_secs(1), 1);
        let ms = |v: &[u64]| {
            v.iter()
                .map(|m| Duration::from_millis(*m))
                .collect::<Vec<_>>()
        };
        assert_eq!(starts(&mut pace, now, 4), ms(&[0, 100, 200, 300]));
    }

    #[test]
    fn a_burst_starts_at_once_then_the_rate_holds() {
        let now = Instant::now();
        let mut pace = Pace::new(10, Duration::from_secs(1), 3);
        let ms = |v: &[u64]| {
            v.iter()
                .map(|m| Duration::from_millis(*m))
                .collect::<Vec<_>>()
        };
        assert_eq!(starts(&mut pace, now, 5), ms(&[0, 0, 0, 100, 200]));
    }

    #[test]
    fn an_idle_spell_does_not_bank_more_than_the_burst() {
        let now = Instant::now();
        let mut pace = Pace::new(10, Duration::from_secs(1), 2);
        let _ = starts(&mut pace, now, 2);
        let later = now + Duration::from_secs(60);
        let ms = |v: &[u64]| {
            v.iter()
                .map(|m| Duration::from_millis(*m))
                .collect::<Vec<_>>()
        };
        assert_eq!(starts(&mut pace, later, 3), ms(&[0, 0, 100]));
    }

    #[test]
    fn a_limit_without_concurrency_or_rate_limits_nothing() {
        assert!(HandlerLimit::default().is_none());
        assert!(HandlerLimit::default().with_burst(5).is_none());
        assert!(
            HandlerLimit::default()
                .with_rate(5, Duration::ZERO)
                .is_none()
        );
        assert!(!HandlerLimit::default().with_concurrency(0).is_none());
        let limits = Limits::new(&[("a", HandlerLimit::default())]);
        assert!(limits.is_empty());
    }
}
