//! How a framework message maps onto a Kafka record, both ways.
//!
//! The CloudEvents Kafka protocol binding, binary content mode: each
//! attribute is a header named `ce_<attribute>` (`ce_id`, `ce_type`,
//! `ce_source`, `ce_specversion`, `ce_time`, `ce_subject`), the data content
//! type is the `content-type` header, and the `partitionkey` extension is
//! the record key. `traceparent` / `tracestate` travel as headers of their
//! own (W3C trace context). Every other header is copied byte for byte both
//! ways, so a message keeps its headers across the memory broker, RabbitMQ
//! and Kafka.
//!
//! On receipt:
//! * the record key is the partition key; a key that is not UTF-8 is read
//!   lossily (two such keys may then share a lane, which costs parallelism,
//!   never order); without a key, a `ce_partitionkey` header is used;
//! * a header with a null value is kept with an empty value;
//! * the message id is `ce_id`, else `<topic>/<partition>/<offset>`, which
//!   is stable across redeliveries.

use bytes::Bytes;
use consumer_core::envelope::names;
use consumer_core::{Envelope, Headers, Message, Origin};
use rdkafka::Message as _;
use rdkafka::message::{BorrowedMessage, Header, Headers as _, OwnedHeaders};

/// Headers a record is produced with: every message header, in order.
/// The key is not repeated as `ce_partitionkey`: the record key is the
/// binding's place for it.
pub fn to_kafka_headers(message: &Message) -> OwnedHeaders {
    let mut out = OwnedHeaders::new_with_capacity(message.headers.len());
    for (name, value) in message.headers.iter() {
        out = out.insert(Header {
            key: name,
            value: Some(value),
        });
    }
    out
}

/// Reads a consumed record into the framework's envelope.
pub fn to_envelope(record: &BorrowedMessage<'_>) -> Envelope {
    envelope_of(record, record.topic())
}

/// Headers read in one pass go through a stack buffer of this many.
const INLINE_HEADERS: usize = 16;

/// [`to_envelope`] with the record's topic already read (the source has
/// it from interning).
pub(crate) fn envelope_of(record: &BorrowedMessage<'_>, topic: &str) -> Envelope {
    let headers = match record.headers() {
        Some(h) => {
            // librdkafka hands headers out one FFI call (and one UTF-8
            // check of the name) at a time: read the first ones once into
            // a stack buffer, sizing the table on the way, so it is built
            // with two allocations however many headers the record has.
            let mut first = [("", &[][..]); INLINE_HEADERS];
            let (mut count, mut bytes) = (0, 0);
            for header in h.iter() {
                let value = header.value.unwrap_or_default();
                if let Some(slot) = first.get_mut(count) {
                    *slot = (header.key, value);
                }
                count += 1;
                bytes += header.key.len() + value.len();
            }
            let mut headers = Headers::with_capacity(count, bytes);
            headers.extend(first.iter().take(count).copied());
            if count > INLINE_HEADERS {
                headers.extend(
                    h.iter()
                        .skip(INLINE_HEADERS)
                        .map(|header| (header.key, header.value.unwrap_or_default())),
                );
            }
            headers
        }
        None => Headers::new(),
    };
    let key = record
        .key()
        .map(|k| String::from_utf8_lossy(k).into_owned());
    let payload = Bytes::copy_from_slice(record.payload().unwrap_or_default());
    let (partition, offset) = (record.partition(), record.offset());
    let origin = Origin {
        destination: topic.to_owned(),
        position: position(None, partition, offset),
    };
    Envelope::from_parts(payload, headers, key, origin, || {
        position(Some(topic), partition, offset)
    })
}

/// `[<topic>/]<partition>/<offset>`, without the formatting machinery.
fn position(topic: Option<&str>, partition: i32, offset: i64) -> String {
    let mut p = itoa::Buffer::new();
    let mut o = itoa::Buffer::new();
    let (p, o) = (p.format(partition), o.format(offset));
    let topic_len = topic.map_or(0, |t| t.len() + 1);
    let mut out = String::with_capacity(topic_len + p.len() + 1 + o.len());
    if let Some(topic) = topic {
        out.push_str(topic);
        out.push('/');
    }
    out.push_str(p);
    out.push('/');
    out.push_str(o);
    out
}

/// The id a retry copy must keep: the one the consumer used, even when it
/// came from the position (a copy has another position).
pub(crate) fn pin_id(headers: &mut Headers, envelope: &Envelope) {
    headers.insert(names::ID, envelope.id.as_str());
}
