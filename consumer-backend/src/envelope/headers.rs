//! [`Headers`]: ordered, case-insensitive, byte-valued, shared copy on write.

use std::fmt;

/// Message headers: ordered, duplicates allowed, values are bytes because
/// brokers allow any bytes; accessors say when a value is not text.
///
/// Cloning is a reference-count bump (copy on write): a delivery's headers
/// are shared by the broker's redelivery copy, the envelope, the context and
/// a dead letter without being copied.
///
/// Stored as one flat table (every name and value in a single byte buffer,
/// each preceded by its two lengths), so headers built with
/// [`Headers::with_capacity`] cost two allocations however many there are.
#[derive(Clone, Default)]
pub struct Headers(std::sync::Arc<Table>);

/// Bytes of each of the two lengths stored before a header.
const LEN: usize = size_of::<usize>();

/// The flat table behind [`Headers`].
#[derive(Clone, Default)]
struct Table {
    /// How many headers `bytes` holds.
    count: usize,
    /// Each header in order: its name's length and its value's length
    /// (native-endian `usize`s), the name (UTF-8: appended as a `str`),
    /// the value.
    bytes: Vec<u8>,
}

impl Table {
    fn push(&mut self, name: &str, value: &[u8]) {
        self.bytes.extend_from_slice(&name.len().to_ne_bytes());
        self.bytes.extend_from_slice(&value.len().to_ne_bytes());
        self.bytes.extend_from_slice(name.as_bytes());
        self.bytes.extend_from_slice(value);
        self.count += 1;
    }

    fn iter(&self) -> TableIter<'_> {
        TableIter { rest: &self.bytes }
    }

    /// The table without the headers named `name` (case-insensitively).
    fn without(&self, name: &str) -> Self {
        let keep = || {
            self.iter()
                .filter(|(n, _)| !n.eq_ignore_ascii_case(name.as_bytes()))
        };
        let (count, bytes) = keep().fold((0, 0), |(c, b), (n, v)| (c + 1, b + n.len() + v.len()));
        let mut table = Self {
            count: 0,
            bytes: Vec::with_capacity(bytes + count * 2 * LEN),
        };
        for (n, v) in keep() {
            table.push(name_str(n), v);
        }
        table
    }
}

/// The headers of a [`Table`] in order, as `(name, value)` bytes.
struct TableIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for TableIter<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let (name_len, rest) = self.rest.split_first_chunk::<LEN>()?;
        let (value_len, rest) = rest.split_first_chunk::<LEN>()?;
        let (name, rest) = rest.split_at_checked(usize::from_ne_bytes(*name_len))?;
        let (value, rest) = rest.split_at_checked(usize::from_ne_bytes(*value_len))?;
        self.rest = rest;
        Some((name, value))
    }
}

/// A stored name as text; names are appended as `str`, so this never
/// comes back empty for a non-empty name.
fn name_str(name: &[u8]) -> &str {
    std::str::from_utf8(name).unwrap_or_default()
}

impl Headers {
    /// No headers.
    pub fn new() -> Self {
        Self::default()
    }

    /// No headers yet, with room for `count` of them whose names and values
    /// total `bytes` bytes: appending that much allocates nothing more.
    pub fn with_capacity(count: usize, bytes: usize) -> Self {
        Self(std::sync::Arc::new(Table {
            count: 0,
            bytes: Vec::with_capacity(bytes + count * 2 * LEN),
        }))
    }

    fn table(&mut self) -> &mut Table {
        std::sync::Arc::make_mut(&mut self.0)
    }

    /// Appends a header, keeping any earlier one of the same name.
    pub fn append(&mut self, name: impl AsRef<str>, value: impl AsRef<[u8]>) {
        self.table().push(name.as_ref(), value.as_ref());
    }

