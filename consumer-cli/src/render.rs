//! Tables for people: aligned columns, long cells cut with `…`.

use std::fmt::Write as _;

/// Cells wider than this are cut.
const MAX_CELL: usize = 60;

/// A table with a header row.
#[derive(Debug)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
    pub fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (one cell per column; line breaks become spaces).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells.into_iter().map(|c| cut(&c)).collect());
    }

    /// The table as text, one line per row, columns two spaces apart.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                if let Some(w) = widths.get_mut(i) {
                    *w = (*w).max(cell.chars().count());
                }
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                let width = widths.get(i).copied().unwrap_or(0);
                if i + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    let _ = write!(line, "{cell:<width$}  ");
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

fn cut(cell: &str) -> String {
    let one_line: String = cell
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    if one_line.chars().count() <= MAX_CELL {
        return one_line;
    }
    let mut s: String = one_line.chars().take(MAX_CELL - 1).collect();
    s.push('…');
    s
}

/// `5s`, `3m`, `2h`, `4d`: an age to read at a glance.
pub fn age(seconds: i64) -> String {
    match seconds.max(0) {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// Writes `text` to the tool's output.
pub fn write(out: &mut (impl std::io::Write + ?Sized), text: &str) -> crate::error::Result<()> {
    out.write_all(text.as_bytes())
        .map_err(crate::error::Error::io("writing the output"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_long_cells_are_cut() {
        let mut t = Table::new(&["ID", "ERROR"]);
        t.row(vec!["a".into(), "x".repeat(100)]);
        t.row(vec!["abcdef".into(), "two\nlines".into()]);
        let text = t.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "ID      ERROR");
        assert!(lines[1].starts_with("a       xxx"));
        assert!(lines[1].ends_with('…'));
        assert_eq!(lines[2], "abcdef  two lines");
    }
}
