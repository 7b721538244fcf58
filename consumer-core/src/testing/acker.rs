//! [`FaultyAcker`]: any acker, with the armed faults.

use std::sync::Arc;

use super::Faults;
use super::source::Incarnation;
use crate::envelope::Message;
use crate::error::Error;
use crate::settle::RetryCopy;
use crate::source::Acker;

/// Wraps the acker of a [`FaultySource`](super::FaultySource).
pub struct FaultyAcker<A> {
    inner: Option<A>,
    faults: Faults,
    incarnation: Arc<Incarnation>,
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
    pub(super) fn new(
        inner: A,
        faults: Faults,
        incarnation: Arc<Incarnation>,
        forget_on_crash: bool,
    ) -> Self {
        Self {
            inner: Some(inner),
            faults,
            incarnation,
            forget_on_crash,
        }
    }

    fn inner(&mut self) -> Result<&mut A, Error> {
        self.inner
            .as_mut()
            .ok_or_else(|| Error::Config("the delivery was already settled".to_owned()))
    }

    fn take(&mut self) -> Result<A, Error> {
        let inner = self
            .inner
            .take()
            .ok_or_else(|| Error::Config("the delivery was already settled".to_owned()))?;
        self.incarnation.settled();
        Ok(inner)
    }
}

impl<A: Acker> Acker for FaultyAcker<A> {
    async fn ack(mut self) -> Result<(), Error> {
        if self.faults.take_lost_ack() {
            if let Some(inner) = self.inner.take() {
                // The process died after its commit: nothing reaches the
                // broker, no destructor runs.
                if self.forget_on_crash {
                    std::mem::forget(inner);
                } else {
                    drop(inner);
                }
                self.incarnation.crash();
            }
            return Ok(());
        }
        self.take()?.ack().await
    }

    async fn release(mut self) -> Result<(), Error> {
        self.take()?.release().await
    }

    async fn publish_dead_letter(&mut self, letter: &Message) -> Result<(), Error> {
        self.faults.dead_letter_fault()?;
        self.inner()?.publish_dead_letter(letter).await
    }

    async fn publish_retry(&mut self, copy: &RetryCopy) -> Result<(), Error> {
        self.faults.retry_fault()?;
        self.inner()?.publish_retry(copy).await
    }
}

impl<A> Drop for FaultyAcker<A> {
    fn drop(&mut self) {
        if self.inner.take().is_some() {
            self.incarnation.settled();
        }
    }
}
