//! The message as every backend hands it to the runtime, and as publishers send it.
//!
//! Attribute names follow the CloudEvents Kafka binding (`ce_id`, `ce_type`,
//! ...), the binding the in-memory broker also uses. Backends whose protocol
//! has a native field for an attribute (AMQP's `message-id`) map it when they
//! build the [`Envelope`].

use std::fmt;

use bytes::Bytes;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Header names the framework reads and writes.
pub mod names {
    /// CloudEvents `id`.
    pub const ID: &str = "ce_id";
    /// CloudEvents `type`.
    pub const TYPE: &str = "ce_type";
    /// CloudEvents `source`.
    pub const SOURCE: &str = "ce_source";
    /// CloudEvents `subject`.
    pub const SUBJECT: &str = "ce_subject";
    /// CloudEvents `time` (RFC 3339).
    pub const TIME: &str = "ce_time";
    /// CloudEvents `specversion`.
    pub const SPEC_VERSION: &str = "ce_specversion";
    /// CloudEvents `datacontenttype` (binary mode: the `content-type` header).
    pub const CONTENT_TYPE: &str = "content-type";
    /// The partition key when the protocol has no native key.
    pub const PARTITION_KEY: &str = "ce_partitionkey";
    /// Number of the delivery attempt this message is (1 for the first).
    pub const ATTEMPT: &str = "x-consumer-attempt";
    /// When the first attempt failed (RFC 3339), carried across redeliveries.
    pub const FIRST_FAILURE: &str = "x-consumer-first-failure";
    /// W3C trace context.
    pub const TRACEPARENT: &str = "traceparent";
    /// W3C trace state.
    pub const TRACESTATE: &str = "tracestate";
}

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
    fn iter_bytes(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
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

fn not_utf8(name: &str) -> HeaderError {
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

/// Where a message came from: enough to find it again on the broker.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Origin {
    /// Topic, queue or stream the message was consumed from.
    pub destination: String,
    /// Position within it (`partition/offset`, delivery tag, ...).
    pub position: String,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.destination, self.position)
    }
}

/// One delivered message, as the runtime sees it whatever the backend.
///
/// Built with [`Envelope::from_parts`], which never fails: headers that are
/// present but malformed are recorded in [`Envelope::defects`], and the
/// runtime dead-letters such a message on its first attempt instead of
/// guessing.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// CloudEvents `id`; the position on the broker when the producer set none.
    pub id: String,
    /// CloudEvents `type`.
    pub kind: Option<String>,
    /// CloudEvents `source`.
    pub source: Option<String>,
    /// CloudEvents `subject`.
    pub subject: Option<String>,
    /// CloudEvents `time`.
    pub time: Option<OffsetDateTime>,
    /// Partition key: messages with the same key are processed in order.
    pub key: Option<String>,
    /// Every header as received, framework headers included.
    pub headers: Headers,
    /// The body, undecoded.
    pub payload: Bytes,
    /// Which delivery attempt this is (1 for the first).
    pub attempt: u32,
    /// When an earlier attempt first failed, if one did.
    pub first_failure: Option<OffsetDateTime>,
    /// Where it came from.
    pub origin: Origin,
    /// Headers present but malformed; non-empty means poison.
    pub defects: Vec<HeaderError>,
}

