//! What an operator reads and moves (`consumer kinesis shards`,
//! `consumer kinesis checkpoint`): every shard's lease with its checkpoint,
//! and a checkpoint moved while no instance reads the shard.

use consumer_core::sql::{Arg, Columns, Dialect, args};
use consumer_kinesis::lease::{Checkpoint, Lease};

use crate::error::{Error, Result};
use crate::statements::{self as st, MOVE_CHECKPOINT, SHARDS};
use crate::store::SqlLeaseStore;

/// A shard's lease and checkpoint, as an operator sees them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardState {
    /// The lease (owner, expiry, counter).
    pub lease: Lease,
    /// How far the shard is settled; `None`: nothing yet (the source starts
    /// at its configured position).
    pub checkpoint: Option<Checkpoint>,
    /// Whether a live instance holds the lease now (the database's clock).
    pub leased: bool,
}

/// A checkpoint move, done or (on a dry run) only shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointMove {
    /// The shard.
    pub shard_id: String,
    /// The checkpoint before.
    pub from: Option<Checkpoint>,
    /// The checkpoint after.
    pub to: Option<Checkpoint>,
    /// Whether it was written (`false` on a dry run).
    pub written: bool,
}

impl<DB: Dialect> SqlLeaseStore<DB> {
    /// Every shard's lease and checkpoint, by shard id.
    pub async fn shards(&self) -> Result<Vec<ShardState>> {
        let mut conn = self.pool.acquire().await?;
        let rows = DB::fetch_all(
            &mut conn,
            SHARDS.sql::<DB>(),
            args![self.application.as_str(), self.stream.as_str()],
        )
        .await?;
        rows.iter()
            .map(|row| {
                let lease = st::lease::<DB>(row)?;
                // After the lease's four columns.
                let mut c = Columns::<DB>::starting_at(row, 4);
                let checkpoint = st::checkpoint(c.maybe_text()?);
                let leased = c.int()? == 1;
                Ok(ShardState {
                    lease,
                    checkpoint,
                    leased,
                })
            })
            .collect()
    }

    /// Moves shard `shard_id`'s checkpoint to `to` (`None`: back to the
    /// source's start position), or on a `dry_run` only says what would
    /// move. Refused while a live instance holds the lease
    /// ([`Error::Leased`]): the instance would checkpoint over the move, or
    /// keep reading past it.
    pub async fn move_checkpoint(
        &self,
        shard_id: &str,
        to: Option<Checkpoint>,
        dry_run: bool,
    ) -> Result<CheckpointMove> {
        let state = self
            .shards()
            .await?
            .into_iter()
            .find(|s| s.lease.shard_id == shard_id)
            .ok_or_else(|| Error::NoSuchShard {
                shard_id: shard_id.to_owned(),
            })?;
        if state.leased {
            return Err(Error::Leased {
                shard_id: shard_id.to_owned(),
                owner: state.lease.owner.unwrap_or_default(),
            });
        }
        let mut moved = CheckpointMove {
            shard_id: shard_id.to_owned(),
            from: state.checkpoint,
            to,
            written: false,
        };
        if dry_run {
            return Ok(moved);
        }
        let mut conn = self.pool.acquire().await?;
        let n = DB::execute(
            &mut conn,
            MOVE_CHECKPOINT.sql::<DB>(),
            &[
                self.application.as_str().into(),
                self.stream.as_str().into(),
                shard_id.into(),
                Arg::MaybeText(moved.to.as_ref().map(st::stored)),
                Arg::MaybeText(moved.from.as_ref().map(st::stored)),
            ],
        )
        .await?;
        if n != 1 {
            return Err(Error::Changed {
                shard_id: shard_id.to_owned(),
            });
        }
        moved.written = true;
        Ok(moved)
    }
}
