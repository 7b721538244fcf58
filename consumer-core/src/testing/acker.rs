//! [`FaultyAcker`]: any acker, with the armed faults.

use super::Faults;
use super::source::Hold;
use crate::envelope::Message;
use crate::source::Acker;
use consumer_backend::Error;
use consumer_backend::RetryCopy;

/// Wraps the acker of a [`FaultySource`](super::FaultySource).
pub struct FaultyAcker<A> {
    // Declared before `hold`: a dropped inner acker gives its delivery back
    // before the delivery stops counting as held.
    inner: Option<A>,
    faults: Faults,
    hold: Hold,
    /// A crash forgets the inner acker (the source is restarted); without
    /// a restart it is dropped, which releases the delivery.
    forget_on_crash: bool,
}

impl<A> std::fmt::Debug for FaultyAcker<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyAcker").finish_non_exhaustive()
    }
}

impl<A: Acker> FaultyAcker<A> {
    pub(super) fn new(inner: A, faults: Faults, hold: Hold, forget_on_crash: bool) -> Self {
        Self {
            inner: Some(inner),
            faults,
            hold,
            forget_on_crash,
        }
    }

    fn inner(&mut self) -> Result<&mut A, Error> {
        self.inner
            .as_mut()
            .ok_or_else(|| Error::Config("the delivery was already settled".to_owned()))
    }

    /// The inner acker, to settle; `self` (and its hold) is dropped only
    /// once the caller's settle has returned or been cancelled.
    fn take(&mut self) -> Result<A, Error> {
        self.inner
            .take()
            .ok_or_else(|| Error::Config("the delivery was already settled".to_owned()))
    }
}

impl<A: Acker> Acker for FaultyAcker<A> {
    async fn ack(mut self) -> Result<(), Error> {
        if self.faults.acks_stalled() {
            std::future::pending::<()>().await;
        }
        if self.faults.take_lost_ack() {
            if let Some(inner) = self.inner.take() {
                // The process died after its commit: nothing reaches the
                // broker, no destructor runs.
                if self.forget_on_crash {
                    std::mem::forget(inner);
                } else {
                    drop(inner);
                }
                self.hold.crash();
            }
            return Ok(());
        }
        self.take()?.ack().await
    }

    async fn release(mut self) -> Result<(), Error> {
        self.take()?.release().await
    }

    async fn publish_dead_letter(&mut self, letter: &Message) -> Result<(), Error> {
        if self.faults.dead_letters_stalled() {
            std::future::pending::<()>().await;
        }
        self.faults.dead_letter_fault()?;
        self.inner()?.publish_dead_letter(letter).await
    }

    async fn publish_retry(&mut self, copy: &RetryCopy) -> Result<(), Error> {
        self.faults.retry_fault()?;
        self.inner()?.publish_retry(copy).await
    }
}
