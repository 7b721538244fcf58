//! Waiting for a cascade: relay what was written to the outbox, let the
//! consumers drain, and when nothing else moves, advance the virtual clock
//! to the next scheduled event (a saga's timeout is one), until nothing is
//! in flight.

use std::time::Duration;

use tokio::time::Instant;

use super::clock::TICK;
use super::{KitError, TestKit};

/// How far [`TestKit::settle`] moves the clock for a scheduled event.
const HORIZON: Duration = Duration::from_secs(365 * 24 * 3600);

/// Relay rounds per pass, bounding a relay that cannot empty its table.
const MAX_ROUNDS: usize = 10_000;

/// How far the clock moves at a time while outbox events wait for the
/// relay's retry backoff (whose due times the kit does not read).
const RELAY_STEP: Duration = Duration::from_millis(100);

impl TestKit {
    /// Waits until the whole cascade has settled: everything sent has an
    /// outcome, everything published through the outbox was relayed and
    /// consumed, and every scheduled event (a saga's timeout, however many
    /// minutes or days ahead, up to a year) fired on the virtual clock and
    /// settled in turn.
    ///
    /// Fails when a consumer stopped, when the store fails, or when it
    /// does not settle within the kit's wall-clock timeout; that error
    /// names what is still pending.
    pub async fn settle(&self) -> Result<(), KitError> {
        let horizon = Instant::now() + HORIZON;
        self.bounded("the cascade to settle".into(), self.run_to(horizon, false))
            .await
    }

    /// Moves the virtual clock `by` forward, firing each scheduled event
    /// as it falls due and settling what follows from it, then settles at
    /// the new time. Events due later stay scheduled.
    pub async fn advance(&self, by: Duration) -> Result<(), KitError> {
        let horizon = Instant::now() + by;
        self.bounded(
            format!("the cascade to settle over {by:?} of virtual time"),
            self.run_to(horizon, true),
        )
        .await
    }

    /// Settles, then fires the next scheduled event due before `horizon`,
    /// until there is none; with `reach`, ends with the clock at `horizon`.
    async fn run_to(&self, horizon: Instant, reach: bool) -> Result<(), KitError> {
        loop {
            self.quiesce().await?;
            let now = Instant::now();
            let mut next = self.next_due().await?;
            if self.unpublished().await? > 0 {
                // Events waiting for the relay's retry backoff: let it pass.
                next = Some(next.map_or(RELAY_STEP, |due| due.min(RELAY_STEP)));
            }
            match next {
                Some(due) if now + due <= horizon => tokio::time::advance(due.max(TICK)).await,
                _ if reach && now < horizon => tokio::time::advance(horizon - now).await,
                _ => return Ok(()),
            }
        }
    }

    /// Relays and drains until a relay pass after the drain has nothing to
    /// publish.
    async fn quiesce(&self) -> Result<(), KitError> {
        loop {
            let relayed = self.relay_all().await?;
            self.drain().await?;
            if relayed == 0 {
                return Ok(());
            }
        }
    }

    /// Runs every relay until a round publishes nothing; how many messages
    /// they published. A round counts what the broker took, not the rows it
    /// claimed: a row waiting for its retry backoff is claimed and skipped.
    async fn relay_all(&self) -> Result<usize, KitError> {
        let before = self.recording.count();
        for (_, relay) in &self.relays {
            for _ in 0..MAX_ROUNDS {
                let published = self.recording.count();
                let claimed = relay.run_once().await?;
                if claimed == 0 || self.recording.count() == published {
                    break;
                }
            }
        }
        Ok(self.recording.count() - before)
    }

    /// Waits until no topic a consumer of the kit reads holds a message
    /// not yet settled (ready, delayed for a retry, or being handled).
    async fn drain(&self) -> Result<(), KitError> {
        loop {
            for topic in &self.topics {
                tokio::select! {
                    () = self.broker.wait_drained(topic) => {}
                    (topic, error) = self.tracker.wait_for(|t| t.stopped().into_iter().next()) => {
                        return Err(KitError::ConsumerStopped { topic, error });
                    }
                }
            }
            if self.topics.iter().all(|t| self.broker.depth(t) == 0) {
                return Ok(());
            }
        }
    }

    /// Events in the kit's outboxes not yet published.
    async fn unpublished(&self) -> Result<i64, KitError> {
        let mut total = 0;
        for (outbox, _) in &self.relays {
            total += outbox.pending(&self.pool).await?;
        }
        Ok(total)
    }

    /// Releases what fell due; then when the next scheduled event falls due
    /// (zero: something was released, go again), or `None`.
    async fn next_due(&self) -> Result<Option<Duration>, KitError> {
        let mut next: Option<Duration> = None;
        let mut seen = Vec::new();
        for (outbox, _) in &self.relays {
            let released = outbox.release_due(&self.pool, 1_000).await?;
            if released.moved > 0 {
                return Ok(Some(Duration::ZERO));
            }
            if let Some(due) = released.next_due_in {
                seen.push(format!(
                    "outbox `{}`: a scheduled event due in {due:?} (virtual)",
                    outbox.table()
                ));
                next = Some(next.map_or(due, |n| n.min(due)));
            }
            let unpublished = outbox.pending(&self.pool).await?;
            if unpublished > 0 {
                seen.push(format!(
                    "outbox `{}`: {unpublished} event(s) not published (failed or blocked)",
                    outbox.table()
                ));
            }
        }
        *self
            .outbox_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = seen;
        Ok(next)
    }
}
