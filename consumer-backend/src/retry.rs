//! Retry policy: exponential backoff with full jitter and a maximum number of attempts.
//!
//! The delay before the attempt that follows failed attempt `n` is drawn
//! uniformly from `[0, min(max_delay, base × 2^n)]` ("full jitter"): the
//! ceiling grows exponentially so a struggling dependency gets room, and the
//! randomness spreads the retries of many consumers so they do not arrive
//! together. The policy is a pure function of the attempt number and a
//! random source; the attempt number itself travels with the message
//! (a header, or the store for in-place retries), never only in memory.

use std::time::Duration;

use rand::RngExt;

/// How a transient failure is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryMode {
    /// The key's lane waits for the delay and runs the handler again;
    /// other keys keep flowing and per-key order is kept.
    InPlace,
    /// The message goes back to the broker (delay queue, retry topic,
    /// delayed redelivery) and is acked; the lane moves on at once.
    /// Later messages of the same key may overtake it: per-key order is
    /// **not** kept for retried messages.
    Redeliver,
}

/// Exponential backoff with full jitter, capped, with a maximum attempt count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    base: Duration,
    max_delay: Duration,
    max_attempts: u32,
    mode: RetryMode,
}

impl RetryPolicy {
    /// The default: base 100 ms, max delay 30 s, 5 attempts in all, in place.
    pub const DEFAULT: Self =
        Self::exponential(Duration::from_millis(100), Duration::from_secs(30), 5);

    /// Exponential backoff. `max_attempts` counts every attempt, the first
    /// included: `max_attempts = 1` never retries. Zero is treated as one.
    pub const fn exponential(base: Duration, max_delay: Duration, max_attempts: u32) -> Self {
        Self {
            base,
            max_delay,
            max_attempts: if max_attempts == 0 { 1 } else { max_attempts },
            mode: RetryMode::InPlace,
        }
    }

    /// Never retry: the first transient failure dead-letters the message.
    pub const fn none() -> Self {
        Self::exponential(Duration::ZERO, Duration::ZERO, 1)
    }

    /// The same policy with another retry mode.
    pub const fn with_mode(mut self, mode: RetryMode) -> Self {
        self.mode = mode;
        self
    }

    /// Base delay.
    pub const fn base(&self) -> Duration {
        self.base
    }

    /// Cap on a single delay.
    pub const fn max_delay(&self) -> Duration {
        self.max_delay
    }

    /// Attempts in all, the first included.
    pub const fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// How retries happen.
    pub const fn mode(&self) -> RetryMode {
        self.mode
    }

    /// Whether a message whose attempt number `failed_attempt` just failed
    /// transiently gets another attempt.
    pub const fn should_retry(&self, failed_attempt: u32) -> bool {
        failed_attempt < self.max_attempts
    }

    /// The upper bound of the delay after failed attempt `n`:
    /// `min(max_delay, base × 2^n)`, computed without overflow.
    pub fn ceiling(&self, failed_attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(failed_attempt).unwrap_or(u32::MAX);
        self.base
            .checked_mul(factor)
            .map_or(self.max_delay, |d| d.min(self.max_delay))
    }

    /// The delay after failed attempt `n`, drawn from `[0, ceiling(n)]`.
    pub fn delay<R: rand::Rng + ?Sized>(&self, failed_attempt: u32, rng: &mut R) -> Duration {
        let ceiling = self.ceiling(failed_attempt);
        let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rng.random_range(0..=nanos))
    }

    /// The longest single delay this policy can draw: the ceiling after
    /// the last failed attempt that still gets a retry (zero when it never
    /// retries). A broker that holds retries for the source must be able
    /// to hold one this long.
    pub fn longest_delay(&self) -> Duration {
        if self.max_attempts <= 1 {
            Duration::ZERO
        } else {
            self.ceiling(self.max_attempts - 1)
        }
    }

    /// The longest time between a message's first failure and its last
    /// attempt: the sum of every ceiling. The dedup store must remember a
    /// key for longer than this, or a late redelivery would run again.
    pub fn max_window(&self) -> Duration {
        (1..self.max_attempts).fold(Duration::ZERO, |acc, n| acc.saturating_add(self.ceiling(n)))
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    const P: RetryPolicy =
        RetryPolicy::exponential(Duration::from_millis(100), Duration::from_secs(2), 6);

    #[test]
    fn ceiling_doubles_then_caps() {
        let c: Vec<_> = (1..=6).map(|n| P.ceiling(n).as_millis()).collect();
        assert_eq!(c, [200, 400, 800, 1600, 2000, 2000]);
        assert_eq!(P.ceiling(200), Duration::from_secs(2));
    }

    #[test]
    fn delays_stay_within_full_jitter_bounds_and_spread() {
        let mut rng = StdRng::seed_from_u64(7);
        for n in 1..=6 {
            let samples: Vec<_> = (0..500).map(|_| P.delay(n, &mut rng)).collect();
            assert!(samples.iter().all(|d| *d <= P.ceiling(n)));
            let min = samples.iter().min().copied().unwrap_or_default();
            let max = samples.iter().max().copied().unwrap_or_default();
            // Full jitter covers the whole range, not just the top of it.
            assert!(min < P.ceiling(n) / 10, "attempt {n}: min {min:?}");
            assert!(max > P.ceiling(n) * 9 / 10, "attempt {n}: max {max:?}");
        }
    }

    #[test]
    fn same_seed_same_delays() {
        let a: Vec<_> = (1..6)
            .map(|n| P.delay(n, &mut StdRng::seed_from_u64(1)))
            .collect();
        let b: Vec<_> = (1..6)
            .map(|n| P.delay(n, &mut StdRng::seed_from_u64(1)))
            .collect();
        assert_eq!(a, b);
    }

    #[test]
    fn attempts_count_the_first_one() {
        assert!(P.should_retry(5));
        assert!(!P.should_retry(6));
        assert!(!RetryPolicy::none().should_retry(1));
        assert_eq!(
            RetryPolicy::exponential(P.base(), P.max_delay(), 0).max_attempts(),
            1
        );
    }

    #[test]
    fn window_sums_the_ceilings() {
        assert_eq!(
            P.max_window(),
            Duration::from_millis(200 + 400 + 800 + 1600 + 2000)
        );
        assert_eq!(RetryPolicy::none().max_window(), Duration::ZERO);
    }
}
