//! The kit's listener on the runtime's observer: it follows each message
//! from its first receipt to its outcome, from the events the runtime
//! emits anyway (no polling, no counters read).
//!
//! A delivery in the runtime is known by its envelope's address, which
//! the events borrow and which lives from `Received` to `Left`; a message
//! is known by where the broker first stored it (its topic, partition and
//! offset), which is what [`TestKit::send`](super::TestKit::send) returns.
//! A retry copy sent back through the broker is a new delivery of the same
//! id: its progress carries over. An in-place retry runs on a copy of the
//! envelope (a new address) while `Left` names the first one: the copy is
//! recognised by its id, on the first event after `Retried`, and aliased.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use super::delivery::{Delivery, Outcome};
use crate::dead_letter::DeadLetterKind;
use crate::envelope::{Envelope, Placement};
use crate::runtime::observe::Happened;
use crate::runtime::observe::tap::Tap;

/// Where the broker first stored a message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Place {
    pub(super) topic: String,
    pub(super) partition: i32,
    pub(super) offset: i64,
}

/// A delivery between its receipt and its outcome.
#[derive(Debug, Clone)]
struct Progress {
    first: Option<Place>,
    delivery: Delivery,
    dead: Option<(DeadLetterKind, String)>,
    duplicate: bool,
    ignored: bool,
    released: bool,
    copy_sent: bool,
    /// Retried in place: its next event comes with a new envelope.
    in_place: bool,
}

#[derive(Default)]
struct Tracked {
    /// In the runtime now, by envelope address.
    live: HashMap<usize, Progress>,
    /// An in-place retry's envelope address, to its delivery's first one.
    aliases: HashMap<usize, usize>,
    /// Retried through the broker, waiting for the copy, by message id.
    copies: HashMap<String, Progress>,
    /// Ended, by where they were first stored.
    ended: HashMap<Place, Delivery>,
    /// Ended, in the order they ended.
    history: Vec<Delivery>,
    /// Consumers that stopped on an error: topic and error.
    stopped: Vec<(String, String)>,
}

/// The tap: what it heard, and a wake-up for whoever waits on it.
#[derive(Default)]
pub(super) struct Tracker {
    tracked: Mutex<Tracked>,
    changed: Notify,
}

fn address(envelope: &Envelope) -> usize {
    std::ptr::from_ref(envelope) as usize
}

fn place_of(envelope: &Envelope) -> Option<Place> {
    match envelope.origin.placement {
        Placement::Log { partition, offset } => Some(Place {
            topic: envelope.origin.channel.as_str().to_owned(),
            partition,
            offset,
        }),
        _ => None,
    }
}

impl Tracker {
    fn lock(&self) -> MutexGuard<'_, Tracked> {
        self.tracked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The outcome of the message first stored at `place`, once it ended.
    pub(super) fn ended(&self, place: &Place) -> Option<Delivery> {
        self.lock().ended.get(place).cloned()
    }

    /// Every message that ended, in the order they ended.
    pub(super) fn history(&self) -> Vec<Delivery> {
        self.lock().history.clone()
    }

    /// The deliveries in the runtime now, described for a report.
    pub(super) fn in_flight(&self) -> Vec<String> {
        let t = self.lock();
        let mut out: Vec<String> = t.live.values().map(describe).collect();
        out.extend(
            t.copies
                .values()
                .map(|p| format!("{} (its retry copy)", describe(p))),
        );
        out.sort();
        out
    }

    /// The consumers that stopped on an error.
    pub(super) fn stopped(&self) -> Vec<(String, String)> {
        self.lock().stopped.clone()
    }

    /// Records that the consumer of `topic` stopped with `error`.
    pub(super) fn consumer_stopped(&self, topic: &str, error: String) {
        self.lock().stopped.push((topic.to_owned(), error));
        self.changed.notify_waiters();
    }

