//! What the PostgreSQL write benches (`dedup`, `batch`) share, so their
//! figures compare: the payment each message carries, the business
//! `INSERT` every side runs, the `#[handler]` that runs it in the dedup
//! transaction, a fresh schema with the payments table and a warm pool, and
//! what one run measures.

#![allow(dead_code)]

use std::time::Duration;

use consumer::testing::FreshSchema;
use consumer::{PgTx, handler};
use sqlx::PgPool;

/// The topic the payments are published to.
pub const TOPIC: &str = "payments";

/// The business write, the same on every side.
pub const BUSINESS_SQL: &str =
    "INSERT INTO payments (id, account, seq, cents) VALUES ($1, $2, $3, $4)";

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Payment {
    pub id: String,
    pub account: String,
    pub seq: i64,
    pub cents: i64,
}

/// Writes `payment` in `tx`.
pub async fn insert(payment: &Payment, tx: &mut PgTx) -> Result<(), sqlx::Error> {
    sqlx::query(BUSINESS_SQL)
        .bind(&payment.id)
        .bind(&payment.account)
        .bind(payment.seq)
        .bind(payment.cents)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// The framework's side, one message at a time: the claim, then the
/// business write, in one transaction.
#[handler(idempotency_key = payment.id, retry = none)]
pub async fn record(payment: Payment, tx: &mut PgTx) -> Result<(), sqlx::Error> {
    insert(&payment, tx).await
}

/// What one run took.
pub struct Measurement {
    pub wall: Duration,
    /// Process CPU time (`cpu_time::ProcessTime`).
    pub cpu: Duration,
}

/// A fresh schema with the store's tables and the business table.
pub struct Schema {
    pub fresh: FreshSchema,
    pub pool: PgPool,
}

impl Schema {
    /// The schema, with a pool of `connections` all opened, so no side
    /// pays for connecting.
    pub async fn create(connections: u32) -> anyhow::Result<Self> {
        Self::create_named("bench", connections).await
    }

    /// [`Schema::create`], the schema's name starting with `prefix`.
    pub async fn create_named(prefix: &str, connections: u32) -> anyhow::Result<Self> {
        let fresh = FreshSchema::create(prefix, connections).await?;
        let pool = fresh.pool.clone();
        sqlx::query(
            "CREATE TABLE payments (id TEXT PRIMARY KEY, account TEXT NOT NULL, \
             seq BIGINT NOT NULL, cents BIGINT NOT NULL)",
        )
        .execute(&pool)
        .await?;
        let mut held = Vec::new();
        for _ in 0..connections {
            held.push(pool.acquire().await?);
        }
        drop(held);
        Ok(Self { fresh, pool })
    }

    /// Fails unless `n` payments were written, each with its dedup row.
    pub async fn check(&self, n: usize) -> anyhow::Result<()> {
        let (claims, rows): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM consumer_processed), (SELECT count(*) FROM payments)",
        )
        .fetch_one(&self.pool)
        .await?;
        if claims != i64::try_from(n)? || rows != claims {
            anyhow::bail!("expected {n} dedup rows and {n} payments, found {claims} and {rows}");
        }
        Ok(())
    }

    pub async fn drop_schema(self) -> anyhow::Result<()> {
        Ok(self.fresh.drop_schema().await?)
    }
}
