//! The drain: runs the parked messages of released keys, in order, one at
//! a time, under a lease.
//!
//! One task per consumer whose handlers hold keys. It takes a released key
//! of one of them (or one whose drainer's lease ran out: a consumer that
//! died mid-drain), hands its oldest parked message to the consumer as a
//! delivery, and waits until that delivery is settled before it reads the
//! next: a message dead-lettered on its turn holds the key again, and
//! nothing behind it may run. When none is left, it ends the hold, unless
//! a message was parked meanwhile.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::acker::{ParkedAcker, Settled};
use crate::envelope::{Envelope, Origin, Placement, Position};
use crate::runtime::observe::{Happened, Observer};
use crate::store::DedupStore;
use crate::store::held::{NextParked, Parked};

/// How long a drainer keeps a key without renewing its lease: the time a
/// dead drainer's key waits before another consumer takes it over.
pub(crate) const LEASE: Duration = Duration::from_secs(30);

/// How often a consumer looks for released keys when it found none.
pub(super) const POLL: Duration = Duration::from_secs(1);

/// How often the drain reads each handler's count of held keys for the
/// `consumer.held_keys` gauges.
pub(super) const COUNT_EVERY: Duration = Duration::from_secs(15);

/// What the drain hands the consumer: a delivery and its acker.
pub(super) type Drained<S> = (Arc<Envelope>, ParkedAcker<S>);

/// The drain of one consumer.
pub(super) struct Drain<S> {
    pub(super) store: S,
    /// The handlers that hold keys.
    pub(super) handlers: Vec<&'static str>,
    /// This consumer's name in the holds' `drainer` column.
    pub(super) drainer: String,
    pub(super) max_body: usize,
    pub(super) lease: Duration,
    pub(super) poll: Duration,
    pub(super) deliveries: mpsc::Sender<Drained<S>>,
    pub(super) observer: Observer,
}

/// How draining one key ended.
enum KeyEnded {
    /// Drained whole, held again, or taken over: look for another.
    Done,
    /// The consumer stopped taking deliveries.
    Stopped,
}

impl<S: DedupStore> Drain<S> {
    /// Drains released keys until the consumer stops taking deliveries.
    pub(super) async fn run(self) {
        let mut counted: Option<tokio::time::Instant> = None;
        loop {
            if counted.is_none_or(|at| at.elapsed() >= COUNT_EVERY) {
                self.count().await;
                counted = Some(tokio::time::Instant::now());
            }
            let mut found = false;
            for &handler in &self.handlers {
                match self
                    .store
                    .take_released(handler, &self.drainer, self.lease)
                    .await
                {
                    Ok(Some(key)) => {
                        found = true;
                        tracing::info!(target: "consumer::runtime", handler, key, "draining a released key");
                        if let KeyEnded::Stopped = self.drain_key(handler, &key).await {
                            return;
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(target: "consumer::runtime", handler, error = %e, "could not look for released keys; trying again");
                    }
                }
            }
            if !found {
                tokio::select! {
                    () = tokio::time::sleep(self.poll) => {}
                    () = self.deliveries.closed() => return,
                }
            }
        }
    }

    /// Reads each handler's count of held keys, for the gauges.
    async fn count(&self) {
        for &handler in &self.handlers {
            match self.store.held_count(handler).await {
                Ok(count) => self.observer.emit(Happened::HeldCounted { handler, count }),
                Err(e) => {
                    tracing::warn!(target: "consumer::runtime", handler, error = %e, "could not count the held keys for their gauges");
                }
            }
        }
    }

    async fn drain_key(&self, handler: &'static str, key: &str) -> KeyEnded {
        loop {
            let next = self
                .store
                .next_parked(handler, key, &self.drainer, self.lease)
                .await;
            match next {
                Ok(NextParked::Message(parked)) => {
                    match self.hand_over(handler, key, parked).await {
                        Some(Settled::Acked) => {}
                        Some(Settled::Released) => return KeyEnded::Done,
                        None => return KeyEnded::Stopped,
                    }
                }
                Ok(NextParked::Empty { next_seq }) => {
                    match self
                        .store
                        .finish_hold(handler, key, &self.drainer, next_seq)
                        .await
                    {
                        Ok(true) => {
                            self.observer.emit(Happened::KeyDrained { handler, key });
                            return KeyEnded::Done;
                        }
                        // Parked meanwhile: go on.
                        Ok(false) => {}
                        Err(e) => {
                            tracing::warn!(target: "consumer::runtime", handler, key, error = %e, "could not end a drained hold; trying again");
                            if self.pause().await {
                                return KeyEnded::Stopped;
                            }
                        }
                    }
                }
                Ok(NextParked::NotOurs) => return KeyEnded::Done,
                Err(e) => {
                    tracing::warn!(target: "consumer::runtime", handler, key, error = %e, "could not read a held key's next message; trying again");
                    if self.pause().await {
                        return KeyEnded::Stopped;
                    }
                }
            }
        }
    }

    /// Hands `parked` to the consumer and waits until it is settled,
    /// renewing the lease meanwhile; `None` when the consumer stopped.
    async fn hand_over(&self, handler: &'static str, key: &str, parked: Parked) -> Option<Settled> {
        let (tx, mut settled) = oneshot::channel();
        let acker = ParkedAcker {
            store: self.store.clone(),
            handler,
            key: key.to_owned(),
            message_id: parked.message_id.clone(),
            settled: Some(tx),
        };
        let envelope = Arc::new(self.envelope(key, parked));
        self.deliveries.send((envelope, acker)).await.ok()?;
        loop {
            tokio::select! {
                how = &mut settled => return Some(how.unwrap_or(Settled::Released)),
                () = tokio::time::sleep(self.lease / 3) => {
                    // Renewed by reading: the message is still parked.
                    if let Err(e) = self.store.next_parked(handler, key, &self.drainer, self.lease).await {
                        tracing::warn!(target: "consumer::runtime", handler, key, error = %e, "could not renew a drain's lease");
                    }
                }
                () = self.deliveries.closed() => return None,
            }
        }
    }

    /// The delivery of a parked message: its first attempt again, placed
    /// where only the drain places deliveries.
    fn envelope(&self, key: &str, parked: Parked) -> Envelope {
        let origin = Origin {
            channel: parked.destination.into(),
            position: Position::from(parked.position),
            placement: Placement::Held { seq: parked.seq },
        };
        let id = parked.message_id;
        let mut envelope = Envelope::from_parts_within(
            self.max_body,
            parked.payload,
            parked.headers,
            Some(key.to_owned()),
            origin,
            || id,
        );
        envelope.attempt = 1;
        envelope.first_failure = None;
        envelope
    }

    /// Waits a poll interval after a store failure; `true` when the
    /// consumer stopped meanwhile.
    async fn pause(&self) -> bool {
        tokio::select! {
            () = tokio::time::sleep(self.poll) => false,
            () = self.deliveries.closed() => true,
        }
    }
}
