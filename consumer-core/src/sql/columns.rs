//! [`Columns`]: one row read column after column, whichever the database.

use super::Dialect;

/// A row read in its columns' order: each call takes the next column.
///
/// ```ignore
/// let mut c = Columns::<DB>::of(&row);
/// let (attempts, first_ms) = (c.int()?, c.int()?);
/// ```
pub struct Columns<'r, DB: Dialect> {
    row: &'r DB::Row,
    next: usize,
}

impl<DB: Dialect> std::fmt::Debug for Columns<'_, DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Columns").field("next", &self.next).finish()
    }
}

fn not_null(i: usize) -> sqlx::Error {
    sqlx::Error::ColumnDecode {
        index: i.to_string(),
        source: "unexpected NULL".into(),
    }
}

impl<'r, DB: Dialect> Columns<'r, DB> {
    /// `row`, from its first column.
    pub fn of(row: &'r DB::Row) -> Self {
        Self { row, next: 0 }
    }

    /// `row`, from column `first` (those before it read elsewhere).
    pub fn starting_at(row: &'r DB::Row, first: usize) -> Self {
        Self { row, next: first }
    }

    fn take(&mut self) -> usize {
        self.next += 1;
        self.next - 1
    }

    /// The next column, an integer.
    pub fn int(&mut self) -> Result<i64, sqlx::Error> {
        let i = self.take();
        DB::int(self.row, i)?.ok_or_else(|| not_null(i))
    }

    /// The next column, an integer or `NULL`.
    pub fn maybe_int(&mut self) -> Result<Option<i64>, sqlx::Error> {
        DB::int(self.row, self.take())
    }

    /// The next column, text.
    pub fn text(&mut self) -> Result<String, sqlx::Error> {
        let i = self.take();
        DB::text(self.row, i)?.ok_or_else(|| not_null(i))
    }

    /// The next column, text or `NULL`.
    pub fn maybe_text(&mut self) -> Result<Option<String>, sqlx::Error> {
        DB::text(self.row, self.take())
    }

    /// The next column, bytes.
    pub fn bytes(&mut self) -> Result<Vec<u8>, sqlx::Error> {
        let i = self.take();
        DB::bytes(self.row, i)?.ok_or_else(|| not_null(i))
    }

    /// The next column, a truth value.
    pub fn boolean(&mut self) -> Result<bool, sqlx::Error> {
        let i = self.take();
        DB::boolean(self.row, i)?.ok_or_else(|| not_null(i))
    }
}