    /// Sets a header, replacing every earlier one of the same name.
    pub fn insert(&mut self, name: impl AsRef<str>, value: impl AsRef<[u8]>) {
        let name = name.as_ref();
        self.remove(name);
        self.table().push(name, value.as_ref());
    }

    /// Removes every header of that name.
    pub fn remove(&mut self, name: &str) {
        if self
            .0
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
        {
            let table = self.0.without(name);
            *self.table() = table;
        }
    }

    /// The last value of a header, as bytes (names are case-insensitive).
    pub fn get_bytes(&self, name: &str) -> Option<&[u8]> {
        self.0
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .last()
            .map(|(_, v)| v)
    }

    /// The last value of a header as text; `Err` when it is not UTF-8.
    pub fn get(&self, name: &str) -> Result<Option<&str>, HeaderError> {
        match self.get_bytes(name) {
            None => Ok(None),
            Some(v) => std::str::from_utf8(v).map(Some).map_err(|_| not_utf8(name)),
        }
    }

    /// Iterates over all headers in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.0.iter().map(|(n, v)| (name_str(n), v))
    }

    /// Iterates over all headers in order, names as bytes (no UTF-8 check).
    pub(crate) fn iter_bytes(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.0.iter()
    }

    /// Number of headers.
    pub fn len(&self) -> usize {
        self.0.count
    }

    /// Whether there are no headers.
    pub fn is_empty(&self) -> bool {
        self.0.count == 0
    }
}

pub(super) fn not_utf8(name: &str) -> HeaderError {
    HeaderError {
        name: name.to_owned(),
        reason: "is not valid UTF-8".to_owned(),
    }
}

impl PartialEq for Headers {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
            || (self.len() == other.len() && self.0.iter().eq(other.0.iter()))
    }
}

impl Eq for Headers {}

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.iter().map(|(n, v)| (n, String::from_utf8_lossy(v))))
            .finish()
    }
}

impl<N: AsRef<str>, V: AsRef<[u8]>> Extend<(N, V)> for Headers {
    fn extend<T: IntoIterator<Item = (N, V)>>(&mut self, iter: T) {
        let table = self.table();
        for (n, v) in iter {
            table.push(n.as_ref(), v.as_ref());
        }
    }
}

impl<N: AsRef<str>, V: AsRef<[u8]>> FromIterator<(N, V)> for Headers {
    fn from_iter<T: IntoIterator<Item = (N, V)>>(iter: T) -> Self {
        let mut headers = Self::new();
        headers.extend(iter);
        headers
    }
}

/// A header that is present but unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("header `{name}` {reason}")]
pub struct HeaderError {
    /// The header's name.
    pub name: String,
    /// What is wrong with it.
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_keep_order_duplicates_and_binary_values() {
        let mut h = Headers::with_capacity(4, 32);
        h.append("a", "1");
        h.append("b", [0u8, 0xff]);
        h.append("A", "");
        h.append("c", "3");
        let shared = h.clone();
        h.remove("a");
        let all: Vec<_> = shared.iter().collect();
        assert_eq!(
            all,
            [
                ("a", &b"1"[..]),
                ("b", &[0u8, 0xff][..]),
                ("A", &b""[..]),
                ("c", &b"3"[..])
            ]
        );
        assert_eq!(shared.get("a"), Ok(Some("")), "the last one wins");
        assert!(shared.get("b").is_err());
        assert_eq!(h.len(), 2);
        assert_eq!(h.get_bytes("a"), None);
        let rebuilt: Headers = [("b", &[0u8, 0xff][..]), ("c", b"3")].into_iter().collect();
        assert_eq!(h, rebuilt);
        assert_ne!(h, shared);
    }

    #[test]
    fn insert_replaces_case_insensitively() {
        let mut h = Headers::new();
        h.append("TraceParent", "a");
        h.insert("traceparent", "b");
        assert_eq!(h.len(), 1);
        assert_eq!(h.get("TRACEPARENT"), Ok(Some("b")));
    }
}
