//! `kinesis shards | checkpoint`: a Kinesis consumer's leases and
//! checkpoints, kept in the store's database by `consumer-kinesis-store`,
//! and a shard's checkpoint moved (say, past a record that must be skipped,
//! or back to the start to read a shard again).
//!
//! A checkpoint is moved only while no instance holds the shard's lease:
//! stop the consumers, or wait until the lease expires. A running instance
//! would otherwise checkpoint over the move, or keep reading past it. Once
//! moved, the next instance to take the lease reads from just after the
//! checkpoint (from the source's start position when there is none), and
//! dedup absorbs what it had settled already.

use std::io::Write;

use consumer_core::envelope::format_time;
use consumer_kinesis::lease::Checkpoint;
use consumer_kinesis_store::{CheckpointMove, Error as LeaseError, ShardState, SqlLeaseStore};
use serde_json::json;

use crate::args::{KinesisReading, Services};
use crate::database;
use crate::error::{Error, Result};
use crate::json::line;
use crate::render::{Table, write};

/// The longest sequence number Kinesis writes.
const MAX_SEQUENCE_DIGITS: usize = 128;

fn explain(e: LeaseError) -> Error {
    match e {
        LeaseError::Database(db) => database::explain(db, "consumer_kinesis_leases"),
        refused @ (LeaseError::Leased { .. }
        | LeaseError::NoSuchShard { .. }
        | LeaseError::Changed { .. }) => Error::Refused(refused.to_string()),
        other => Error::Other(other.to_string()),
    }
}

async fn store(
    services: &Services,
    reading: &KinesisReading,
) -> Result<SqlLeaseStore<sqlx::Postgres>> {
    Ok(SqlLeaseStore::new(
        database::connect(services).await?,
        reading.application.as_str(),
        reading.stream.as_str(),
    ))
}

fn shown(checkpoint: Option<&Checkpoint>) -> String {
    match checkpoint {
        Some(Checkpoint::At(seq)) => seq.clone(),
        Some(Checkpoint::ShardEnd) => "SHARD_END".to_owned(),
        None => "-".to_owned(),
    }
}

/// `shards`: one row per shard, by shard id.
pub async fn shards(
    services: &Services,
    reading: &KinesisReading,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let shards = store(services, reading)
        .await?
        .shards()
        .await
        .map_err(explain)?;
    if shards.is_empty() {
        return Err(Error::Refused(format!(
            "no lease of application {} on stream {}: its consumers never ran on this database, or the names differ",
            reading.application, reading.stream
        )));
    }
    if json {
        for s in &shards {
            let v = json!({
                "shard_id": s.lease.shard_id,
                "owner": s.lease.owner,
                "leased": s.leased,
                "expires_at": format_time(s.lease.expires_at.into()),
                "checkpoint": s.checkpoint.as_ref().map(|c| shown(Some(c))),
            });
            writeln!(out, "{}", line(&v)).map_err(Error::io("writing the output"))?;
        }
        return Ok(());
    }
    let mut t = Table::new(&["SHARD", "OWNER", "LEASE", "CHECKPOINT"]);
    for ShardState {
        lease,
        checkpoint,
        leased,
    } in &shards
    {
        let state = if *leased {
            format!("held until {}", format_time(lease.expires_at.into()))
        } else {
            "free".to_owned()
        };
        t.row(vec![
            lease.shard_id.clone(),
            lease.owner.clone().unwrap_or_else(|| "-".to_owned()),
            state,
            shown(checkpoint.as_ref()),
        ]);
    }
    write(out, &t.render())
}

/// What `--to` says: a sequence number (decimal digits, as Kinesis writes
/// them), or `None` for `--to-start`.
pub fn target(to: Option<&str>) -> Result<Option<Checkpoint>> {
    let Some(seq) = to else { return Ok(None) };
    if seq.is_empty() || seq.len() > MAX_SEQUENCE_DIGITS || !seq.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(Error::Refused(format!(
            "`{seq}` is not a Kinesis sequence number (decimal digits, at most {MAX_SEQUENCE_DIGITS})"
        )));
    }
    Ok(Some(Checkpoint::At(seq.to_owned())))
}

/// `checkpoint`: moves (or on a dry run shows) one shard's checkpoint.
pub async fn checkpoint(
    services: &Services,
    reading: &KinesisReading,
    shard: &str,
    to: Option<Checkpoint>,
    dry_run: bool,
    out: &mut impl Write,
) -> Result<()> {
    let CheckpointMove {
        from, to, written, ..
    } = store(services, reading)
        .await?
        .move_checkpoint(shard, to, dry_run)
        .await
        .map_err(explain)?;
    let (from, to) = (shown(from.as_ref()), shown(to.as_ref()));
    let said = if written {
        format!(
            "shard {shard}: checkpoint moved from {from} to {to}; the next instance to take its lease reads on from there\n"
        )
    } else {
        format!(
            "shard {shard}: checkpoint would move from {from} to {to} (dry run: nothing written)\n"
        )
    };
    write(out, &said)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_is_digits_or_the_start() {
        assert_eq!(target(None).ok(), Some(None));
        assert_eq!(
            target(Some(
                "49590338271490256608559692538361571095921575989136588898"
            ))
            .ok(),
            Some(Some(Checkpoint::At(
                "49590338271490256608559692538361571095921575989136588898".into()
            )))
        );
        for bad in ["", "12a", "-1", "TRIM_HORIZON", &"9".repeat(129)] {
            assert!(
                matches!(target(Some(bad)), Err(Error::Refused(_))),
                "{bad:?}"
            );
        }
    }
}
