//! The connection to the handlers' store, on the schema the flags name.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::args::Services;
use crate::error::{Error, Result, redact};

/// A small pool on the store, with the TLS and password flags, or an error
/// naming PostgreSQL and its address. Checks the connection once, so an
/// unreachable database, or one that refuses the certificates or the
/// password, is reported before any work starts.
pub async fn connect(services: &Services) -> Result<PgPool> {
    let unreachable = |e: &dyn std::fmt::Display| Error::Unreachable {
        service: "PostgreSQL",
        address: redact(&services.database_url),
        reason: e.to_string(),
        hint: "--database-url or DATABASE_URL",
    };
    let mut options = PgConnectOptions::from_str(&services.database_url).map_err(|e| {
        Error::Usage(format!(
            "--database-url {} is not a PostgreSQL URL: {e}",
            redact(&services.database_url)
        ))
    })?;
    if let Some(schema) = &services.schema {
        options = options.options([("search_path", schema.as_str())]);
    }
    let options = crate::security::postgres(services, options)?;
    PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(options)
        .await
        .map_err(|e| {
            crate::security::postgres_refusal(&e, &redact(&services.database_url))
                .unwrap_or_else(|| unreachable(&e))
        })
}

/// `e`, or, when `table` is missing, a sentence saying where to look.
/// A store call's error, its database failure explained on `table`.
pub fn explain_store(e: consumer_core::Error, table: &str) -> Error {
    match e {
        consumer_core::Error::Database(db) => explain(db, table),
        other => Error::Other(other.to_string()),
    }
}

pub fn explain(e: sqlx::Error, table: &str) -> Error {
    match &e {
        sqlx::Error::Database(db) if db.code().as_deref() == Some("42P01") => {
            Error::Other(format!(
                "table {table} does not exist here: the store's tables are in another schema (set --schema or CONSUMER_SCHEMA) or were never migrated"
            ))
        }
        _ => Error::Database(e),
    }
}
