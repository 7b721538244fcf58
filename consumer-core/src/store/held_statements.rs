//! Held keys on a database: [`HeldKeys`] for [`Store`], each statement
//! written once on the [SQL seam](crate::sql) (see [`held`](super::held)
//! for why the order holds).

use std::time::Duration;

use sqlx::Pool;

use super::held::{HeldCount, HeldKey, HeldKeys, HoldStatus, Holding, NextParked, Parked, Release};
use super::{Store, StoreDatabase, from_ms, headers_from_json, headers_json};
use crate::envelope::Envelope;
use crate::error::Error;
use crate::sql::{Arg, Columns, Dialect, Statement, args, storable};

static TAKE_SEQ: Statement = Statement::new(
    "UPDATE consumer_held_keys SET next_seq = next_seq + 1 \
     WHERE handler = $1 AND key = $2 RETURNING next_seq - 1",
);

static HOLD: Statement = Statement::new(
    "INSERT INTO consumer_held_keys \
       (handler, key, head_message_id, reason, status, next_seq, held_at) \
     VALUES ($1, $2, $3, $4, 'held', 1, {now}) \
     ON CONFLICT (handler, key) DO UPDATE \
       SET head_message_id = excluded.head_message_id, reason = excluded.reason, \
           status = 'held', drainer = NULL, lease_until = NULL, \
           next_seq = consumer_held_keys.next_seq + 1 \
     RETURNING next_seq - 1",
);

static HOLD_IF_UNHELD: Statement = Statement::new(
    "INSERT INTO consumer_held_keys \
       (handler, key, head_message_id, reason, status, next_seq, held_at) \
     VALUES ($1, $2, $3, $4, 'held', 1, {now}) \
     ON CONFLICT (handler, key) DO NOTHING \
     RETURNING next_seq - 1",
);

static PARK: Statement = Statement::new(
    "INSERT INTO consumer_parked \
       (handler, key, seq, message_id, destination, position, headers, payload, parked_at) \
     VALUES ($1, $2, $3, $4, $5, $6, {$7::jsonb}, $8, {now}) \
     ON CONFLICT (handler, message_id) DO NOTHING",
);

/// A released key, or one whose drainer's lease ran out; the outer
/// condition is checked again on the row a concurrent taker may have
/// changed, so two drainers never take one key.
static TAKE_RELEASED: Statement = Statement::new(
    "UPDATE consumer_held_keys SET status = 'draining', drainer = $2, lease_until = {later $3} \
     WHERE handler = $1 \
       AND key = (SELECT key FROM consumer_held_keys \
                  WHERE handler = $1 \
                    AND (status = 'released' OR (status = 'draining' AND lease_until < {now})) \
                  ORDER BY held_at LIMIT 1 {skip_locked}) \
       AND (status = 'released' OR (status = 'draining' AND lease_until < {now})) \
     RETURNING key",
);

static RENEW: Statement = Statement::new(
    "UPDATE consumer_held_keys SET lease_until = {later $4} \
     WHERE handler = $1 AND key = $2 AND status = 'draining' AND drainer = $3 \
     RETURNING next_seq",
);

static OLDEST_PARKED: Statement = Statement::new(
    "SELECT seq, message_id, destination, position, {headers::text}, payload \
     FROM consumer_parked WHERE handler = $1 AND key = $2 ORDER BY seq LIMIT 1",
);

static UNPARK: Statement = Statement::new(
    "DELETE FROM consumer_parked WHERE handler = $1 AND message_id = $3 \
       AND NOT EXISTS (SELECT 1 FROM consumer_held_keys h \
                       WHERE h.handler = $1 AND h.key = $2 AND h.status = 'held' \
                         AND h.head_message_id = $3)",
);

static FINISH: Statement = Statement::new(
    "DELETE FROM consumer_held_keys \
     WHERE handler = $1 AND key = $2 AND status = 'draining' AND drainer = $3 AND next_seq = $4",
);

static LIST: Statement = Statement::new(
    "SELECT h.handler, h.key, h.head_message_id, h.reason, h.status, \
            (SELECT count(*) FROM consumer_parked p WHERE p.handler = h.handler AND p.key = h.key), \
            {ms h.held_at} \
     FROM consumer_held_keys h \
     WHERE ({$1::text} IS NULL OR h.handler = $1) AND (h.handler > $2 OR (h.handler = $2 AND h.key > $3)) \
     ORDER BY h.handler, h.key LIMIT $4",
);

