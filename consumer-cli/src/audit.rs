//! The console's audit log: one row per action taken through it, in the
//! store's database (`consumer_console_audit`).
//!
//! A table, not a file: it lives beside the replay journal it explains,
//! survives the console's restarts and machines, is shared by every
//! console on the store, and is read back with SQL (or the console's audit
//! page). An action is written when requested and again when it ended, so
//! one that crashed the console still shows that it was asked for.

use consumer_console::operator::AuditEntry;
use sqlx::postgres::PgPool;
use time::OffsetDateTime;

use crate::database;
use crate::error::Result;

const DDL: &str = "CREATE TABLE IF NOT EXISTS consumer_console_audit (\
     id      BIGSERIAL   PRIMARY KEY, \
     at      TIMESTAMPTZ NOT NULL DEFAULT now(), \
     actor   TEXT        NOT NULL, \
     action  TEXT        NOT NULL, \
     target  TEXT        NOT NULL, \
     outcome TEXT        NOT NULL)";

/// The audit log on the store's database.
#[derive(Debug, Clone)]
pub struct AuditLog {
    pool: PgPool,
}

impl AuditLog {
    /// The log, its table created if missing.
    pub async fn open(pool: PgPool) -> Result<Self> {
        sqlx::query(DDL)
            .execute(&pool)
            .await
            .map_err(|e| database::explain(e, "consumer_console_audit"))?;
        Ok(Self { pool })
    }

    /// Appends `entry` (its time is the database's).
    pub async fn write(&self, entry: &AuditEntry) -> Result<()> {
        sqlx::query(
            "INSERT INTO consumer_console_audit (actor, action, target, outcome) VALUES ($1, $2, $3, $4)",
        )
        .bind(&entry.actor)
        .bind(&entry.action)
        .bind(&entry.target)
        .bind(&entry.outcome)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The latest `limit` entries, newest first.
    pub async fn latest(&self, limit: u32) -> Result<Vec<AuditEntry>> {
        let rows: Vec<(i64, String, String, String, String)> = sqlx::query_as(
            "SELECT (EXTRACT(EPOCH FROM at) * 1000)::bigint, actor, action, target, outcome \
             FROM consumer_console_audit ORDER BY id DESC LIMIT $1",
        )
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(ms, actor, action, target, outcome)| AuditEntry {
                at: OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok(),
                actor,
                action,
                target,
                outcome,
            })
            .collect())
    }
}
