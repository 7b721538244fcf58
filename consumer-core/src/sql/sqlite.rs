//! The dialect of SQLite: times as integer Unix milliseconds, dynamic
//! types (PostgreSQL's casts dropped).

use std::future::Future;

use sqlx::query::Query;
use sqlx::sqlite::{SqliteArguments, SqliteRow};
use sqlx::{Pool, Row, SqlStr, Sqlite, SqliteConnection};

use super::dialect::{sealed, through_sqlx};
use super::{Arg, Dialect, Migrations};
use crate::error::Error;

impl sealed::Sealed for Sqlite {}

/// The clock in Unix milliseconds; one value for every use in a statement
/// (SQLite reads the clock once per step).
const NOW_MS: &str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";

fn bind<'q>(
    mut query: Query<'q, Sqlite, SqliteArguments>,
    args: &[Arg<'_>],
) -> Query<'q, Sqlite, SqliteArguments> {
    for arg in args {
        query = match *arg {
            Arg::Text(s) => query.bind(s),
            Arg::MaybeText(s) => query.bind(s),
            Arg::Int(n) => query.bind(n),
            Arg::MaybeInt(n) => query.bind(n),
            Arg::Bytes(b) => query.bind(b),
            Arg::Bool(b) => query.bind(b),
        };
    }
    query
}

impl Dialect for Sqlite {
    const SYSTEM: &'static str = "sqlite";
    const SLOT: usize = 1;

    fn token(name: &str, arg: &str, out: &mut String) -> bool {
        match name {
            "now" => out.push_str(NOW_MS),
            "at" | "ms" => out.push_str(arg),
            // One writer at a time: what it reads cannot be claimed by
            // another before it writes.
            "skip_locked" => {}
            "later" => {
                out.push('(');
                out.push_str(NOW_MS);
                out.push_str(" + ");
                out.push_str(arg);
                out.push(')');
            }
            _ => return false,
        }
        true
    }

    fn cast(expr: &str, _token: &str, out: &mut String) {
        out.push_str(expr);
    }

    through_sqlx!(SqliteConnection, SqliteRow, sqlite);

    fn int(row: &SqliteRow, i: usize) -> Result<Option<i64>, sqlx::Error> {
        row.try_get(i)
    }
}
