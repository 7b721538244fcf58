//! The lease loop of a [`KinesisSource`](super::KinesisSource): which
//! shards this instance reads, and their checkpoints.
//!
//! Every `lease_duration / 3` it lists the shards, renews the leases it
//! holds (a lease it could not renew, or stored as lost, stops its
//! reader), and takes its fair share ([`balance`]) of the leases of the
//! shards that may be read now ([`shards::readable`]: children only once
//! every parent is finished). Every checkpoint interval it writes each
//! held shard's safe checkpoint; once a closed shard is read and settled
//! to its end it writes [`Checkpoint::ShardEnd`] and gives the lease up,
//! which lets the children be taken. On shutdown it stops the readers,
//! writes the last checkpoints and releases every lease at once, so
//! another instance need not wait for them to expire.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::reader::{self, Reading};
use super::session::Session;
use crate::client::IteratorStart;
use crate::error::Error;
use crate::lease::{Checkpoint, Lease, LeaseStore, balance};
use crate::shards::{self, ShardInfo};
use consumer_backend::observe::{Happened, SourceObserver};

/// A shard this instance holds: its session, its reader, and the
/// checkpoint last written.
pub(super) struct Held {
    pub(super) session: Arc<Session>,
    pub(super) reader: JoinHandle<()>,
    pub(super) written: Option<Checkpoint>,
}

/// The lease loop's state; see the module docs.
pub(crate) struct LeaseLoop<S> {
    pub(crate) store: Arc<S>,
    pub(crate) reading: Arc<Reading>,
    pub(crate) owner: String,
    pub(crate) lease_duration: Duration,
    pub(crate) checkpoint_interval: Duration,
    pub(crate) initial: IteratorStart,
    pub(super) held: HashMap<String, Held>,
}

impl<S: LeaseStore> LeaseLoop<S> {
    pub(crate) fn new(
        store: Arc<S>,
        reading: Arc<Reading>,
        owner: String,
        lease_duration: Duration,
        checkpoint_interval: Duration,
        initial: IteratorStart,
    ) -> Self {
        Self {
            store,
            reading,
            owner,
            lease_duration,
            checkpoint_interval,
            initial,
            held: HashMap::new(),
        }
    }

