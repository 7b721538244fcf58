//! The dialect of PostgreSQL: `timestamptz` times, `jsonb` and `uuid`
//! casts and text without NUL.

use std::future::Future;

use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use sqlx::{PgConnection, Pool, Postgres, Row, SqlStr};

use super::dialect::{sealed, through_sqlx};
use super::{Arg, Dialect, Migrations, storable};
use crate::error::Error;

impl sealed::Sealed for Postgres {}

fn bind<'q>(
    mut query: Query<'q, Postgres, PgArguments>,
    args: &[Arg<'_>],
) -> Query<'q, Postgres, PgArguments> {
    for arg in args {
        query = match *arg {
            Arg::Text(s) => query.bind(storable(s)),
            Arg::MaybeText(s) => query.bind(s.map(storable)),
            Arg::Int(n) => query.bind(n),
            Arg::MaybeInt(n) => query.bind(n),
            Arg::Bytes(b) => query.bind(b),
            Arg::Bool(b) => query.bind(b),
        };
    }
    query
}

impl Dialect for Postgres {
    const SYSTEM: &'static str = "postgresql";
    const SLOT: usize = 0;

    fn token(name: &str, arg: &str, out: &mut String) -> bool {
        match name {
            "now" => out.push_str("now()"),
            "at" => {
                out.push_str("to_timestamp(");
                out.push_str(arg);
                out.push_str("::double precision / 1000)");
            }
            "ms" => {
                out.push_str("(extract(epoch FROM ");
                out.push_str(arg);
                out.push_str(") * 1000)::bigint");
            }
            "skip_locked" => out.push_str("FOR UPDATE SKIP LOCKED"),
            "later" => {
                out.push_str("now() + (");
                out.push_str(arg);
                out.push_str("::bigint * interval '1 millisecond')");
            }
            _ => return false,
        }
        true
    }

    fn cast(_expr: &str, token: &str, out: &mut String) {
        out.push_str(token);
    }

    through_sqlx!(PgConnection, PgRow, postgres);

    fn int(row: &PgRow, i: usize) -> Result<Option<i64>, sqlx::Error> {
        match row.try_get::<Option<i64>, _>(i) {
            Err(sqlx::Error::ColumnDecode { .. }) => {
                Ok(row.try_get::<Option<i32>, _>(i)?.map(i64::from))
            }
            read => read,
        }
    }
}
