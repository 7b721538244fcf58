//! A PostgreSQL schema of its own for each test or benchmark run.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

/// The PostgreSQL tests and benchmarks use: `DATABASE_URL`, by default
/// `postgres://postgres@127.0.0.1:5432/test`.
pub fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A service a test needs did not answer; the message names it and how to
/// start it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ServiceUnavailable(String);

/// A fresh schema (`<prefix>_<uuid>`), with a pool whose connections use
/// it, and the store's migrations run in it. `scripts/services postgres`
/// drops the schemas earlier runs left (prefixes `ct_` and `bench_`).
#[derive(Debug, Clone)]
pub struct FreshSchema {
    /// The pool, `search_path` set to the schema.
    pub pool: PgPool,
    /// The schema's name.
    pub schema: String,
    /// The server it is on.
    url: String,
}

impl FreshSchema {
    /// Creates the schema on [`database_url`] and a pool of `max`
    /// connections on it, and runs the store's migrations there.
    pub async fn create(prefix: &str, max: u32) -> Result<Self, ServiceUnavailable> {
        Self::create_at(&database_url(), prefix, max).await
    }

    /// [`FreshSchema::create`] on the server at `url` (a test's private
    /// server) instead of [`database_url`].
    pub async fn create_at(url: &str, prefix: &str, max: u32) -> Result<Self, ServiceUnavailable> {
        let url = url.to_owned();
        let unreachable = |e: &dyn std::fmt::Display| {
            ServiceUnavailable(format!(
                "PostgreSQL is not reachable at {url} ({e}): start it (scripts/services postgres does) or set DATABASE_URL"
            ))
        };
        // A time-ordered id: the name says when the schema was made, so a
        // sweep can drop what earlier runs left (`scripts/services postgres`).
        let schema = format!("{prefix}_{}", uuid::Uuid::now_v7().simple());
        let admin = PgPool::connect(&url).await.map_err(|e| unreachable(&e))?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
            .execute(&admin)
            .await
            .map_err(|e| unreachable(&e))?;
        admin.close().await;
        let pool = Self::pool_at(&url, &schema, max)
            .await
            .map_err(|e| unreachable(&e))?;
        crate::Store::new(pool.clone())
            .migrate()
            .await
            .map_err(|e| ServiceUnavailable(format!("migrating schema {schema} failed: {e}")))?;
        Ok(Self { pool, schema, url })
    }

    /// Another pool on an existing schema (a child process, a proxy).
    pub async fn pool_on(schema: &str, max: u32) -> Result<PgPool, sqlx::Error> {
        Self::pool_at(&database_url(), schema, max).await
    }

    /// [`FreshSchema::pool_on`] on the server at `url` (a private server,
    /// or a link proxy in front of one).
    pub async fn pool_at(url: &str, schema: &str, max: u32) -> Result<PgPool, sqlx::Error> {
        Self::pool_with(options_at(url, schema)?, max).await
    }

    /// A pool of `max` connections with `options` (from
    /// [`FreshSchema::connect_options`], with settings of the caller's).
    pub async fn pool_with(options: PgConnectOptions, max: u32) -> Result<PgPool, sqlx::Error> {
        PgPoolOptions::new()
            .max_connections(max)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await
    }

    /// Connection options on the schema's server that use this schema.
    pub fn connect_options(&self) -> Result<PgConnectOptions, sqlx::Error> {
        options_at(&self.url, &self.schema)
    }

    /// Drops the schema and everything in it, and closes the pool.
    pub async fn drop_schema(self) -> Result<(), sqlx::Error> {
        self.pool.close().await;
        let admin = PgPool::connect(&self.url).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA {} CASCADE",
            self.schema
        )))
        .execute(&admin)
        .await?;
        admin.close().await;
        Ok(())
    }
}

fn options_at(url: &str, schema: &str) -> Result<PgConnectOptions, sqlx::Error> {
    Ok(PgConnectOptions::from_str(url)?.options([("search_path", schema)]))
}
