//! The dispatcher's in-flight permits: one per delivery held, taken in
//! batches once every one is taken, so that one wake-up hands several
//! deliveries over instead of one per settled delivery.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};

/// Permits a saturated dispatcher waits for before it takes deliveries
/// again: an eighth of the window, so that one wake-up hands several
/// deliveries over instead of one per settled delivery.
pub(super) fn refill_batch(max_in_flight: usize) -> u32 {
    u32::try_from((max_in_flight / 8).clamp(1, 64)).unwrap_or(1)
}

/// How long a saturated dispatcher waits for a whole batch of permits
/// before it takes what came free (deliveries held long, such as in-place
/// retries waiting, may keep a batch from ever coming free).
const REFILL_WAIT: Duration = Duration::from_millis(1);

/// The next delivery's permit: from `reserve`, else a free one, else (every
/// permit taken) a batch of `batch` once it came free, or what came free
/// within [`REFILL_WAIT`]; the rest of a batch goes to `reserve`.
///
/// Cancel-safe: dropped while waiting, it has taken nothing.
pub(super) async fn next_permit(
    permits: &Arc<Semaphore>,
    reserve: &mut Option<OwnedSemaphorePermit>,
    batch: u32,
) -> Result<OwnedSemaphorePermit, AcquireError> {
    if let Some(held) = reserve.take() {
        return Ok(one_of(held, reserve));
    }
    // Closed: the wait below says so.
    if let Ok(one) = Arc::clone(permits).try_acquire_owned() {
        return Ok(one);
    }
    let many = Arc::clone(permits).acquire_many_owned(batch);
    let taken = match tokio::time::timeout(REFILL_WAIT, many).await {
        Ok(taken) => taken?,
        Err(_) => {
            let mut taken = Arc::clone(permits).acquire_owned().await?;
            let free = u32::try_from(permits.available_permits()).unwrap_or(u32::MAX);
            if free > 0
                && let Ok(more) = Arc::clone(permits).try_acquire_many_owned(free)
            {
                taken.merge(more);
            }
            taken
        }
    };
    Ok(one_of(taken, reserve))
}

/// One permit of `held`; the others go to `reserve`.
fn one_of(
    mut held: OwnedSemaphorePermit,
    reserve: &mut Option<OwnedSemaphorePermit>,
) -> OwnedSemaphorePermit {
    if held.num_permits() > 1
        && let Some(one) = held.split(1)
    {
        *reserve = Some(held);
        return one;
    }
    held
}
