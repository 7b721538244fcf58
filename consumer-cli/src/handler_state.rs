//! What the handler's store says about a letter's message: committed
//! (its dedup row is there), dead-lettered again, or neither yet.

use std::collections::{HashMap, HashSet};

use consumer_core::PgStore;
use sqlx::postgres::PgPool;

use crate::error::{Error, Result};
use crate::letter::Letter;

/// The store's rows of the handlers.
#[derive(Debug, Clone)]
pub struct HandlerState {
    pool: PgPool,
}

/// Where a replayed message stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The handler committed it.
    Processed,
    /// It was dead-lettered again.
    DeadAgain,
    /// Neither yet.
    Pending,
}

impl HandlerState {
    /// On the store's pool.
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    /// Whether the handler committed the letter's message: a dedup row of
    /// the handler with its message id. A letter whose idempotency key was
    /// committed by *another* message is not seen here; the handler's dedup
    /// absorbs its replay.
    pub async fn processed(&self, letter: &Letter) -> Result<bool> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM consumer_processed WHERE handler = $1 AND message_id = $2)",
        )
        .bind(&letter.letter.handler)
        .bind(&letter.letter.message_id)
        .fetch_one(&self.pool)
        .await?)
    }

    /// Which of `letters` the handlers committed, in one statement per
    /// handler: the dedup table is keyed by handler and idempotency key, not
    /// message id, so each statement reads the handler's rows once (not
    /// once per letter).
    pub async fn processed_among(&self, letters: &[&Letter]) -> Result<HashSet<String>> {
        let mut by_handler: HashMap<&str, Vec<&str>> = HashMap::new();
        for l in letters {
            by_handler
                .entry(l.letter.handler.as_str())
                .or_default()
                .push(l.letter.message_id.as_str());
        }
        let mut done = HashSet::new();
        for (handler, ids) in by_handler {
            let found: Vec<String> = sqlx::query_scalar(
                "SELECT message_id FROM consumer_processed WHERE handler = $1 AND message_id = ANY($2)",
            )
            .bind(handler)
            .bind(&ids)
            .fetch_all(&self.pool)
            .await?;
            done.extend(found.into_iter().map(|id| format!("{handler}\0{id}")));
        }
        Ok(done)
    }

    /// Forgets the message's attempts and its dead-letter mark, so the
    /// replay starts from attempt one and, if it fails again, is
    /// dead-lettered again (instead of being acked as an old dead letter).
    pub async fn reset_attempts(&self, letter: &Letter) -> Result<()> {
        PgStore::new(self.pool.clone())
            .clear_failures(&letter.letter.handler, &letter.letter.message_id)
            .await
            .map_err(|e| Error::Other(format!("resetting the attempts of {}: {e}", letter.id)))
    }

    /// Where the replay of `letter` stands.
    pub async fn outcome(&self, letter: &Letter) -> Result<Outcome> {
        if self.processed(letter).await? {
            return Ok(Outcome::Processed);
        }
        let dead: Option<bool> = sqlx::query_scalar(
            "SELECT dead_lettered_at IS NOT NULL FROM consumer_attempts WHERE handler = $1 AND message_id = $2",
        )
        .bind(&letter.letter.handler)
        .bind(&letter.letter.message_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(if dead == Some(true) {
            Outcome::DeadAgain
        } else {
            Outcome::Pending
        })
    }

    /// Whether any row of the store names `handler`.
    pub async fn knows(&self, handler: &str) -> Result<bool> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM consumer_processed WHERE handler = $1) \
             OR EXISTS (SELECT 1 FROM consumer_attempts WHERE handler = $1)",
        )
        .bind(handler)
        .fetch_one(&self.pool)
        .await?)
    }
}
