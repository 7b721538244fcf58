//! [`Statement`]: a statement written once, rendered once per database.

use std::sync::OnceLock;

use sqlx::{SqlSafeStr, SqlStr};

use super::{Dialect, render};

/// A statement written once in the seam's syntax (see the
/// [module](super)), kept in a `static` and rendered the first time each
/// database runs it:
///
/// ```ignore
/// static CLEAR: Statement =
///     Statement::new("DELETE FROM consumer_attempts WHERE handler = $1 AND message_id = $2");
/// DB::execute(conn, CLEAR.sql::<DB>(), args![handler, message_id]).await?;
/// ```
#[derive(Debug)]
pub struct Statement {
    template: &'static str,
    rendered: [OnceLock<String>; 2],
}

impl Statement {
    /// A statement from its template.
    pub const fn new(template: &'static str) -> Self {
        Self {
            template,
            rendered: [OnceLock::new(), OnceLock::new()],
        }
    }

    /// Its text for `DB`, rendered on first use.
    pub fn sql<DB: Dialect>(&'static self) -> SqlStr {
        self.rendered[DB::SLOT]
            .get_or_init(|| render::<DB>(self.template))
            .as_str()
            .into_sql_str()
    }

    /// The template, as written.
    pub fn template(&self) -> &'static str {
        self.template
    }
}