    /// Waits until `check` finds what it looks for.
    pub(super) async fn wait_for<T>(&self, check: impl Fn(&Self) -> Option<T>) -> T {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(found) = check(self) {
                return found;
            }
            notified.await;
        }
    }

    fn received(&self, envelope: &Envelope) {
        let mut t = self.lock();
        let progress = t.copies.remove(&envelope.id).unwrap_or_else(|| Progress {
            first: place_of(envelope),
            delivery: Delivery {
                message_id: envelope.id.clone(),
                topic: envelope.origin.channel.as_str().to_owned(),
                key: envelope.key.clone(),
                event_type: envelope.kind.clone(),
                handler: None,
                attempts: 0,
                retries: 0,
                last_error: None,
                outcome: Outcome::Processed,
            },
            dead: None,
            duplicate: false,
            ignored: false,
            released: false,
            copy_sent: false,
            in_place: false,
        });
        t.live.insert(
            address(envelope),
            Progress {
                copy_sent: false,
                ..progress
            },
        );
    }

    fn update(&self, envelope: &Envelope, change: impl FnOnce(&mut Progress)) {
        let mut t = self.lock();
        let Some(first) = t.resolve(envelope) else {
            return;
        };
        if let Some(p) = t.live.get_mut(&first) {
            change(p);
        }
    }

    /// A retry is under way. In place, the next attempt runs on a new
    /// envelope, and the one this attempt ran on is freed: its alias goes
    /// now, before the allocator can hand its address to another
    /// delivery's retry (whose events it would take).
    fn retried(&self, envelope: &Envelope, mode: &str) {
        let mut t = self.lock();
        let Some(first) = t.resolve(envelope) else {
            return;
        };
        if let Some(p) = t.live.get_mut(&first) {
            p.copy_sent = mode == "redeliver";
            p.in_place = mode == "in_place";
        }
        if mode == "in_place" {
            t.aliases.retain(|_, to| *to != first);
        }
    }

    fn left(&self, envelope: &Envelope) {
        let mut t = self.lock();
        let first = address(envelope);
        let Some(mut p) = t.live.remove(&first) else {
            return;
        };
        t.aliases.retain(|_, to| *to != first);
        if p.copy_sent {
            t.copies.insert(envelope.id.clone(), p);
            return;
        }
        p.delivery.outcome = if let Some((kind, reason)) = p.dead.take() {
            Outcome::DeadLettered { kind, reason }
        } else if p.duplicate {
            Outcome::Duplicate
        } else if p.ignored {
            Outcome::Ignored
        } else if p.released {
            Outcome::Released
        } else {
            Outcome::Processed
        };
        if let Some(first) = p.first {
            t.ended.insert(first, p.delivery.clone());
        }
        t.history.push(p.delivery);
        drop(t);
        self.changed.notify_waiters();
    }
}

impl Tracked {
    /// The address `envelope`'s delivery was received with: its own, an
    /// alias, or (the first event of an in-place retry) a delivery of the
    /// same id waiting for its retry, which it becomes an alias of.
    fn resolve(&mut self, envelope: &Envelope) -> Option<usize> {
        let at = address(envelope);
        if self.live.contains_key(&at) {
            return Some(at);
        }
        if let Some(first) = self.aliases.get(&at) {
            return Some(*first);
        }
        let (&first, p) = self
            .live
            .iter_mut()
            .find(|(_, p)| p.in_place && p.delivery.message_id == envelope.id)?;
        p.in_place = false;
        self.aliases.insert(at, first);
        Some(first)
    }
}

fn describe(p: &Progress) -> String {
    let d = &p.delivery;
    let mut out = format!("message `{}`", d.message_id);
    if let Some(t) = &d.event_type {
        out.push_str(&format!(" ({t})"));
    }
    out.push_str(&format!(" on `{}`", d.topic));
    if let Some(h) = &d.handler {
        out.push_str(&format!(", handler `{h}`"));
    }
    out.push_str(&format!(", {} attempt(s) ended", d.attempts));
    if let Some(e) = &d.last_error {
        out.push_str(&format!(", last error: {e}"));
    }
    out
}

impl Tap for Tracker {
    fn on(&self, what: &Happened<'_>) {
        match *what {
            Happened::Received(envelope) => self.received(envelope),
            Happened::Attempted {
                envelope, handler, ..
            } => self.update(envelope, |p| {
                p.delivery.attempts += 1;
                p.delivery.handler = Some(handler.to_owned());
            }),
            Happened::Retrying {
                envelope, error, ..
            } => {
                let error = error.to_string();
                self.update(envelope, |p| {
                    p.delivery.retries += 1;
                    p.delivery.last_error = Some(error);
                });
            }
            Happened::Retried { envelope, mode, .. } => self.retried(envelope, mode),
            Happened::RetryCopyRefused { envelope, .. } => {
                self.update(envelope, |p| p.copy_sent = false);
            }
            Happened::Duplicate { envelope, handler } => self.update(envelope, |p| {
                p.duplicate = true;
                p.delivery.handler = Some(handler.to_owned());
            }),
            Happened::Ignored(envelope) => self.update(envelope, |p| p.ignored = true),
            Happened::DeadLettering {
                envelope,
                handler,
                kind,
                error,
                ..
            } => self.update(envelope, |p| {
                p.dead = Some((kind, error.to_owned()));
                if !handler.is_empty() {
                    p.delivery.handler = Some(handler.to_owned());
                }
            }),
            Happened::Released(envelope) => self.update(envelope, |p| p.released = true),
            Happened::Left { envelope, .. } => self.left(envelope),
            _ => {}
        }
    }
}
