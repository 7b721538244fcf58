//! [`Tx`]: the handler's transaction, holding its dedup row.

use std::ops::{Deref, DerefMut};

use sqlx::Database;

use crate::error::Error;

/// The handler's transaction. It already holds the dedup row of the message
/// being handled, and only the framework can create one, so business writes
/// made through it commit if and only if the dedup row does.
///
/// Use it wherever sqlx wants a connection: `query.execute(&mut **tx)`.
#[derive(Debug)]
pub struct Tx<DB: Database> {
    pub(super) inner: sqlx::Transaction<'static, DB>,
}

/// A handler transaction on PostgreSQL.
#[cfg(feature = "postgres")]
pub type PgTx = Tx<sqlx::Postgres>;
/// A handler transaction on SQLite.
#[cfg(feature = "sqlite")]
pub type SqliteTx = Tx<sqlx::Sqlite>;

impl<DB: Database> Tx<DB> {
    /// Commits business writes and the dedup row together.
    pub async fn commit(self) -> Result<(), Error> {
        Ok(self.inner.commit().await?)
    }

    /// Rolls everything back, the dedup row included.
    pub async fn rollback(self) -> Result<(), Error> {
        Ok(self.inner.rollback().await?)
    }
}

impl<DB: Database> Deref for Tx<DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &Self::Target {
        &self.inner
    }
}

impl<DB: Database> DerefMut for Tx<DB> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.inner
    }
}
