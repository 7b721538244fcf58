//! The replay journal: one row per letter a replay has sent, keyed by the
//! letter's id, in the store's database (`consumer_replay_journal`).
//!
//! A letter is journaled *after* the broker confirmed its copy, then
//! removed from its place. A replay killed between the confirm and the
//! journal row sends that letter again when it is run again: the handler's
//! dedup row absorbs the second copy if the first was processed (at least
//! once on the wire, once in effect). Journaling first would instead lose a
//! letter killed between the journal row and the publish.

use std::collections::HashSet;

use sqlx::postgres::PgPool;

use crate::error::{Error, Result};
use crate::letter::Letter;

/// The journal on the store's database.
#[derive(Debug, Clone)]
pub struct Journal {
    pool: PgPool,
}

/// The advisory lock class of replays ("cr" for consumer replay).
const REPLAY_LOCK: i32 = 0x6372;

const DDL: &str = "CREATE TABLE IF NOT EXISTS consumer_replay_journal (\
     letter_id  TEXT        PRIMARY KEY, \
     handler    TEXT        NOT NULL, \
     message_id TEXT        NOT NULL, \
     route      TEXT        NOT NULL, \
     sent_at    TIMESTAMPTZ NOT NULL DEFAULT now())";

impl Journal {
    /// The journal, its table created if missing (`create`); a dry run
    /// reads without creating it.
    pub async fn open(pool: PgPool, create: bool) -> Result<Self> {
        if create {
            sqlx::query(DDL).execute(&pool).await?;
        }
        Ok(Self { pool })
    }

    /// Holds the store's replay lock (a session advisory lock, one per
    /// schema) for as long as the returned connection lives; it is taken
    /// out of the pool, so dropping it closes the session and frees the
    /// lock. Two replays on one store at once would each send what the
    /// other has not journaled yet.
    pub async fn lock(&self) -> Result<sqlx::PgConnection> {
        let mut conn = self.pool.acquire().await?.detach();
        let got: bool =
            sqlx::query_scalar("SELECT pg_try_advisory_lock($1, hashtext(current_schema()))")
                .bind(REPLAY_LOCK)
                .fetch_one(&mut conn)
                .await?;
        if !got {
            return Err(Error::Refused(
                "another replay is running on this store; wait for it (or stop it) and run again"
                    .into(),
            ));
        }
        Ok(conn)
    }

    /// Whether the journal's table exists (a dry run does not create it).
    async fn exists(&self) -> Result<bool> {
        let exists: Option<String> =
            sqlx::query_scalar("SELECT to_regclass('consumer_replay_journal')::text")
                .fetch_one(&self.pool)
                .await?;
        Ok(exists.is_some())
    }

    /// Whether an earlier replay sent `letter`.
    pub async fn was_sent(&self, letter: &Letter) -> Result<bool> {
        if !self.exists().await? {
            return Ok(false);
        }
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM consumer_replay_journal WHERE letter_id = $1)",
        )
        .bind(&letter.id)
        .fetch_one(&self.pool)
        .await?)
    }

    /// The ids of every letter a replay sent (`list` on a Kafka topic,
    /// where a replayed letter stays, marks them).
    pub async fn sent_ids(&self) -> Result<HashSet<String>> {
        if !self.exists().await? {
            return Ok(HashSet::new());
        }
        let ids: Vec<String> = sqlx::query_scalar("SELECT letter_id FROM consumer_replay_journal")
            .fetch_all(&self.pool)
            .await?;
        Ok(ids.into_iter().collect())
    }

    /// Records that `letter` went to `route` (its copy confirmed).
    pub async fn record(&self, letter: &Letter, route: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO consumer_replay_journal (letter_id, handler, message_id, route) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (letter_id) DO NOTHING",
        )
        .bind(&letter.id)
        .bind(&letter.letter.handler)
        .bind(&letter.letter.message_id)
        .bind(route)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
