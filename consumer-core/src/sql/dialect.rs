//! [`Dialect`]: what differs between the supported databases, sealed.

use std::future::Future;

use sqlx::migrate::Migrator;
use sqlx::{Pool, SqlStr};

use super::Arg;
use crate::error::Error;

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// A part's migrations, one directory per database (`sqlx::migrate!` of
/// each), tracked in their own table; [`Dialect::migrate`] runs its own.
#[derive(Debug)]
pub struct Migrations {
    /// The PostgreSQL directory's.
    pub postgres: Migrator,
    /// The SQLite directory's.
    pub sqlite: Migrator,
    /// The table that records which ran.
    pub table: &'static str,
    /// Whether versions recorded but no longer in the directory are fine
    /// (a part that moved out, leaving its versions behind).
    pub ignore_missing: bool,
}

/// A database the runtime's tables live in: PostgreSQL or SQLite. Sealed:
/// the SQL is this crate's to keep correct. It says how each token of a
/// [`Statement`](super::Statement) is written, and runs statements with
/// [`Arg`]s, so that everything above it is written once.
pub trait Dialect: sqlx::Database + sealed::Sealed {
    /// `db.system.name` for metrics and spans: `postgresql`, `sqlite`.
    const SYSTEM: &'static str;

    /// Where a [`Statement`](super::Statement) keeps its text for this
    /// database (0: PostgreSQL, 1: SQLite).
    const SLOT: usize;

    /// Writes token `name` with its argument (`{at $2}`: `at`, `$2`) to
    /// `out`; `false` when it is not a token.
    fn token(name: &str, arg: &str, out: &mut String) -> bool;

    /// Writes `{expr::type}` (`token`, whole) to `out`: the cast, or the
    /// bare expression where the database has no such type.
    fn cast(expr: &str, token: &str, out: &mut String);

    /// Runs `sql` with `args` (bound before it returns: the future holds
    /// only the connection); how many rows it touched.
    fn execute<'c>(
        conn: &'c mut Self::Connection,
        sql: SqlStr,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + use<'c, Self>;

    /// Runs `sql` with `args`; its rows.
    fn fetch_all<'c>(
        conn: &'c mut Self::Connection,
        sql: SqlStr,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<Vec<Self::Row>, sqlx::Error>> + Send + use<'c, Self>;

    /// Runs `sql` with `args`; its first row, if any.
    fn fetch_optional<'c>(
        conn: &'c mut Self::Connection,
        sql: SqlStr,
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<Option<Self::Row>, sqlx::Error>> + Send + use<'c, Self>;

    /// Column `i` of `row` as an integer (`NULL`: `None`), whatever its width.
    fn int(row: &Self::Row, i: usize) -> Result<Option<i64>, sqlx::Error>;

    /// Column `i` of `row` as text (`NULL`: `None`).
    fn text(row: &Self::Row, i: usize) -> Result<Option<String>, sqlx::Error>;

    /// Column `i` of `row` as bytes (`NULL`: `None`).
    fn bytes(row: &Self::Row, i: usize) -> Result<Option<Vec<u8>>, sqlx::Error>;

    /// Column `i` of `row` as a truth value (`NULL`: `None`).
    fn boolean(row: &Self::Row, i: usize) -> Result<Option<bool>, sqlx::Error>;

    /// Runs this database's directory of `migrations`.
    fn migrate(
        pool: &Pool<Self>,
        migrations: Migrations,
    ) -> impl Future<Output = Result<(), Error>> + Send;
}

/// The [`Dialect`] items that differ between the databases only in their
/// connection, row and migration directory: running a statement through
/// sqlx with the database's `bind`, reading a column, migrating.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
macro_rules! through_sqlx {
    ($conn:ty, $row:ty, $migrations:ident) => {
        fn execute<'c>(
            conn: &'c mut $conn,
            sql: SqlStr,
            args: &[Arg<'_>],
        ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + use<'c> {
            let query = bind(sqlx::query(sql), args);
            async move { Ok(query.execute(conn).await?.rows_affected()) }
        }

        fn fetch_all<'c>(
            conn: &'c mut $conn,
            sql: SqlStr,
            args: &[Arg<'_>],
        ) -> impl Future<Output = Result<Vec<$row>, sqlx::Error>> + Send + use<'c> {
            bind(sqlx::query(sql), args).fetch_all(conn)
        }

        fn fetch_optional<'c>(
            conn: &'c mut $conn,
            sql: SqlStr,
            args: &[Arg<'_>],
        ) -> impl Future<Output = Result<Option<$row>, sqlx::Error>> + Send + use<'c> {
            bind(sqlx::query(sql), args).fetch_optional(conn)
        }

        fn text(row: &$row, i: usize) -> Result<Option<String>, sqlx::Error> {
            row.try_get(i)
        }

        fn bytes(row: &$row, i: usize) -> Result<Option<Vec<u8>>, sqlx::Error> {
            row.try_get(i)
        }

        fn boolean(row: &$row, i: usize) -> Result<Option<bool>, sqlx::Error> {
            row.try_get(i)
        }

        async fn migrate(pool: &Pool<Self>, migrations: Migrations) -> Result<(), Error> {
            let mut migrator = migrations.$migrations;
            migrator.dangerous_set_table_name(migrations.table);
            migrator.set_ignore_missing(migrations.ignore_missing);
            migrator.run(pool).await?;
            Ok(())
        }
    };
}
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(super) use through_sqlx;
