//! The lease table's statements, written once for every database on the
//! runtime's [SQL seam](consumer_core::sql). Times are written from now in
//! the database's clock (`{later $n}`) and compared with it (`{now}`).

use consumer_core::sql::{Columns, Dialect, Statement};
use consumer_kinesis::lease::{Checkpoint, Lease};
use std::time::{Duration, SystemTime};

use crate::error::{Error, Result};

/// How [`Checkpoint::ShardEnd`] is stored (the KCL's word).
pub(crate) const SHARD_END: &str = "SHARD_END";

/// The columns a [`Lease`] is read from.
macro_rules! lease_columns {
    () => {
        "shard_id, owner, {ms expires_at}, counter"
    };
}

/// `$1` application, `$2` stream, `$3` shard: the row's key.
macro_rules! key {
    () => {
        "application = $1 AND stream = $2 AND shard_id = $3"
    };
}

pub(crate) static ENSURE: Statement = Statement::new(
    "INSERT INTO consumer_kinesis_leases \
       (application, stream, shard_id, owner, expires_at, counter, checkpoint) \
     VALUES ($1, $2, $3, NULL, {at $4}, 0, NULL) \
     ON CONFLICT (application, stream, shard_id) DO NOTHING",
);

pub(crate) static LEASES: Statement = Statement::new(concat!(
    "SELECT ",
    lease_columns!(),
    " FROM consumer_kinesis_leases WHERE application = $1 AND stream = $2 ORDER BY shard_id"
));

/// `$4` owner, `$5` ms from now, `$6` the counter seen, `$7` steal.
pub(crate) static TAKE: Statement = Statement::new(concat!(
    "UPDATE consumer_kinesis_leases SET owner = $4, expires_at = {later $5}, counter = counter + 1 WHERE ",
    key!(),
    " AND counter = $6 AND ($7 OR owner IS NULL OR expires_at <= {now}) RETURNING ",
    lease_columns!()
));

/// `$4` owner, `$5` ms from now.
pub(crate) static RENEW: Statement = Statement::new(concat!(
    "UPDATE consumer_kinesis_leases SET expires_at = {later $5}, counter = counter + 1 WHERE ",
    key!(),
    " AND owner = $4 AND expires_at > {now} RETURNING ",
    lease_columns!()
));

/// `$4` owner, `$5` the epoch (0).
pub(crate) static RELEASE: Statement = Statement::new(concat!(
    "UPDATE consumer_kinesis_leases SET owner = NULL, expires_at = {at $5}, counter = counter + 1 WHERE ",
    key!(),
    " AND owner = $4"
));

/// The checkpoint, and whether `$4` holds the lease now.
pub(crate) static CHECKPOINT_STATE: Statement = Statement::new(concat!(
    "SELECT checkpoint, CASE WHEN owner = $4 AND expires_at > {now} THEN 1 ELSE 0 END \
     FROM consumer_kinesis_leases WHERE ",
    key!()
));

/// `$4` owner, `$5` the new checkpoint, `$6` the one read before (or NULL).
pub(crate) static CHECKPOINT: Statement = Statement::new(concat!(
    "UPDATE consumer_kinesis_leases SET checkpoint = $5 WHERE ",
    key!(),
    " AND owner = $4 AND expires_at > {now} \
     AND (checkpoint = $6 OR (checkpoint IS NULL AND $6 IS NULL))"
));

pub(crate) static CHECKPOINT_OF: Statement = Statement::new(concat!(
    "SELECT checkpoint FROM consumer_kinesis_leases WHERE ",
    key!()
));

/// Every shard's lease, its checkpoint, and whether a live instance holds
/// it (an operator's view).
pub(crate) static SHARDS: Statement = Statement::new(concat!(
    "SELECT ",
    lease_columns!(),
    ", checkpoint, CASE WHEN owner IS NOT NULL AND expires_at > {now} THEN 1 ELSE 0 END \
     FROM consumer_kinesis_leases WHERE application = $1 AND stream = $2 ORDER BY shard_id"
));

/// An operator's move: `$4` the new checkpoint (NULL: the source's start
/// position), `$5` the one read before (or NULL); only while no live
/// instance holds the lease. The counter moves, so a lease read before
/// cannot be taken over the move unseen.
pub(crate) static MOVE_CHECKPOINT: Statement = Statement::new(concat!(
    "UPDATE consumer_kinesis_leases SET checkpoint = $4, counter = counter + 1 WHERE ",
    key!(),
    " AND (owner IS NULL OR expires_at <= {now}) \
     AND (checkpoint = $5 OR (checkpoint IS NULL AND $5 IS NULL))"
));

/// A [`Lease`] from a row of [`lease_columns!`].
pub(crate) fn lease<DB: Dialect>(row: &DB::Row) -> Result<Lease> {
    let mut c = Columns::<DB>::of(row);
    let shard_id = c.text()?;
    let owner = c.maybe_text()?;
    let expires_ms = c.int()?;
    let counter = c.int()?;
    let Ok(counter) = u64::try_from(counter) else {
        return Err(Error::Row {
            shard_id,
            reason: "its counter is below zero",
        });
    };
    let expires_at = SystemTime::UNIX_EPOCH
        + Duration::from_millis(u64::try_from(expires_ms).unwrap_or_default());
    Ok(Lease {
        shard_id,
        owner,
        expires_at,
        counter,
    })
}

/// How a checkpoint is stored.
pub(crate) fn stored(checkpoint: &Checkpoint) -> &str {
    match checkpoint {
        Checkpoint::At(seq) => seq,
        Checkpoint::ShardEnd => SHARD_END,
    }
}

/// A stored checkpoint.
pub(crate) fn checkpoint(stored: Option<String>) -> Option<Checkpoint> {
    stored.map(|s| {
        if s == SHARD_END {
            Checkpoint::ShardEnd
        } else {
            Checkpoint::At(s)
        }
    })
}

/// Milliseconds from now to `until` (0 when it has passed).
pub(crate) fn ms_until(until: SystemTime) -> i64 {
    let left = until
        .duration_since(SystemTime::now())
        .unwrap_or_default()
        .as_millis();
    i64::try_from(left).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_round_trip_with_the_kcls_shard_end() {
        for c in [Checkpoint::At("4959".to_owned()), Checkpoint::ShardEnd] {
            assert_eq!(checkpoint(Some(stored(&c).to_owned())), Some(c));
        }
        assert_eq!(checkpoint(None), None);
    }
}
