//! Queues RabbitMQ reports crashed (`NOT_FOUND - queue '…' has crashed and
//! failed to restart`, see [`Error::QueueCrashed`](crate::Error::QueueCrashed)):
//! a source says so once, in one ERROR line and the `consumer.queue.crashed`
//! gauge, goes on consuming what it can, and tries the queue again with
//! capped backoff, because only an operator brings it back (a node restart,
//! or deleting the queue so that the source declares it anew) and the
//! source should notice soon after, without hammering the broker meanwhile.

use std::sync::PoisonError;
use std::time::Duration;

use consumer_backend::RetryPolicy;
use tokio::time::Instant;

use super::stats::StatsInner;

/// Full jitter under 1 s, 2 s, 4 s, ... capped at 30 s.
const CRASH_RETRY: RetryPolicy =
    RetryPolicy::exponential(Duration::from_secs(1), Duration::from_secs(30), u32::MAX);

/// Never sooner than this after a failure, whatever the jitter drew: each
/// attempt costs the broker a channel and a refusal.
const MIN_RETRY: Duration = Duration::from_secs(1);

/// A queue found crashed: which one, and when to try it again.
#[derive(Debug)]
pub(super) struct Crashed {
    /// The queue RabbitMQ last reported crashed (a work queue, or one of
    /// the delay or dead-letter queues its topology declares).
    queue: Option<String>,
    failures: u32,
    retry_at: Instant,
}

impl Crashed {
    /// Found crashed by someone else's attempt (the start-up declare): try
    /// it at once, so that the first failure is this source's own.
    pub(super) fn try_now() -> Self {
        Self {
            queue: None,
            failures: 0,
            retry_at: Instant::now(),
        }
    }

    /// The queue last reported crashed.
    pub(super) fn queue(&self) -> Option<&str> {
        self.queue.as_deref()
    }

    /// When the next attempt is due.
    pub(super) fn retry_at(&self) -> Instant {
        self.retry_at
    }

    /// Whether the next attempt is due.
    pub(super) fn due(&self) -> bool {
        Instant::now() >= self.retry_at
    }

    /// Counts a failed attempt (`queue` reported crashed) and schedules the
    /// next; returns the wait.
    pub(super) fn failed(&mut self, queue: &str) -> Duration {
        self.queue = Some(queue.to_owned());
        self.failures = self.failures.saturating_add(1);
        let wait = retry_delay(self.failures);
        self.retry_at = Instant::now() + wait;
        wait
    }
}

/// The wait after the `failures`-th failure in a row.
fn retry_delay(failures: u32) -> Duration {
    CRASH_RETRY.delay(failures, &mut rand::rng()).max(MIN_RETRY)
}

impl StatsInner {
    /// `queue` is crashed: the gauge reads 1, and the first report (since
    /// the queue was last consumed) is logged at ERROR.
    pub(super) fn report_crashed(&self, queue: &str, reply: &str, retry_in: Duration) {
        let was = self
            .crashed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(queue.into(), true);
        if was == Some(true) {
            tracing::debug!(target: "consumer::amqp", queue, ?retry_in, "queue still crashed");
        } else {
            tracing::error!(
                target: "consumer::amqp",
                queue,
                reply,
                "RabbitMQ reports queue `{queue}` crashed: nothing can be consumed from it until an operator \
                 restarts its node or deletes it (its messages go with it); trying it again every 30 s at most"
            );
        }
    }

    /// `queue` is being consumed: the gauge reads 0 (an INFO line when it
    /// was crashed).
    pub(super) fn report_consuming(&self, queue: &str) {
        let was = self
            .crashed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(queue.into(), false);
        if was == Some(true) {
            tracing::info!(target: "consumer::amqp", queue, "queue consumed again after its crash");
        }
    }

    /// The queues of `work_queue`'s topology declare and consume again
    /// after `crashed`: says so, and drops the series of the queue it was
    /// found crashed on when that is not the work queue (which the caller
    /// reports consumed).
    pub(super) fn recovered(&self, crashed: &Crashed, work_queue: &str) {
        match crashed.queue() {
            Some(queue) if queue != work_queue => {
                self.report_consuming(queue);
                self.forget_queue(queue);
            }
            _ => self.report_consuming(work_queue),
        }
    }

    /// `queue` is no longer this source's to consume: no series.
    pub(super) fn forget_queue(&self, queue: &str) {
        self.crashed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(queue);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_between_one_and_thirty_seconds() {
        for failures in [1, 2, 5, 10, 100, u32::MAX] {
            for _ in 0..200 {
                let d = retry_delay(failures);
                assert!(d >= MIN_RETRY, "{d:?} after {failures} failures");
                assert!(
                    d <= Duration::from_secs(30),
                    "{d:?} after {failures} failures"
                );
            }
        }
        // Full jitter under a ceiling that doubles: later waits are longer
        // on average (200 draws each, far apart).
        let mean = |failures| {
            (0..200)
                .map(|_| retry_delay(failures).as_secs_f64())
                .sum::<f64>()
                / 200.0
        };
        assert!(mean(1) < mean(6), "the backoff grows");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_schedules_the_next_attempt_after_its_wait() {
        let mut c = Crashed::try_now();
        assert!(c.due(), "found at start-up: tried at once");
        let wait = c.failed("q");
        assert_eq!(c.queue(), Some("q"));
        assert!(!c.due());
        tokio::time::advance(wait).await;
        assert!(c.due());
        assert_eq!(c.retry_at(), Instant::now());
    }
}
