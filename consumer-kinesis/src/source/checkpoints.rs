//! How the lease loop writes checkpoints: each held shard's safe
//! checkpoint ([`Ledger::safe_checkpoint`](super::ledger::Ledger)) every
//! checkpoint interval, the shard's end with the lease given up, and the
//! last ones at shutdown.

use std::time::SystemTime;

use super::lease_loop::LeaseLoop;
use crate::lease::{Checkpoint, CheckpointWrite, LeaseStore};
use consumer_backend::observe::Happened;

impl<S: LeaseStore> LeaseLoop<S> {
    /// Writes every held shard's checkpoint that moved; gives up the lease
    /// of a shard read and settled to its end, and of one whose reader
    /// stopped (taken again, and read from its checkpoint, next round).
    pub(super) async fn checkpoint_round(&mut self) {
        let shards: Vec<String> = self.held.keys().cloned().collect();
        for shard in shards {
            let Some(held) = self.held.get(&shard) else {
                continue;
            };
            if held.session.held_until() <= SystemTime::now() {
                self.lose(&shard);
                continue;
            }
            let (safe, end_read) = {
                let ledger = held.session.ledger();
                (ledger.safe_checkpoint(), ledger.is_end_read())
            };
            // A reader that read its closed shard to the end waits for the
            // last settles; one that stopped otherwise gave up.
            let stopped = held.reader.is_finished() && !end_read;
            if let Some(checkpoint) = safe.filter(|c| Some(c) != held.written.as_ref())
                && !self.write(&shard, checkpoint).await
            {
                continue;
            }
            if stopped {
                self.give_up(&shard, "its reader stopped").await;
            }
        }
    }

    /// Writes `checkpoint` for `shard`; whether the shard is still held.
    async fn write(&mut self, shard: &str, checkpoint: Checkpoint) -> bool {
        let end = checkpoint.is_shard_end();
        match self
            .store
            .checkpoint(shard, &self.owner, checkpoint.clone())
            .await
        {
            Ok(CheckpointWrite::Written) => {
                self.observer()
                    .emit(Happened::Checkpointed { shard_end: end });
                if let Some(held) = self.held.get_mut(shard) {
                    held.written = Some(checkpoint);
                }
                if end {
                    self.give_up(shard, "it is read and settled to its end")
                        .await;
                    return false;
                }
                true
            }
            Ok(CheckpointWrite::Behind) => {
                if let Some(held) = self.held.get_mut(shard) {
                    held.written = Some(checkpoint);
                }
                true
            }
            Ok(CheckpointWrite::NotOwner) => {
                self.lose(shard);
                false
            }
            Err(e) => {
                tracing::warn!(target: "consumer::kinesis", shard = %shard, error = %e, "could not write a checkpoint; trying again");
                true
            }
        }
    }

    /// Stops reading `shard` and releases its lease.
    async fn give_up(&mut self, shard: &str, why: &str) {
        if let Some(held) = self.held.remove(shard) {
            held.reader.abort();
            tracing::info!(target: "consumer::kinesis", shard = %shard, "giving a shard's lease up: {why}");
            if let Err(e) = self.store.release(shard, &self.owner).await {
                tracing::warn!(target: "consumer::kinesis", shard = %shard, error = %e, "could not release a lease; it expires");
            }
        }
        self.count_held();
    }

    /// Stops every reader, writes the last checkpoints, releases every
    /// lease.
    pub(super) async fn shutdown(&mut self) {
        for held in self.held.values() {
            held.reader.abort();
        }
        let shards: Vec<String> = self.held.keys().cloned().collect();
        for shard in shards {
            let Some(held) = self.held.get(&shard) else {
                continue;
            };
            let safe = held.session.ledger().safe_checkpoint();
            if let Some(checkpoint) = safe.filter(|c| Some(c) != held.written.as_ref())
                && !self.write(&shard, checkpoint).await
            {
                continue;
            }
            self.give_up(&shard, "the source closes").await;
        }
    }
}