    /// Runs until `stop` says so (or its sender is gone), then gives
    /// everything back.
    pub(crate) async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let every = self.lease_duration / 3;
        let mut next_round = tokio::time::Instant::now();
        loop {
            if tokio::time::Instant::now() >= next_round {
                self.lease_round().await;
                next_round = tokio::time::Instant::now() + every;
            }
            self.checkpoint_round().await;
            tokio::select! {
                changed = stop.changed() => if changed.is_err() || *stop.borrow() { break },
                () = tokio::time::sleep(self.checkpoint_interval.min(every)) => {}
            }
        }
        self.shutdown().await;
    }

    pub(super) fn observer(&self) -> &SourceObserver {
        &self.reading.observer
    }

    fn until(&self) -> SystemTime {
        SystemTime::now() + self.lease_duration
    }

    /// Lists the shards, renews what is held, takes a fair share of what
    /// may be read.
    async fn lease_round(&mut self) {
        let listed = match self
            .reading
            .api
            .list_shards(self.reading.stream.as_str())
            .await
        {
            Ok(listed) => listed,
            Err(e) => {
                let error = Error::Kinesis {
                    operation: "ListShards",
                    stream: self.reading.stream.to_string(),
                    source: e,
                };
                tracing::warn!(target: "consumer::kinesis", error = %error, "could not list the shards; renewing the leases held");
                if !error.is_retriable() {
                    let _ = self.reading.tx.try_send(Err(error.into()));
                }
                self.renew().await;
                return;
            }
        };
        let ids: Vec<String> = listed.iter().map(|s| s.id.clone()).collect();
        if let Err(e) = self.store.ensure(&ids).await {
            tracing::warn!(target: "consumer::kinesis", error = %e, "could not create the leases of new shards");
        }
        self.renew().await;
        let Some(readable) = self.readable(&listed).await else {
            return;
        };
        let leases = match self.store.leases().await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(target: "consumer::kinesis", error = %e, "could not read the leases");
                return;
            }
        };
        let leases: Vec<Lease> = leases
            .into_iter()
            .filter(|l| readable.contains(&l.shard_id))
            .collect();
        let moves = balance::moves(&leases, &self.owner, SystemTime::now());
        for lease in moves.take {
            self.take(&lease, false).await;
        }
        if let Some(lease) = moves.steal {
            self.take(&lease, true).await;
        }
        self.count_held();
    }

    /// The listed shards that may be read now: every parent finished
    /// (closed and checkpointed to its end), not finished themselves.
    /// `None` when the store cannot say.
    async fn readable(&self, listed: &[ShardInfo]) -> Option<HashSet<String>> {
        let mut finished = HashSet::new();
        for shard in listed.iter().filter(|s| s.is_closed()) {
            match self.store.checkpoint_of(&shard.id).await {
                Ok(Some(Checkpoint::ShardEnd)) => {
                    finished.insert(shard.id.clone());
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(target: "consumer::kinesis", shard = %shard.id, error = %e, "could not read a checkpoint");
                    return None;
                }
            }
        }
        Some(
            shards::readable(listed, |id| finished.contains(id))
                .into_iter()
                .collect(),
        )
    }

    /// Renews every lease held; one lost (or not renewed before it ends)
    /// stops its reader.
    async fn renew(&mut self) {
        let mut lost = Vec::new();
        for (shard, held) in &self.held {
            let until = self.until();
            match self.store.renew(shard, &self.owner, until).await {
                Ok(Some(_)) => held.session.renewed(until),
                Ok(None) => lost.push(shard.clone()),
                Err(e) => {
                    tracing::warn!(target: "consumer::kinesis", shard = %shard, error = %e, "could not renew a lease");
                    if held.session.held_until() <= SystemTime::now() {
                        lost.push(shard.clone());
                    }
                }
            }
        }
        for shard in lost {
            self.lose(&shard);
        }
    }

    /// Takes `lease` (seen as it is) and starts reading its shard from its
    /// checkpoint.
    async fn take(&mut self, lease: &Lease, steal: bool) {
        let shard = &lease.shard_id;
        let checkpoint = match self.store.checkpoint_of(shard).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(target: "consumer::kinesis", shard = %shard, error = %e, "could not read a checkpoint");
                return;
            }
        };
        let start = match &checkpoint {
            Some(Checkpoint::ShardEnd) => return,
            Some(Checkpoint::At(seq)) => IteratorStart::AfterSequence(seq.clone()),
            None => self.initial.clone(),
        };
        let until = self.until();
        let taken = self
            .store
            .take(shard, &self.owner, lease.counter, until, steal)
            .await;
        match taken {
            Ok(Some(_)) => {
                self.observer().emit(Happened::LeaseTaken {
                    shard,
                    steal,
                    start: &start,
                });
                // A lease this instance held but let lapse (its renewals
                // failed) is a new session: the old reader must not go on.
                if let Some(old) = self.held.remove(shard) {
                    old.reader.abort();
                }
                let session = Arc::new(Session::new(shard.clone(), start, until));
                // A stolen lease's previous owner reads on until its next
                // renewal fails (a third of the duration) and finishes what
                // it handed out: reading at once could run a key's later
                // record before it finishes the earlier one.
                let wait = if steal {
                    self.lease_duration / 3 + self.checkpoint_interval
                } else {
                    Duration::ZERO
                };
                let (reading, read) = (Arc::clone(&self.reading), Arc::clone(&session));
                let reader = tokio::spawn(async move {
                    tokio::time::sleep(wait).await;
                    reader::read(reading, read).await;
                });
                self.held.insert(
                    shard.clone(),
                    Held {
                        session,
                        reader,
                        written: checkpoint,
                    },
                );
                self.count_held();
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(target: "consumer::kinesis", shard = %shard, error = %e, "could not take a lease");
            }
        }
    }

    /// The lease of `shard` is gone: its reader stops, and what it handed
    /// out settles into a ledger nobody reads.
    pub(super) fn lose(&mut self, shard: &str) {
        if let Some(held) = self.held.remove(shard) {
            held.reader.abort();
            self.observer().emit(Happened::LeaseLost { shard });
        }
        self.count_held();
    }

    /// Publishes which shards are held: the count, and the sessions the
    /// gauges read.
    pub(super) fn count_held(&self) {
        self.observer()
            .emit(Happened::LeasesHeld(self.held.len() as u64));
        let mut shown = self
            .reading
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *shown = self
            .held
            .iter()
            .map(|(shard, held)| (shard.clone(), Arc::clone(&held.session)))
            .collect();
    }
}
