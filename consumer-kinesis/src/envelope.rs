//! How a message's headers travel in a Kinesis record, which has none of
//! its own: a small binary envelope before the payload.
//!
//! # The format (version 1)
//!
//! ```text
//! offset  size  field
//! 0       3     magic: 0xF5 'C' 'E'
//! 3       1     version: 0x01
//! 4       2     header count n, unsigned big-endian
//!               n times:
//!         2       name length, unsigned big-endian (1..=65535)
//!         ..      name, UTF-8
//!         4       value length, unsigned big-endian
//!         ..      value, any bytes
//! ..      rest  the payload, untouched
//! ```
//!
//! The headers are the framework's usual ones under
//! [`consumer_backend::names`]: the CloudEvents attributes in the Kafka
//! binding's names (`ce_id`, `ce_type`, `ce_source`, `ce_specversion`,
//! `ce_time`, `ce_subject`, `content-type`), the trace context
//! (`traceparent`, `tracestate`), the framework's own (`x-consumer-attempt`,
//! dead-letter context, ...), in order, duplicates kept. The message's key
//! is the record's `PartitionKey`; a key Kinesis cannot take as one (over
//! 256 characters) travels as `ce_partitionkey` as well, and wins when read.
//!
//! ```
//! use consumer_backend::{Message, names};
//! use consumer_kinesis::envelope;
//!
//! let message = Message::raw(&b"{\"total\":3}"[..])
//!     .with_key("order-7")
//!     .with_header(names::ID, "e-1")
//!     .with_header(names::TRACEPARENT, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
//! let data = envelope::encode(&message).expect("two short headers fit");
//! assert_eq!(&data[..4], b"\xF5CE\x01");
//! let read = envelope::decode(&data, "order-7").expect("an envelope this crate wrote");
//! assert_eq!(read.key.as_deref(), Some("order-7"));
//! assert_eq!(read.headers.get(names::ID).ok().flatten(), Some("e-1"));
//! assert_eq!(&read.payload[..], b"{\"total\":3}");
//! ```
//!
//! # Why this format
//!
//! * **The payload is left as it is.** A structured CloudEvent in JSON
//!   would have to base64 a binary payload (a third larger, against
//!   Kinesis's 1 MiB per record and 1 MB/s per shard) and re-encode a JSON
//!   one; here the payload's bytes follow the headers unchanged.
//! * **Headers as Kafka has them**: ordered names with byte values, so any
//!   header (a non-UTF-8 value, a repeated name) survives, and the mapping
//!   to and from [`Headers`] is one loop each way. A reader in another
//!   language needs a dozen lines.
//! * **A plain producer is told apart by the first byte.** `0xF5` never
//!   appears in UTF-8, so no text payload (JSON, XML, CSV) and no
//!   Confluent-framed payload (which starts with `0x00`) begins with the
//!   magic: a record without it is a plain message (the standard's
//!   `put_record(Data=json, PartitionKey=aggregate_id)`), whose key is its
//!   `PartitionKey` and which has no headers.
//! * **Versioned.** A reader refuses a version it does not know with an
//!   error that says so, rather than misreading it.
//!
//! A record that starts with the magic but does not follow the format
//! (cut short, an unknown version, a name that is not UTF-8) is an
//! [`EnvelopeError`]: never a panic, and poison for the runtime
//! ([`EnvelopeError`] converts into the [`HeaderError`] an envelope's
//! defects hold).

use bytes::Bytes;
use consumer_backend::{HeaderError, Headers, Message, names};

/// The bytes every enveloped record starts with, version included.
pub const MAGIC: [u8; 3] = [0xF5, b'C', b'E'];
/// The envelope version this crate writes.
pub const VERSION: u8 = 1;
/// The name [`EnvelopeError`]s carry as a header defect.
pub const ENVELOPE_DEFECT: &str = "x-kinesis-envelope";
/// The longest `PartitionKey` Kinesis takes, in Unicode characters.
pub const MAX_PARTITION_KEY_CHARS: usize = 256;

/// Bytes before the first header: magic, version, count.
const PREAMBLE: usize = MAGIC.len() + 1 + 2;

/// A record whose envelope cannot be read, or a message that cannot be put
/// in one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvelopeError {
    /// The record ends inside the envelope.
    #[error(
        "the Kinesis record's envelope is cut short: {needed} bytes needed at offset {at}, {len} in the record"
    )]
    Truncated {
        /// Where the missing part starts.
        at: usize,
        /// How many bytes were needed there.
        needed: usize,
        /// The record's length.
        len: usize,
    },
    /// The envelope is of a version this reader does not know.
    #[error(
        "the Kinesis record's envelope is version {found}; this reader knows version {VERSION}"
    )]
    UnknownVersion {
        /// The version byte found.
        found: u8,
    },
    /// A header's name is not UTF-8 (or is empty).
    #[error(
        "header {index} of the Kinesis record's envelope has a name that is empty or not UTF-8"
    )]
    BadName {
        /// The header's position, from 0.
        index: usize,
    },
    /// A message has more headers, or a longer header, than the format
    /// counts.
    #[error("the message's headers do not fit a Kinesis envelope: {0}")]
    TooMany(String),
}