impl Envelope {
    /// Reads the CloudEvents attributes and framework headers out of a
    /// received message. `fallback_id` is used when the producer set no
    /// `ce_id`: it must be stable across redeliveries (the broker position).
    pub fn from_parts(
        payload: Bytes,
        headers: Headers,
        key: Option<String>,
        origin: Origin,
        fallback_id: impl FnOnce() -> String,
    ) -> Self {
        // One pass over the headers, each name matched by its length
        // first; the last value of an attribute wins, as with `Headers::get`.
        let mut found: [Option<&[u8]>; Attr::COUNT] = [None; Attr::COUNT];
        for (name, value) in headers.iter_bytes() {
            if let Some(attr) = Attr::of(name) {
                found[attr as usize] = Some(value);
            }
        }
        let mut defects = Vec::new();
        let mut text = |attr: Attr| {
            let value = found[attr as usize]?;
            match std::str::from_utf8(value) {
                Ok(v) => Some(v),
                Err(_) => {
                    defects.push(not_utf8(attr.name()));
                    None
                }
            }
        };
        let id = text(Attr::Id);
        let kind = text(Attr::Type).map(str::to_owned);
        let source = text(Attr::Source).map(str::to_owned);
        let subject = text(Attr::Subject).map(str::to_owned);
        let time_raw = text(Attr::Time);
        let attempt_raw = text(Attr::Attempt);
        let first_failure_raw = text(Attr::FirstFailure);
        let header_key = text(Attr::PartitionKey);

        let time = parse_time(names::TIME, time_raw, &mut defects);
        let first_failure = parse_time(names::FIRST_FAILURE, first_failure_raw, &mut defects);
        let attempt = match attempt_raw {
            None => 1,
            Some(raw) => match raw.trim().parse::<u32>() {
                Ok(n) if n >= 1 => n,
                _ => {
                    defects.push(HeaderError {
                        name: names::ATTEMPT.to_owned(),
                        reason: format!("is not a positive attempt number: {raw:?}"),
                    });
                    1
                }
            },
        };
        let id = match id {
            Some(id) if !id.is_empty() => id.to_owned(),
            Some(_) => {
                defects.push(HeaderError {
                    name: names::ID.to_owned(),
                    reason: "is empty".to_owned(),
                });
                fallback_id()
            }
            None => fallback_id(),
        };
        let key = key.or_else(|| header_key.map(str::to_owned));
        Self {
            id,
            kind,
            source,
            subject,
            time,
            key,
            headers,
            payload,
            attempt,
            first_failure,
            origin,
            defects,
        }
    }
}

/// The attributes [`Envelope::from_parts`] reads, in the order it reports
/// their defects.
#[derive(Clone, Copy)]
enum Attr {
    Id,
    Type,
    Source,
    Subject,
    Time,
    Attempt,
    FirstFailure,
    PartitionKey,
}

impl Attr {
    const COUNT: usize = 8;

    /// Every attribute, in defect order.
    const ALL: [Self; Self::COUNT] = [
        Self::Id,
        Self::Type,
        Self::Source,
        Self::Subject,
        Self::Time,
        Self::Attempt,
        Self::FirstFailure,
        Self::PartitionKey,
    ];

    /// The attribute a header name stands for (case-insensitively):
    /// `eq_ignore_ascii_case` compares lengths first, so all but one or two
    /// candidates are ruled out before any bytes are compared.
    fn of(name: &[u8]) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|a| name.eq_ignore_ascii_case(a.name().as_bytes()))
    }

    fn name(self) -> &'static str {
        match self {
            Self::Id => names::ID,
            Self::Type => names::TYPE,
            Self::Source => names::SOURCE,
            Self::Subject => names::SUBJECT,
            Self::Time => names::TIME,
            Self::Attempt => names::ATTEMPT,
            Self::FirstFailure => names::FIRST_FAILURE,
            Self::PartitionKey => names::PARTITION_KEY,
        }
    }
}

fn parse_time(
    name: &str,
    raw: Option<&str>,
    defects: &mut Vec<HeaderError>,
) -> Option<OffsetDateTime> {
    let raw = raw?;
    match OffsetDateTime::parse(raw, &Rfc3339) {
        Ok(t) => Some(t),
        Err(_) => {
            defects.push(HeaderError {
                name: name.to_owned(),
                reason: format!("is not an RFC 3339 time: {raw:?}"),
            });
            None
        }
    }
}

/// Formats a time as RFC 3339, the form every time header uses.
pub fn format_time(t: OffsetDateTime) -> String {
    // Rfc3339 only fails for years outside 0..=9999, which `now_utc` cannot produce.
    t.format(&Rfc3339)
        .unwrap_or_else(|_| t.unix_timestamp().to_string())
}

/// A message to publish: payload, partition key and headers.
///
/// `Message::json` fills in the CloudEvents attributes a consumer needs
/// (`ce_id`, `ce_specversion`, `ce_time`, `content-type`), so the simplest
/// publish is already a valid binary-mode CloudEvent.
#[derive(Debug, Clone)]
pub struct Message {
    /// Partition key; `None` lets the broker spread messages.
    pub key: Option<String>,
    /// Headers to send.
    pub headers: Headers,
    /// The body.
    pub payload: Bytes,
}

