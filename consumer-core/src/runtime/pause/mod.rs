//! Operator pauses, the consumer's side: which of its handlers are paused
//! now, read from the store ([`PausedHandlers`]) before the first delivery
//! and then every poll interval by one background task.
//!
//! A paused handler's deliveries wait where a circuit's do (`attempt.rs`,
//! before each attempt): they keep their lane, their in-flight permit and
//! their attempt number, spend no attempt and run no probe, and go on
//! once the handler is resumed. When every handler of the consumer is
//! paused the take loop takes nothing (a router with some handlers paused
//! keeps taking, and holds at most `max_in_flight` deliveries waiting). A
//! store that cannot be read keeps the last set read (logged once at
//! WARN until it can be read again).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::observe::{Happened, Observer};
use crate::error::Error;
use crate::store::paused::{PausedHandlers, pause_of};

/// How often a consumer reads the paused handlers unless told otherwise
/// ([`Consumer::with_pause_poll`](super::Consumer::with_pause_poll)).
pub(super) const POLL: Duration = Duration::from_secs(1);

/// The paused handlers of one consumer.
pub(super) struct Pauses {
    /// Its handlers.
    handlers: Vec<&'static str>,
    /// Those paused now.
    paused: watch::Sender<BTreeSet<&'static str>>,
    /// Whether any is: what every attempt of a consumer that nobody
    /// paused reads, without a lock.
    any: AtomicBool,
}

impl Pauses {
    pub(super) fn new(handlers: Vec<&'static str>) -> Self {
        Self {
            handlers,
            paused: watch::channel(BTreeSet::new()).0,
            any: AtomicBool::new(false),
        }
    }

    /// Whether handler `name` is paused.
    pub(super) fn is_paused(&self, name: &str) -> bool {
        self.any.load(Ordering::Acquire) && self.paused.borrow().contains(name)
    }

    /// Completes once handler `name` is not paused.
    pub(super) async fn until_resumed(&self, name: &str) {
        let mut paused = self.paused.subscribe();
        let _ = paused.wait_for(|p| !p.contains(name)).await;
    }

    /// Whether every handler of the consumer is paused: it takes nothing.
    pub(super) fn all_paused(&self) -> bool {
        self.any.load(Ordering::Acquire) && self.paused.borrow().len() >= self.handlers.len()
    }

    /// Completes once some handler of the consumer is not paused.
    pub(super) async fn until_one_runs(&self) {
        let all = self.handlers.len();
        let mut paused = self.paused.subscribe();
        let _ = paused.wait_for(|p| p.len() < all).await;
    }

    /// Reads the store's pauses and applies them, telling `observer` of
    /// each change (on the `first` reading, of every handler's state).
    async fn read<S: PausedHandlers>(
        &self,
        store: &S,
        observer: &Observer,
        first: bool,
    ) -> Result<(), Error> {
        let pauses = store.paused_handlers().await?;
        let before = self.paused.borrow().clone();
        let mut now = BTreeSet::new();
        for &handler in &self.handlers {
            match pause_of(&pauses, handler) {
                Some(pause) => {
                    now.insert(handler);
                    if first || !before.contains(handler) {
                        observer.emit(Happened::Paused {
                            handler,
                            by: &pause.by,
                            reason: &pause.reason,
                        });
                    }
                }
                None if first || before.contains(handler) => {
                    observer.emit(Happened::Resumed {
                        handler,
                        was_paused: before.contains(handler),
                    });
                }
                None => {}
            }
        }
        self.any.store(!now.is_empty(), Ordering::Release);
        self.paused.send_if_modified(|p| {
            let changed = *p != now;
            *p = now;
            changed
        });
        Ok(())
    }
}

/// Reads the pauses once (a consumer started while its handler is paused
/// takes nothing for it), then starts the task that reads them every
/// `every`; abort the task when the consumer ends. Until a reading
/// succeeds, each is a first one (the observer hears every handler's
/// state); a store that cannot be read is told once, and again once it
/// can be.
pub(super) async fn watch<S: PausedHandlers>(
    store: S,
    pauses: Arc<Pauses>,
    observer: Observer,
    every: Duration,
) -> JoinHandle<()> {
    let first = pauses.read(&store, &observer, true).await;
    if let Err(error) = &first {
        observer.emit(Happened::PausesUnread { error });
    }
    let mut ever = first.is_ok();
    let mut failing = !ever;
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            match pauses.read(&store, &observer, !ever).await {
                Ok(()) => {
                    ever = true;
                    if failing {
                        failing = false;
                        observer.emit(Happened::PausesRead);
                    }
                }
                Err(error) if !failing => {
                    failing = true;
                    observer.emit(Happened::PausesUnread { error: &error });
                }
                Err(_) => {}
            }
        }
    })
}

#[cfg(test)]
mod tests;