impl From<EnvelopeError> for HeaderError {
    fn from(e: EnvelopeError) -> Self {
        HeaderError {
            name: ENVELOPE_DEFECT.to_owned(),
            reason: e.to_string(),
        }
    }
}

/// Whether `data` starts with the envelope's magic (whatever its version).
pub fn is_enveloped(data: &[u8]) -> bool {
    data.starts_with(&MAGIC)
}

/// The record data for `message`: its headers in an envelope, then its
/// payload. A key over [`MAX_PARTITION_KEY_CHARS`] is added as
/// `ce_partitionkey` (the record's `PartitionKey` is then
/// [`partition_key`]'s digest of it). A message with no header at all
/// ([`Message::raw`]) is sent as a plain record, as a plain client would
/// send it, unless its payload itself starts with the magic.
pub fn encode(message: &Message) -> Result<Vec<u8>, EnvelopeError> {
    let long_key = message
        .key
        .as_deref()
        .filter(|k| k.chars().count() > MAX_PARTITION_KEY_CHARS);
    if message.headers.is_empty() && long_key.is_none() && !is_enveloped(&message.payload) {
        return Ok(message.payload.to_vec());
    }
    let extra = usize::from(long_key.is_some());
    let count = u16::try_from(message.headers.len() + extra)
        .map_err(|_| EnvelopeError::TooMany(format!("{} headers", message.headers.len())))?;
    let size = PREAMBLE
        + message.payload.len()
        + message
            .headers
            .iter()
            .map(|(n, v)| 6 + n.len() + v.len())
            .sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&count.to_be_bytes());
    let headers = message.headers.iter();
    for (name, value) in headers.chain(long_key.map(|k| (names::PARTITION_KEY, k.as_bytes()))) {
        push_header(&mut out, name, value)?;
    }
    out.extend_from_slice(&message.payload);
    Ok(out)
}

fn push_header(out: &mut Vec<u8>, name: &str, value: &[u8]) -> Result<(), EnvelopeError> {
    let name_len = u16::try_from(name.len())
        .map_err(|_| EnvelopeError::TooMany(format!("a header name of {} bytes", name.len())))?;
    let value_len = u32::try_from(value.len())
        .map_err(|_| EnvelopeError::TooMany(format!("a value of {} bytes", value.len())))?;
    out.extend_from_slice(&name_len.to_be_bytes());
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&value_len.to_be_bytes());
    out.extend_from_slice(value);
    Ok(())
}

/// The `PartitionKey` of a message with `key`: the key itself when Kinesis
/// takes it, otherwise a stable 64-bit FNV-1a digest in hex (the same on
/// every machine and Rust version, so a key always lands on the same
/// shard).
pub fn partition_key(key: &str) -> String {
    if !key.is_empty() && key.chars().count() <= MAX_PARTITION_KEY_CHARS {
        return key.to_owned();
    }
    let digest = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("fnv1a-{digest:016x}")
}

/// The message a record carries: an enveloped record's headers, key and
/// payload, or, for a record without the envelope, the record's data as
/// the payload, no headers, and `partition_key` as the key.
pub fn decode(data: &[u8], partition_key: &str) -> Result<Message, EnvelopeError> {
    if !is_enveloped(data) {
        return Ok(Message::raw(Bytes::copy_from_slice(data)).with_key(partition_key));
    }
    let mut reader = Reader {
        data,
        at: MAGIC.len(),
    };
    let version = reader.take(1)?[0];
    if version != VERSION {
        return Err(EnvelopeError::UnknownVersion { found: version });
    }
    let count = reader.u16()?;
    // Room for no more headers than the record can hold (six bytes each at
    // least), whatever count a malformed record claims.
    let room = usize::from(count).min(data.len() / 6);
    let mut headers = Headers::with_capacity(room, 0);
    for index in 0..usize::from(count) {
        let name_len = usize::from(reader.u16()?);
        let name = std::str::from_utf8(reader.take(name_len)?)
            .ok()
            .filter(|n| !n.is_empty())
            .ok_or(EnvelopeError::BadName { index })?;
        let value_len = reader.u32()?;
        let value = reader.take(value_len)?;
        headers.append(name, value);
    }
    let key = match headers.get(names::PARTITION_KEY) {
        Ok(Some(long)) => long.to_owned(),
        _ => partition_key.to_owned(),
    };
    Ok(Message {
        key: Some(key),
        headers,
        payload: Bytes::copy_from_slice(reader.rest()),
    })
}

