//! [`Faults`]: what the wrappers do wrong next.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use consumer_backend::{BrokerErrorKind, Error};

/// What goes wrong next; cheap to clone, clones share the same faults.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    duplicate_publishes: AtomicU32,
    lost_acks: AtomicU32,
    stalled_acks: std::sync::atomic::AtomicBool,
    stalled_dead_letters: std::sync::atomic::AtomicBool,
    failed_publishes: AtomicU32,
    refused_publishes: Mutex<Option<(u32, BrokerErrorKind)>>,
    refused_dead_letters: Mutex<Option<BrokerErrorKind>>,
    refused_retries: Mutex<Option<BrokerErrorKind>>,
}

fn take(counter: &AtomicU32) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

impl Faults {
    /// No faults armed.
    pub fn new() -> Self {
        Self::default()
    }

    /// The next `n` messages a [`FaultyPublisher`](super::FaultyPublisher)
    /// sends are sent twice.
    pub fn duplicate_next_publishes(&self, n: u32) {
        self.inner
            .duplicate_publishes
            .fetch_add(n, Ordering::SeqCst);
    }

    /// The next `n` acks are lost in a crash (see the module docs).
    pub fn lose_next_acks(&self, n: u32) {
        self.inner.lost_acks.fetch_add(n, Ordering::SeqCst);
    }

    /// Every ack from now on hangs for ever, after the handler's commit:
    /// a process to SIGKILL between a commit and its ack (the crash tests
    /// of real processes wait for the commit in the database, then kill).
    pub fn stall_acks(&self) {
        self.inner.stalled_acks.store(true, Ordering::SeqCst);
    }

    pub(super) fn acks_stalled(&self) -> bool {
        self.inner.stalled_acks.load(Ordering::SeqCst)
    }

    /// Every dead letter from now on is sent and never confirmed: a broker
    /// that took the publish and never answers (a lost confirm).
    pub fn stall_dead_letters(&self) {
        self.inner
            .stalled_dead_letters
            .store(true, Ordering::SeqCst);
    }

    pub(super) fn dead_letters_stalled(&self) -> bool {
        self.inner.stalled_dead_letters.load(Ordering::SeqCst)
    }

    /// The next `n` dead-letter, retry-copy or publisher sends fail with an
    /// error that can heal ([`BrokerErrorKind::Unavailable`]).
    pub fn fail_next_publishes(&self, n: u32) {
        self.inner.failed_publishes.fetch_add(n, Ordering::SeqCst);
    }

    /// The next `n` sends of a [`FaultyPublisher`](super::FaultyPublisher)
    /// are refused for good with `kind` (a refusal that does not heal:
    /// `Rejected`, `TooLarge`, `NoDestination`, ...), after any failures of
    /// [`Faults::fail_next_publishes`].
    pub fn refuse_next_publishes(&self, n: u32, kind: BrokerErrorKind) {
        *self
            .inner
            .refused_publishes
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((n, kind));
    }

    /// Every dead letter is refused for good with `kind` (`None` clears).
    pub fn refuse_dead_letters(&self, kind: Option<BrokerErrorKind>) {
        *self
            .inner
            .refused_dead_letters
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = kind;
    }

    /// Every retry copy is refused for good with `kind` (`None` clears).
    pub fn refuse_retries(&self, kind: Option<BrokerErrorKind>) {
        *self
            .inner
            .refused_retries
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = kind;
    }

    pub(super) fn take_duplicate(&self) -> bool {
        take(&self.inner.duplicate_publishes)
    }

    pub(super) fn take_lost_ack(&self) -> bool {
        take(&self.inner.lost_acks)
    }

    /// The injected failure of the next send, if one is armed.
    pub(super) fn publish_fault(&self) -> Result<(), Error> {
        if take(&self.inner.failed_publishes) {
            return Err(Error::broker(
                BrokerErrorKind::Unavailable,
                "injected publish failure",
                None,
            ));
        }
        Ok(())
    }

    /// [`Faults::publish_fault`], then a refusal of
    /// [`Faults::refuse_next_publishes`]: what a publisher's send meets.
    pub(super) fn send_fault(&self) -> Result<(), Error> {
        self.publish_fault()?;
        let mut slot = self
            .inner
            .refused_publishes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match *slot {
            Some((n, kind)) if n > 0 => {
                *slot = (n > 1).then_some((n - 1, kind));
                Err(Error::broker(kind, "injected refusal", None))
            }
            _ => Ok(()),
        }
    }

    pub(super) fn dead_letter_fault(&self) -> Result<(), Error> {
        self.publish_fault()?;
        refused(&self.inner.refused_dead_letters, "dead letter")
    }

    pub(super) fn retry_fault(&self) -> Result<(), Error> {
        self.publish_fault()?;
        refused(&self.inner.refused_retries, "retry copy")
    }
}

fn refused(slot: &Mutex<Option<BrokerErrorKind>>, what: &str) -> Result<(), Error> {
    match *slot.lock().unwrap_or_else(PoisonError::into_inner) {
        Some(kind) => Err(Error::broker(
            kind,
            format!("injected refusal of the {what}"),
            None,
        )),
        None => Ok(()),
    }
}
