//! Leases: the deliveries a source holds ([`Held`]), and the heartbeat
//! that renews their leases while they run ([`Heartbeat`]). A worker that
//! dies stops renewing; when its leases end, its jobs are claimed again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sqlx::Pool;
use tokio::task::JoinHandle;

use super::JobDatabase;
use super::statements;

/// Leases renewed per statement.
const RENEW_CHUNK: usize = 500;

/// The deliveries a source holds, `seq` to `claims`, shared with their
/// ackers: an acker forgets its delivery when it is settled or dropped,
/// so the heartbeat renews only what still runs.
#[derive(Debug, Clone, Default)]
pub(crate) struct Held(Arc<Mutex<HashMap<i64, i64>>>);

impl Held {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<i64, i64>> {
        // The map holds plain integers: a panic elsewhere cannot leave it
        // half-written.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn hold(&self, seq: i64, claims: i64) {
        self.map().insert(seq, claims);
    }

    /// Forgets the delivery `(seq, claims)`, not a later claim of the job.
    pub(crate) fn forget(&self, seq: i64, claims: i64) {
        let mut map = self.map();
        if map.get(&seq) == Some(&claims) {
            map.remove(&seq);
        }
    }

    fn snapshot(&self) -> Vec<(i64, i64)> {
        self.map().iter().map(|(s, c)| (*s, *c)).collect()
    }
}

/// Renews the leases of what a source holds every third of the lease;
/// stops when dropped (with its source).
#[derive(Debug)]
pub(crate) struct Heartbeat(JoinHandle<()>);

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Heartbeat {
    pub(crate) fn start<DB: JobDatabase>(
        pool: Pool<DB>,
        holder: Arc<str>,
        held: Held,
        lease: Duration,
    ) -> Self {
        let lease_ms = millis(lease);
        let every = (lease / 3).max(Duration::from_millis(10));
        Self(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Err(e) = renew(&pool, &holder, &held, lease_ms).await {
                    // The next beat tries again; a lease that ends meanwhile
                    // hands the job to another worker (at least once).
                    tracing::warn!(target: "consumer::jobs", error = %e, "renewing job leases failed");
                }
            }
        }))
    }
}

async fn renew<DB: JobDatabase>(
    pool: &Pool<DB>,
    holder: &str,
    held: &Held,
    lease_ms: i64,
) -> Result<(), sqlx::Error> {
    let pairs = held.snapshot();
    if pairs.is_empty() {
        return Ok(());
    }
    let mut conn = pool.acquire().await?;
    for chunk in pairs.chunks(RENEW_CHUNK) {
        statements::renew::<DB>(&mut conn, holder, lease_ms, chunk).await?;
    }
    Ok(())
}

/// A duration in whole milliseconds, saturating.
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgetting_a_delivery_leaves_a_later_claim_of_its_job() {
        let held = Held::default();
        held.hold(7, 2);
        held.forget(7, 1);
        assert_eq!(held.snapshot(), [(7, 2)]);
        held.forget(7, 2);
        assert!(held.snapshot().is_empty());
    }
}