/// Reads the envelope front to back, every read bounds-checked.
struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], EnvelopeError> {
        let truncated = EnvelopeError::Truncated {
            at: self.at,
            needed: n,
            len: self.data.len(),
        };
        let end = self.at.checked_add(n).ok_or(truncated.clone())?;
        let bytes = self.data.get(self.at..end).ok_or(truncated)?;
        self.at = end;
        Ok(bytes)
    }

    fn u16(&mut self) -> Result<u16, EnvelopeError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<usize, EnvelopeError> {
        let b = self.take(4)?;
        // A u32 always fits a usize on the 32- and 64-bit targets Tokio runs on.
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }

    fn rest(&self) -> &'a [u8] {
        self.data.get(self.at..).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use rand::RngExt;

    use super::*;

    fn pairs(h: &Headers) -> Vec<(String, Vec<u8>)> {
        h.iter().map(|(n, v)| (n.to_owned(), v.to_vec())).collect()
    }

    #[test]
    fn headers_key_and_payload_survive_the_round_trip() {
        let message = Message::json("OrderPlaced", &serde_json::json!({"total": 3}))
            .expect("a JSON value serialises")
            .with_key("order-7")
            .with_header(
                names::TRACEPARENT,
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            )
            .with_header(names::TRACESTATE, "vendor=1")
            .with_header("x-binary", [0xFF, 0x00, 0xFE]);
        let mut message = message;
        message.headers.append("x-twice", "a");
        message.headers.append("x-twice", "b");
        let data = encode(&message).expect("small headers fit");
        assert!(is_enveloped(&data));
        let read = decode(&data, "order-7").expect("a well-formed envelope");
        assert_eq!(read.key.as_deref(), Some("order-7"));
        assert_eq!(pairs(&read.headers), pairs(&message.headers));
        assert_eq!(read.payload, message.payload);
    }

    #[test]
    fn a_record_without_the_envelope_is_a_plain_message_keyed_by_its_partition_key() {
        let data = br#"{"order_id":"o-1","total":3}"#;
        let read = decode(data, "o-1").expect("a plain record is never an error");
        assert_eq!(read.key.as_deref(), Some("o-1"));
        assert!(read.headers.is_empty());
        assert_eq!(&read.payload[..], data);
        let empty = decode(b"", "k").expect("an empty record is a plain empty message");
        assert!(empty.payload.is_empty());
    }

    #[test]
    fn a_message_without_headers_is_sent_plain_unless_it_looks_enveloped() {
        let plain = Message::raw(&b"{\"a\":1}"[..]).with_key("k");
        assert_eq!(encode(&plain).expect("plain"), b"{\"a\":1}");
        let tricky = Message::raw(&b"\xF5CE\x01not an envelope"[..]).with_key("k");
        let data = encode(&tricky).expect("enveloped");
        let read = decode(&data, "k").expect("well-formed");
        assert_eq!(read.payload, tricky.payload);
        assert!(read.headers.is_empty());
    }

    #[test]
    fn a_key_kinesis_cannot_take_travels_in_the_envelope_and_wins() {
        let long = "k".repeat(300);
        let message = Message::raw(&b"x"[..]).with_key(long.clone());
        let pk = partition_key(&long);
        assert!(pk.len() <= MAX_PARTITION_KEY_CHARS);
        assert_eq!(pk, partition_key(&long), "the digest is stable");
        let read = decode(&encode(&message).expect("fits"), &pk).expect("well-formed");
        assert_eq!(read.key, Some(long));
        assert_eq!(partition_key("short"), "short");
    }

    #[test]
    fn malformed_envelopes_are_errors_never_panics() {
        let good =
            encode(&Message::raw(&b"payload"[..]).with_header("ce_id", "e-1")).expect("fits");
        // Every cut inside the envelope's header part is an error.
        let header_end = good.len() - b"payload".len();
        for cut in MAGIC.len()..header_end {
            let e = decode(&good[..cut], "k").expect_err("a cut envelope");
            assert!(
                matches!(e, EnvelopeError::Truncated { .. }),
                "cut at {cut}: {e}"
            );
        }
        let mut newer = good.clone();
        newer[3] = 9;
        assert_eq!(
            decode(&newer, "k").expect_err("an unknown version"),
            EnvelopeError::UnknownVersion { found: 9 }
        );
        let mut bad_name = good.clone();
        bad_name[PREAMBLE + 2] = 0xFF;
        assert_eq!(
            decode(&bad_name, "k").expect_err("a name that is not UTF-8"),
            EnvelopeError::BadName { index: 0 }
        );
        // A count larger than the headers present, and lengths near u32::MAX.
        let mut lying = MAGIC.to_vec();
        lying.extend_from_slice(&[VERSION, 0xFF, 0xFF, 0, 1, b'a', 0xFF, 0xFF, 0xFF, 0xFF]);
        assert!(matches!(
            decode(&lying, "k"),
            Err(EnvelopeError::Truncated { .. })
        ));
        // Whatever follows the magic, decoding answers (and never panics).
        let mut rng = rand::rng();
        for _ in 0..20_000 {
            let mut data = MAGIC.to_vec();
            data.push(if rng.random_range(0..4) == 0 {
                2
            } else {
                VERSION
            });
            let len = rng.random_range(0..48);
            data.extend((0..len).map(|_| rng.random_range(0..=u8::MAX)));
            let _ = decode(&data, "k");
        }
        let defect: HeaderError = EnvelopeError::UnknownVersion { found: 9 }.into();
        assert_eq!(defect.name, ENVELOPE_DEFECT);
        assert!(defect.reason.contains("version 9"), "{}", defect.reason);
    }
}
