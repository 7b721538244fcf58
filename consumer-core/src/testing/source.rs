//! [`FaultySource`]: any source, with lost acks that crash and restart it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use super::{Faults, FaultyAcker};
use crate::envelope::Envelope;
use crate::error::Error;
use crate::source::Source;

/// Starts a fresh source after a simulated crash, as a restarted process
/// would (a new group member, a new connection).
pub type Restart<S> =
    Box<dyn FnMut() -> Pin<Box<dyn Future<Output = Result<S, Error>> + Send>> + Send>;

/// What the ackers of one incarnation of the inner source share with it.
#[derive(Debug, Default)]
pub(super) struct Incarnation {
    /// Ackers handed out and not settled yet (lost ones excluded).
    held: AtomicUsize,
    crashed: AtomicBool,
    changed: Notify,
}

impl Incarnation {
    pub(super) fn settled(&self) {
        self.held.fetch_sub(1, Ordering::SeqCst);
        // Only a crashed incarnation waits for its last delivery.
        if self.crashed.load(Ordering::SeqCst) {
            self.changed.notify_waiters();
        }
    }

    pub(super) fn crash(&self) {
        self.crashed.store(true, Ordering::SeqCst);
        self.settled();
    }
}

/// Wraps a [`Source`]; its ackers inject the armed [`Faults`].
///
/// After a lost ack, once every other delivery of the inner source has
/// settled, the inner source is closed and the [`Restart`] makes a new one
/// (without a restart, the crashed delivery is dropped unsettled instead,
/// which gives it back to the broker).
pub struct FaultySource<S> {
    inner: Option<S>,
    system: &'static str,
    faults: Faults,
    restart: Option<Restart<S>>,
    incarnation: Arc<Incarnation>,
}

impl<S> std::fmt::Debug for FaultySource<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultySource")
            .field("system", &self.system)
            .field("faults", &self.faults)
            .finish_non_exhaustive()
    }
}

impl<S: Source> FaultySource<S> {
    /// `inner` with the faults of `faults`.
    pub fn new(inner: S, faults: Faults) -> Self {
        Self {
            system: inner.system(),
            inner: Some(inner),
            faults,
            restart: None,
            incarnation: Arc::default(),
        }
    }

    /// How to start a fresh source after a crash.
    #[must_use]
    pub fn with_restart(mut self, restart: Restart<S>) -> Self {
        self.restart = Some(restart);
        self
    }

    /// The current inner source (`None` only during a restart).
    pub fn inner(&self) -> Option<&S> {
        self.inner.as_ref()
    }

    async fn restart(&mut self) -> Result<(), Error> {
        let Some(restart) = self.restart.as_mut() else {
            return Ok(());
        };
        if let Some(old) = self.inner.take() {
            old.close().await;
        }
        self.inner = Some(restart().await?);
        self.incarnation = Arc::default();
        Ok(())
    }
}

impl<S: Source> Source for FaultySource<S> {
    type Acker = FaultyAcker<S::Acker>;

    fn system(&self) -> &'static str {
        self.system
    }

    fn check_redelivery(&self, longest_delay: Duration) -> Result<(), String> {
        match &self.inner {
            Some(s) => s.check_redelivery(longest_delay),
            None => Ok(()),
        }
    }

    async fn recv(&mut self) -> Result<Option<(Envelope, Self::Acker)>, Error> {
        loop {
            let incarnation = Arc::clone(&self.incarnation);
            let changed = incarnation.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let crashed = incarnation.crashed.load(Ordering::SeqCst);
            if crashed && self.restart.is_some() && incarnation.held.load(Ordering::SeqCst) == 0 {
                self.restart().await?;
                continue;
            }
            let Some(inner) = self.inner.as_mut() else {
                return Ok(None);
            };
            let got = if self.restart.is_some() {
                // A crash (or, after one, the last settle) restarts.
                tokio::select! {
                    biased;
                    r = inner.recv() => r?,
                    () = &mut changed => continue,
                }
            } else {
                inner.recv().await?
            };
            return Ok(got.map(|(envelope, acker)| {
                self.incarnation.held.fetch_add(1, Ordering::SeqCst);
                let acker = FaultyAcker::new(
                    acker,
                    self.faults.clone(),
                    Arc::clone(&self.incarnation),
                    self.restart.is_some(),
                );
                (envelope, acker)
            }));
        }
    }

    async fn close(self) {
        if let Some(inner) = self.inner {
            inner.close().await;
        }
    }
}
