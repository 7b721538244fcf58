//! Sizes the house keeps: no library function over [`MAX_FUNCTION_LINES`]
//! lines in any crate, no file of core over [`MAX_CORE_FILE_LINES`], and
//! core's library code under [`MAX_CORE_CODE_LINES`] lines. Read from the
//! source with a small lexer (strings, characters and comments skipped), so
//! a rule broken by a change fails here rather than in a later review.

use std::path::{Path, PathBuf};

/// The longest a library function may be, signature to closing brace.
pub const MAX_FUNCTION_LINES: usize = 80;

/// The longest a file of core may be, its test module left out.
pub const MAX_CORE_FILE_LINES: usize = 600;

/// The most code lines core's library may hold (no comments, no blank
/// lines, no tests).
pub const MAX_CORE_CODE_LINES: usize = 16_000;

/// A library file's text before its test module (`#[cfg(test)]` at the
/// start of a line: the house puts tests last), or `None` for a file of
/// tests.
pub fn library_text(path: &Path) -> Option<String> {
    if path.file_name().is_some_and(|n| n == "tests.rs")
        || path.components().any(|c| c.as_os_str() == "tests")
    {
        return None;
    }
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let end = text
        .match_indices("\n#[cfg(test)]")
        .next()
        .map_or(text.len(), |(at, _)| at + 1);
    Some(text[..end].to_owned())
}

/// `text` with every string, character literal and comment blanked out
/// (newlines kept), so braces and `fn` are only code's.
pub fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, s: &[u8]| {
        out.extend(s.iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }));
    };
    while i < b.len() {
        let rest = &b[i..];
        let end = if rest.starts_with(b"//") {
            rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len())
        } else if rest.starts_with(b"/*") {
            rest.windows(2)
                .position(|w| w == b"*/")
                .map_or(rest.len(), |p| p + 2)
        } else if let Some(len) = raw_string(rest) {
            len
        } else if rest[0] == b'"' {
            string_end(rest)
        } else if rest[0] == b'\'' {
            char_end(rest)
        } else {
            out.push(rest[0]);
            i += 1;
            continue;
        };
        blank(&mut out, &rest[..end]);
        i += end;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The length of a raw string (`r"…"`, `r#"…"#`, `br#"…"#`) at the start.
fn raw_string(s: &[u8]) -> Option<usize> {
    let start = if s.starts_with(b"br") {
        2
    } else if s.starts_with(b"r") {
        1
    } else {
        return None;
    };
    let hashes = s[start..].iter().take_while(|&&c| c == b'#').count();
    if s.get(start + hashes) != Some(&b'"') {
        return None;
    }
    let mut close = vec![b'"'];
    close.extend(std::iter::repeat_n(b'#', hashes));
    let body = start + hashes + 1;
    s[body..]
        .windows(close.len())
        .position(|w| w == close.as_slice())
        .map(|p| body + p + close.len())
}

/// The length of a string literal at the start, escapes honoured.
fn string_end(s: &[u8]) -> usize {
    let mut i = 1;
    while i < s.len() {
        match s[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    s.len()
}

/// The length of a character literal at the start; a lifetime (`'a`) is
/// one byte, left as code.
fn char_end(s: &[u8]) -> usize {
    if s.get(1) == Some(&b'\\') {
        return s[2..].iter().position(|&c| c == b'\'').map_or(1, |p| p + 3);
    }
    // 'x' (a char of up to four bytes), else a lifetime.
    (2..=5)
        .find(|&k| {
            s.get(k) == Some(&b'\'')
                && std::str::from_utf8(&s[1..k]).is_ok_and(|c| c.chars().count() == 1)
        })
        .map_or(1, |k| k + 1)
}

/// Each function with a body in `code` (see [`code_only`]): its name, first
/// line (1-based) and length in lines, signature to closing brace.
pub fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let b = code.as_bytes();
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut search = 0;
    while let Some(found) = code[search..].find("fn ") {
        let at = search + found;
        search = at + 3;
        let word_start = at == 0 || !(b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_');
        if !word_start {
            continue;
        }
        let name: String = code[at + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue; // `fn(` types
        }
        // The body's brace, or the `;` of a declaration, at the
        // signature's own depth (generics and where-clauses hold no `{`).
        let Some(open) = code[at..].find(['{', ';']).map(|p| at + p) else {
            break;
        };
        if b[open] == b';' {
            continue;
        }
        let mut depth = 0usize;
        let mut close = open;
        for (k, &c) in b[open..].iter().enumerate() {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = open + k;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push((name, line_of(at), line_of(close) - line_of(at) + 1));
    }
    out
}

/// Every crate's library sources: `src/` of the facade and of each
/// `consumer-*` directory.
pub fn library_dirs(workspace: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![workspace.join("src")];
    let mut crates: Vec<PathBuf> = std::fs::read_dir(workspace)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("consumer-"))
                        && p.join("src").is_dir()
                })
                .map(|p| p.join("src"))
                .collect()
        })
        .unwrap_or_default();
    crates.sort();
    dirs.extend(crates);
    dirs
}

#[test]
fn the_lexer_counts_code_and_skips_what_is_not() {
    let text = "fn a() {\n    let s = \"}\";\n    let c = '{';\n    // }\n}\nfn b(x: &'static str);\nfn c<'a>(x: &'a str) -> fn() {\n    r#\"}\"#;\n}\n";
    let found = functions(&code_only(text));
    assert_eq!(
        found,
        [("a".to_owned(), 1, 5), ("c".to_owned(), 7, 3)],
        "a's body spans five lines whatever its strings hold; b is a declaration"
    );
}