impl Message {
    /// Raw bytes with no headers at all: what a plain client would send.
    pub fn raw(payload: impl Into<Bytes>) -> Self {
        Self {
            key: None,
            headers: Headers::new(),
            payload: payload.into(),
        }
    }

    /// A JSON CloudEvent of the given type with a fresh id.
    pub fn json<T: serde::Serialize + ?Sized>(
        kind: &str,
        value: &T,
    ) -> Result<Self, serde_json::Error> {
        let payload = serde_json::to_vec(value)?;
        let mut headers = Headers::new();
        headers.insert(names::ID, uuid::Uuid::now_v7().to_string());
        headers.insert(names::SPEC_VERSION, "1.0");
        headers.insert(names::TYPE, kind);
        headers.insert(names::TIME, format_time(OffsetDateTime::now_utc()));
        headers.insert(names::CONTENT_TYPE, "application/json");
        Ok(Self {
            key: None,
            headers,
            payload: payload.into(),
        })
    }

    /// Sets the partition key.
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets the message id (`ce_id`), e.g. to publish the same message twice.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.headers.insert(names::ID, id.into());
        self
    }

    /// Sets the CloudEvents `source`.
    pub fn with_source(mut self, source: impl Into<String>) -> Self {
        self.headers.insert(names::SOURCE, source.into());
        self
    }

    /// Sets any header.
    pub fn with_header(mut self, name: impl AsRef<str>, value: impl AsRef<[u8]>) -> Self {
        self.headers.insert(name, value);
        self
    }

    /// Injects the current span's W3C trace context (`traceparent`,
    /// `tracestate`), so the consumer's span becomes its child.
    pub fn with_current_trace(mut self) -> Self {
        crate::trace::inject_current(&mut self.headers);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(headers: Headers) -> Envelope {
        Envelope::from_parts(Bytes::new(), headers, None, Origin::default(), || {
            "fallback".into()
        })
    }

    #[test]
    fn reads_cloudevents_attributes_and_attempt() {
        let h: Headers = [
            (names::ID, "m-1"),
            (names::TYPE, "OrderPlaced"),
            (names::TIME, "2026-01-02T03:04:05Z"),
            (names::ATTEMPT, "3"),
            (names::PARTITION_KEY, "k"),
        ]
        .into_iter()
        .collect();
        let e = env(h);
        assert_eq!(e.id, "m-1");
        assert_eq!(e.kind.as_deref(), Some("OrderPlaced"));
        assert_eq!(e.attempt, 3);
        assert_eq!(e.key.as_deref(), Some("k"));
        assert!(e.time.is_some());
        assert!(e.defects.is_empty());
    }

    #[test]
    fn missing_id_uses_the_stable_fallback() {
        assert_eq!(env(Headers::new()).id, "fallback");
    }

    #[test]
    fn malformed_headers_are_defects_not_panics() {
        let mut h = Headers::new();
        h.append(names::ID, vec![0xff, 0xfe]);
        h.append(names::ATTEMPT, "zero");
        h.append(names::TIME, "yesterday");
        let e = env(h);
        let names: Vec<_> = e.defects.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, [names::ID, names::TIME, names::ATTEMPT]);
        assert_eq!(e.attempt, 1);
        assert_eq!(e.id, "fallback");
    }

    #[test]
    fn attributes_match_any_case_and_the_last_value_wins() {
        let h: Headers = [
            ("CE_ID", "first"),
            ("Ce_Type", "T"),
            (names::ID, "second"),
            ("X-Consumer-Attempt", "2"),
            ("ce_partitionKey", "k"),
        ]
        .into_iter()
        .collect();
        let e = env(h);
        assert_eq!(e.id, "second");
        assert_eq!(e.kind.as_deref(), Some("T"));
        assert_eq!(e.attempt, 2);
        assert_eq!(e.key.as_deref(), Some("k"));
        assert!(e.defects.is_empty());
    }

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
