//! [`SqsAcker`]: settles one delivery of an [`SqsSource`](super::SqsSource).

use std::sync::Arc;
use std::time::{Duration, Instant};

use consumer_backend::{Acker, Message, RetryCopy};

use super::Shared;
use super::calls::Op;
use super::ledger::secs;
use consumer_backend::observe::{Happened, Release};

/// How long SQS keeps a message invisible at most, counted from its
/// receive.
pub const VISIBILITY_CAP: Duration = Duration::from_secs(12 * 3600);
/// What a retry's delay leaves of the cap for the request itself.
const CAP_MARGIN: Duration = Duration::from_secs(30);

/// Settles one delivery of an [`SqsSource`](super::SqsSource).
///
/// * `ack`: queues the delete (`DeleteMessageBatch`, ten a call, gathered
///   for at most 5 ms) and returns; a delete that fails for good is counted
///   and logged, and SQS redelivers the message, which dedup skips. After a
///   retry by visibility, nothing (the message stays for its next attempt).
/// * `release`: `ChangeMessageVisibility` to 0: SQS delivers it again now.
/// * `publish_retry`: `ChangeMessageVisibility` to the retry's delay, in
///   whole seconds rounded up and clamped to what is left of SQS's 12 h
///   from the receive; once SQS confirmed it, the runtime's ack deletes
///   nothing. On a FIFO queue the message's group waits behind it, and the
///   group's messages this source was holding are given back without
///   running. The next attempt's number comes from `ApproximateReceiveCount`.
/// * `publish_dead_letter`: `SendMessageBatch` of the letter to the
///   dead-letter queue (same group on a FIFO queue, deduplication id the
///   letter's SHA-256, so a retried send is not stored twice), confirmed
///   before the runtime acks. A letter over the dead-letter queue's
///   `MaximumMessageSize` is refused as too large before it is sent.
/// * Dropped unsettled: released (visibility 0) from a task; whatever
///   happens, SQS delivers it again when its visibility ends.
pub struct SqsAcker {
    pub(super) shared: Arc<Shared>,
    pub(super) token: u64,
    pub(super) receipt: String,
    pub(super) group_id: Option<String>,
    pub(super) key: Option<String>,
    pub(super) received: Instant,
    pub(super) settled: bool,
    pub(super) parked: bool,
}

impl std::fmt::Debug for SqsAcker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqsAcker")
            .field("queue", &self.shared.queues.queue.name())
            .field("settled", &self.settled)
            .field("parked", &self.parked)
            .finish_non_exhaustive()
    }
}

impl SqsAcker {
    fn leave(&mut self) {
        if !self.settled {
            self.settled = true;
            self.shared.leave(self.token);
        }
    }
}

impl Acker for SqsAcker {
    async fn ack(mut self) -> Result<(), consumer_backend::Error> {
        // Deletes are batched (ten a call) and their outcome counted in
        // `SqsStats`: the lane goes on at once. A delete that fails for
        // good leaves the message to come back when its visibility ends,
        // where dedup skips it, as after any lost ack.
        if !self.parked {
            self.shared.deletes.send(self.receipt.clone(), Op::Delete);
        }
        self.leave();
        Ok(())
    }

    async fn release(mut self) -> Result<(), consumer_backend::Error> {
        self.shared.count_release(self.token);
        let r = self
            .shared
            .releases
            .call(self.receipt.clone(), Op::Visibility(0))
            .await;
        self.leave();
        self.shared.observer.emit(Happened::Released {
            count: 1,
            why: Release::Asked,
        });
        r.map_err(Into::into)
    }

    async fn publish_dead_letter(
        &mut self,
        letter: &Message,
    ) -> Result<(), consumer_backend::Error> {
        let group = self.group_id.clone().or_else(|| self.key.clone());
        self.shared
            .send_letter(letter, group.as_deref())
            .await
            .map_err(Into::into)
    }

    async fn publish_retry(&mut self, copy: &RetryCopy) -> Result<(), consumer_backend::Error> {
        let left = VISIBILITY_CAP
            .saturating_sub(self.received.elapsed())
            .saturating_sub(CAP_MARGIN);
        if copy.delay > left {
            self.shared.observer.emit(Happened::RetryCutShort {
                delay: copy.delay,
                left,
            });
        }
        let seconds = secs(copy.delay.min(left));
        self.shared
            .releases
            .call(self.receipt.clone(), Op::Visibility(seconds))
            .await?;
        self.parked = true;
        self.shared.observer.emit(Happened::RetriedByBroker);
        self.settled = true;
        self.shared.park(self.token).await;
        Ok(())
    }
}

impl Drop for SqsAcker {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        self.shared.count_release(self.token);
        self.shared
            .releases
            .send(self.receipt.clone(), Op::Visibility(0));
        self.shared.observer.emit(Happened::Released {
            count: 1,
            why: Release::Dropped,
        });
        self.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_is_twelve_hours() {
        assert_eq!(VISIBILITY_CAP.as_secs(), 43_200);
    }
}