static COUNT_HELD: Statement = Statement::new(
    "SELECT count(*), min({ms held_at}) FROM consumer_held_keys \
     WHERE handler = $1 AND status = 'held'",
);

static RELEASE: Statement = Statement::new(
    "UPDATE consumer_held_keys SET status = 'released' \
     WHERE handler = $1 AND key = $2 AND status = 'held' RETURNING head_message_id",
);

static FORGET_FAILURES: Statement =
    Statement::new("DELETE FROM consumer_attempts WHERE handler = $1 AND message_id = $2");

static DROP_PARKED: Statement =
    Statement::new("DELETE FROM consumer_parked WHERE handler = $1 AND message_id = $2");

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Parks `envelope` at `seq` (nothing when it is parked already).
async fn park<DB: Dialect>(
    conn: &mut DB::Connection,
    handler: &str,
    key: &str,
    seq: i64,
    envelope: &Envelope,
) -> Result<(), sqlx::Error> {
    let headers = headers_json(&envelope.headers);
    let id = storable(&envelope.id);
    let channel = storable(&envelope.origin.channel);
    let position = storable(&envelope.origin.position);
    let args = [
        Arg::Text(handler),
        Arg::Text(key),
        Arg::Int(seq),
        Arg::Text(&id),
        Arg::Text(&channel),
        Arg::Text(&position),
        Arg::Text(&headers),
        Arg::Bytes(&envelope.payload),
    ];
    DB::execute(conn, PARK.sql::<DB>(), &args).await?;
    Ok(())
}

async fn take_seq<DB: Dialect>(
    conn: &mut DB::Connection,
    statement: &'static Statement,
    args: &[Arg<'_>],
) -> Result<Option<i64>, sqlx::Error> {
    match DB::fetch_optional(conn, statement.sql::<DB>(), args).await? {
        Some(row) => Ok(Some(Columns::<DB>::of(&row).int()?)),
        None => Ok(None),
    }
}

fn parked<DB: Dialect>(row: &DB::Row) -> Result<Parked, sqlx::Error> {
    let mut c = Columns::<DB>::of(row);
    let seq = c.int()?;
    let message_id = c.text()?;
    let destination = c.text()?;
    let position = c.text()?;
    let headers = c.text()?;
    let payload = c.bytes()?;
    let headers = headers_from_json(&headers).ok_or_else(|| {
        sqlx::Error::Decode(
            format!("parked message {message_id}: headers are not a header list").into(),
        )
    })?;
    Ok(Parked {
        seq,
        message_id,
        destination,
        position,
        headers,
        payload: payload.into(),
    })
}

fn held_key<DB: Dialect>(row: &DB::Row) -> Result<HeldKey, sqlx::Error> {
    let mut c = Columns::<DB>::of(row);
    let handler = c.text()?;
    let key = c.text()?;
    let head_message_id = c.text()?;
    let reason = c.text()?;
    let status = c.text()?;
    let parked = c.int()?;
    let held_at = c.int()?;
    let status = HoldStatus::parse(&status)
        .ok_or_else(|| sqlx::Error::Decode(format!("unknown hold status {status:?}").into()))?;
    Ok(HeldKey {
        handler,
        key,
        head_message_id,
        reason,
        status,
        parked: u64::try_from(parked).unwrap_or(0),
        held_at: from_ms(held_at),
    })
}

async fn released_head<DB: Dialect>(
    pool: &Pool<DB>,
    handler: &str,
    key: &str,
    skip_head: bool,
) -> Result<Release, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let Some(row) = DB::fetch_optional(&mut tx, RELEASE.sql::<DB>(), args![handler, key]).await?
    else {
        tx.rollback().await?;
        return Ok(Release::NotHeld);
    };
    let head = Columns::<DB>::of(&row).text()?;
    let forget = if skip_head {
        &DROP_PARKED
    } else {
        &FORGET_FAILURES
    };
    DB::execute(&mut tx, forget.sql::<DB>(), args![handler, head.as_str()]).await?;
    tx.commit().await?;
    Ok(Release::Released)
}

