//! The SQL seam: what differs between the databases the runtime's tables
//! live in, in one sealed trait ([`Dialect`], implemented once for
//! PostgreSQL and once for SQLite), and statements written once against
//! it ([`Statement`]), bound with [`Arg`]s and read back with
//! [`Columns`].
//!
//! A statement is written in PostgreSQL's own syntax, `$1`-style
//! placeholders included (SQLite reads them too), with a token in braces
//! wherever the databases store or compute something differently:
//!
//! | token | PostgreSQL | SQLite | why |
//! |---|---|---|---|
//! | `{now}` | `now()` | the clock in Unix ms | times are `timestamptz` there, integer ms here |
//! | `{at $2}` | `to_timestamp($2::double precision / 1000)` | `$2` | a time given in Unix ms |
//! | `{ms col}` | `(extract(epoch FROM col) * 1000)::bigint` | `col` | a time read back as Unix ms |
//! | `{later $3}` | `now() + ($3::bigint * interval '1 millisecond')` | now + `$3` | `$3` ms from now |
//! | `{skip_locked}` | `FOR UPDATE SKIP LOCKED` | nothing | a claim's locks: SQLite's single writer already keeps two claims apart |
//! | `{x::type}` | `x::type` | `x` | a cast only PostgreSQL's types need (`jsonb`, `uuid`, `text`) |
//!
//! Text bound on PostgreSQL passes through [`storable`]
//! (it refuses NUL); integers read back widen to `i64` whatever the
//! column's width. What truly differs beyond this (PostgreSQL's
//! `unnest` batch insert, its `SKIP LOCKED` claim) sits in one file per
//! database, beside the part that runs it.
//!
//! The parts built on the runtime (sagas) write their statements here too.

mod arg;
mod columns;
mod dialect;
#[cfg(feature = "postgres")]
mod postgres;
mod render;
#[cfg(feature = "sqlite")]
mod sqlite;
mod statement;
mod text;

pub use arg::Arg;
pub use columns::Columns;
pub use dialect::{Dialect, Migrations};
pub use render::render;
pub use statement::Statement;
pub use text::storable;

/// A time read back as Unix milliseconds (`{ms col}`, or SQLite's
/// integer column) as an `OffsetDateTime`, clamped to what it holds.
pub fn time_from_ms(ms: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).unwrap_or(
        if ms < 0 {
            time::PrimitiveDateTime::MIN.assume_utc()
        } else {
            time::PrimitiveDateTime::MAX.assume_utc()
        },
    )
}

/// A time as the Unix milliseconds a statement binds (`{at $n}`),
/// saturating.
pub fn ms_of(t: time::OffsetDateTime) -> i64 {
    let ms = t.unix_timestamp_nanos() / 1_000_000;
    i64::try_from(ms).unwrap_or(if ms < 0 { i64::MIN } else { i64::MAX })
}

/// The arguments of one statement, in placeholder order:
/// `args![handler, key, 3_i64]` is `&[Arg::from(handler), ...]`.
#[macro_export]
#[doc(hidden)]
macro_rules! __sql_args {
    ($($arg:expr),* $(,)?) => {
        &[$($crate::sql::Arg::from($arg)),*][..]
    };
}
pub use crate::__sql_args as args;