impl<DB: StoreDatabase> HeldKeys for Store<DB> {
    async fn park_if_held(
        &self,
        handler: &str,
        key: &str,
        envelope: &Envelope,
    ) -> Result<bool, Error> {
        let mut tx = self.pool().begin().await?;
        let Some(seq) = take_seq::<DB>(&mut tx, &TAKE_SEQ, args![handler, key]).await? else {
            tx.rollback().await?;
            return Ok(false);
        };
        park::<DB>(&mut tx, handler, key, seq, envelope).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn hold_key(
        &self,
        handler: &str,
        key: &str,
        envelope: &Envelope,
        reason: &str,
        how: Holding,
    ) -> Result<(), Error> {
        let mut tx = self.pool().begin().await?;
        let id = storable(&envelope.id);
        let why = storable(reason);
        let hold = args![handler, key, id.as_ref(), why.as_ref()];
        let statement = match how {
            Holding::Dead => &HOLD,
            Holding::Redelivered => &HOLD_IF_UNHELD,
        };
        // No row: held already, and left as it is.
        if let Some(seq) = take_seq::<DB>(&mut tx, statement, hold).await? {
            park::<DB>(&mut tx, handler, key, seq, envelope).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn take_released(
        &self,
        handler: &str,
        drainer: &str,
        lease: Duration,
    ) -> Result<Option<String>, Error> {
        let mut conn = self.pool().acquire().await?;
        let sql = TAKE_RELEASED.sql::<DB>();
        let row =
            DB::fetch_optional(&mut conn, sql, args![handler, drainer, millis(lease)]).await?;
        Ok(match row {
            Some(row) => Some(Columns::<DB>::of(&row).text()?),
            None => None,
        })
    }

    async fn next_parked(
        &self,
        handler: &str,
        key: &str,
        drainer: &str,
        lease: Duration,
    ) -> Result<NextParked, Error> {
        let mut conn = self.pool().acquire().await?;
        let renew = args![handler, key, drainer, millis(lease)];
        // The counter first, then the parked rows: a message parked after
        // the first read is either found by the second or moves the
        // counter past what `finish_hold` is given.
        let Some(next_seq) = take_seq::<DB>(&mut conn, &RENEW, renew).await? else {
            return Ok(NextParked::NotOurs);
        };
        let sql = OLDEST_PARKED.sql::<DB>();
        Ok(
            match DB::fetch_optional(&mut conn, sql, args![handler, key]).await? {
                Some(row) => NextParked::Message(parked::<DB>(&row)?),
                None => NextParked::Empty { next_seq },
            },
        )
    }

    async fn unpark(&self, handler: &str, key: &str, message_id: &str) -> Result<(), Error> {
        let mut conn = self.pool().acquire().await?;
        let id = storable(message_id);
        DB::execute(
            &mut conn,
            UNPARK.sql::<DB>(),
            args![handler, key, id.as_ref()],
        )
        .await?;
        Ok(())
    }

    async fn finish_hold(
        &self,
        handler: &str,
        key: &str,
        drainer: &str,
        next_seq: i64,
    ) -> Result<bool, Error> {
        let mut conn = self.pool().acquire().await?;
        let sql = FINISH.sql::<DB>();
        Ok(DB::execute(&mut conn, sql, args![handler, key, drainer, next_seq]).await? == 1)
    }

    async fn held_keys(
        &self,
        handler: Option<&str>,
        after: Option<(&str, &str)>,
        limit: u32,
    ) -> Result<Vec<HeldKey>, Error> {
        let mut conn = self.pool().acquire().await?;
        let (after_handler, after_key) = after.unwrap_or(("", ""));
        let args = args![handler, after_handler, after_key, i64::from(limit)];
        let rows = DB::fetch_all(&mut conn, LIST.sql::<DB>(), args).await?;
        Ok(rows
            .iter()
            .map(held_key::<DB>)
            .collect::<Result<Vec<_>, _>>()?)
    }

    async fn held_count(&self, handler: &str) -> Result<HeldCount, Error> {
        let mut conn = self.pool().acquire().await?;
        let sql = COUNT_HELD.sql::<DB>();
        let Some(row) = DB::fetch_optional(&mut conn, sql, args![handler]).await? else {
            return Ok(HeldCount::default());
        };
        let mut c = Columns::<DB>::of(&row);
        Ok(HeldCount {
            held: u64::try_from(c.int()?).unwrap_or(0),
            oldest: c.maybe_int()?.map(from_ms),
        })
    }

    async fn release_key(
        &self,
        handler: &str,
        key: &str,
        skip_head: bool,
    ) -> Result<Release, Error> {
        Ok(released_head(self.pool(), handler, key, skip_head).await?)
    }
}
