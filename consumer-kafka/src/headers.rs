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
//! * a header with a null value is kept with an empty value, and a header
//!   name that is not UTF-8 is read lossily (`U+FFFD` for each bad byte
//!   sequence): Kafka clients may write any bytes there;
//! * a header name with a NUL byte, which librdkafka hands out cut at the
//!   NUL, is read with that NUL (`ce_id\0` for `ce_id\0junk`), so it
//!   stands for no other header; when what comes before the NUL is a
//!   framework header (`ce_*`, or another binding's `ce-*`,
//!   `cloudEvents:*`, `cloudEvents_*`; `content-type`, `traceparent`,
//!   `tracestate`, `x-consumer-*`, `x-dlq-*`), the record is malformed and
//!   goes to the dead letters as a poison pill naming the header;
//! * the message id is `ce_id`, else `<topic>/<partition>/<offset>`, which
//!   is stable across redeliveries.

use bytes::Bytes;
use consumer_backend::HeaderError;
use consumer_backend::{Channel, Envelope, Headers, Message, Origin, Placement, Position};
use rdkafka::Message as _;
use rdkafka::message::{BorrowedMessage, Header, OwnedHeaders};

use crate::raw_headers::RawHeaders;

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
    envelope_of(record, record.topic().into(), usize::MAX)
}

/// Headers read in one pass go through a stack buffer of this many.
const INLINE_HEADERS: usize = 16;

/// [`to_envelope`] with the record's topic already read (the source has
/// it from interning: every envelope of a topic shares its name), for a
/// consumer that takes bodies of at most `max_body` bytes (see
/// [`Envelope::from_parts_within`]).
pub(crate) fn envelope_of(
    record: &BorrowedMessage<'_>,
    topic: Channel,
    max_body: usize,
) -> Envelope {
    let raw = RawHeaders::of(record);
    envelope_in(
        max_body,
        topic,
        record.partition(),
        record.offset(),
        record.key(),
        record.payload().unwrap_or_default(),
        raw.len(),
        raw.iter(),
    )
}

/// The envelope of a consumed record, from its parts as librdkafka hands
/// them over: `headers` yields `count` raw `(name, value)` pairs in record
/// order. Never fails (this is what the fuzz target drives with arbitrary
/// bytes): names that are not UTF-8 are read lossily, malformed framework
/// headers become the envelope's defects.
pub fn record_envelope<'a, I>(
    topic: &str,
    partition: i32,
    offset: i64,
    key: Option<&[u8]>,
    payload: &[u8],
    count: usize,
    headers: I,
) -> Envelope
where
    I: Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
{
    envelope_in(
        usize::MAX,
        topic.into(),
        partition,
        offset,
        key,
        payload,
        count,
        headers,
    )
}

/// [`record_envelope`] for a topic whose name is already shared, parsing
/// no structured-mode body over `max_body` bytes.
#[allow(clippy::too_many_arguments)]
fn envelope_in<'a, I>(
    max_body: usize,
    topic: Channel,
    partition: i32,
    offset: i64,
    key: Option<&[u8]>,
    payload: &[u8],
    count: usize,
    headers: I,
) -> Envelope
where
    I: Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
{
    // Sized first, so the table is built with two allocations however many
    // headers the record has; the first ones are kept in a stack buffer on
    // the way, to be read once.
    let mut first = [(&[][..], &[][..]); INLINE_HEADERS];
    let mut bytes = 0;
    let mut seen = 0;
    // Only a name with a NUL byte can be a forged framework header: the
    // check below runs for those records alone.
    let mut nul_in_name = false;
    for (i, (name, value)) in headers.clone().take(count).enumerate() {
        if let Some(slot) = first.get_mut(i) {
            *slot = (name, value);
        }
        bytes += name.len() + value.len();
        seen += 1;
        nul_in_name |= name.contains(&0);
    }
    let mut table = Headers::with_capacity(seen, bytes);
    table.extend(first.iter().take(seen).copied().map(named));
    if seen > INLINE_HEADERS {
        table.extend(headers.take(seen).skip(INLINE_HEADERS).map(named));
    }
    let key = key.map(|k| lossy(k).into_owned());
    // The position is written only if something reads it: the topic's
    // name is shared, not copied.
    let origin = Origin {
        channel: topic.clone(),
        position: Position::log(partition, offset),
        placement: Placement::Log { partition, offset },
    };
    let mut envelope = Envelope::from_parts_within(
        max_body,
        Bytes::copy_from_slice(payload),
        table,
        key,
        origin,
        || format!("{topic}/{partition}/{offset}"),
    );
    if nul_in_name {
        refuse_nul_in_framework_names(&mut envelope);
    }
    envelope
}

/// A header whose name holds a NUL byte is kept under that name, so it
/// matches none the framework reads; but one that reads as a framework
/// header up to the NUL (`ce_id\0junk`, which librdkafka's C strings show
/// as `ce_id`) is a forgery or a broken producer, and the record is refused
/// as malformed (a poison pill, dead-lettered with this reason) rather than
/// read with or without it.
fn refuse_nul_in_framework_names(envelope: &mut Envelope) {
    let forged: Vec<String> = envelope
        .headers
        .iter()
        .filter_map(|(name, _)| {
            let (visible, _) = name.split_once('\0')?;
            is_framework_header(visible).then(|| visible.to_owned())
        })
        .collect();
    for name in forged {
        envelope.defects.push(HeaderError {
            reason: format!(
                "may be forged: the record has a header named `{name}` followed by a NUL \
                 byte, which clients that read names as C strings (librdkafka) take for \
                 `{name}`; the record is refused rather than read with either"
            ),
            name,
        });
    }
}

/// Names the framework reads or writes: the CloudEvents attributes (under
/// any binding's prefix the envelope reads, in any case), the trace
/// context, the retry and dead-letter headers.
fn is_framework_header(name: &str) -> bool {
    use consumer_backend::names;
    let starts = |prefix: &str| {
        name.len() >= prefix.len()
            && name.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
    };
    [names::CONTENT_TYPE, names::TRACEPARENT, names::TRACESTATE].contains(&name)
        || [
            "ce_",
            "ce-",
            "cloudevents:",
            "cloudevents_",
            "x-consumer-",
            "x-dlq-",
        ]
        .into_iter()
        .any(starts)
}

/// A header as read: its name lossily as text.
fn named<'a>((name, value): (&'a [u8], &'a [u8])) -> (std::borrow::Cow<'a, str>, &'a [u8]) {
    (lossy(name), value)
}

/// `String::from_utf8_lossy`, with `from_utf8`'s faster check first: names
/// and keys are nearly always valid (and short), and the lossy reader
/// walks every byte through its chunk decoder even then.
fn lossy(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

#[cfg(test)]
#[allow(unsafe_code)]
mod tests {
    use std::ffi::CString;
    use std::time::Duration;

    use rdkafka::bindings as rdsys;
    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer as _};
    use rdkafka::mocking::MockCluster;
    use rdkafka::producer::{BaseProducer, Producer as _};
    use rdkafka::{Offset, TopicPartitionList};

    use super::envelope_of;

    /// Produces one record whose headers are `headers`, names as raw bytes
    /// (rdkafka's safe API only takes `&str` names).
    fn produce_raw(producer: &BaseProducer, topic: &str, headers: &[(&[u8], &[u8])]) {
        let topic = CString::new(topic).expect("topic name");
        let payload = b"{}";
        // SAFETY: every pointer outlives the call; on success librdkafka
        // takes ownership of `hdrs`, on failure we free it.
        unsafe {
            let hdrs = rdsys::rd_kafka_headers_new(headers.len());
            for (name, value) in headers {
                let err = rdsys::rd_kafka_header_add(
                    hdrs,
                    name.as_ptr().cast(),
                    isize::try_from(name.len()).expect("name length"),
                    value.as_ptr().cast(),
                    isize::try_from(value.len()).expect("value length"),
                );
                assert_eq!(err, rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR);
            }
            let vus = [
                rdsys::rd_kafka_vu_t {
                    vtype: rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_TOPIC,
                    u: rdsys::rd_kafka_vu_s__bindgen_ty_1 {
                        cstr: topic.as_ptr(),
                    },
                },
                rdsys::rd_kafka_vu_t {
                    vtype: rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_VALUE,
                    u: rdsys::rd_kafka_vu_s__bindgen_ty_1 {
                        mem: rdsys::rd_kafka_vu_s__bindgen_ty_1__bindgen_ty_1 {
                            ptr: payload.as_ptr().cast_mut().cast(),
                            size: payload.len(),
                        },
                    },
                },
                rdsys::rd_kafka_vu_t {
                    vtype: rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_HEADERS,
                    u: rdsys::rd_kafka_vu_s__bindgen_ty_1 { headers: hdrs },
                },
            ];
            let error =
                rdsys::rd_kafka_produceva(producer.client().native_ptr(), vus.as_ptr(), vus.len());
            if !error.is_null() {
                rdsys::rd_kafka_error_destroy(error);
                rdsys::rd_kafka_headers_destroy(hdrs);
                panic!("rd_kafka_produceva failed");
            }
        }
        producer
            .flush(Duration::from_secs(10))
            .expect("delivery of the raw record");
    }

    #[test]
    fn a_header_name_cut_at_a_nul_byte_cannot_pass_for_a_framework_header() {
        let cluster = MockCluster::new(1).expect("librdkafka mock cluster");
        cluster.create_topic("nul", 1, 1).expect("topic");
        let bootstrap = cluster.bootstrap_servers();
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .create()
            .expect("producer");
        produce_raw(
            &producer,
            "nul",
            &[
                (b"ce_id", b"e-1"),
                (b"ce_id\0junk", b"e-forged"),
                (b"cloudEvents:type\0x", b"Forged"),
                (b"x-tenant\0x", b"other"),
                (b"x-tenant", b"acme"),
            ],
        );
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("group.id", "nul")
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("nul", 0, Offset::Beginning)
            .expect("partition");
        consumer.assign(&tpl).expect("assign");
        let record = match consumer.poll(Duration::from_secs(10)) {
            Some(Ok(record)) => record,
            Some(Err(e)) => panic!("consume: {e}"),
            None => panic!("no record within 10 s from the mock cluster"),
        };

        let envelope = envelope_of(&record, "nul".into(), usize::MAX);
        assert_eq!(envelope.id, "e-1", "the forged id does not win");
        let headers: Vec<(&str, &[u8])> = envelope.headers.iter().collect();
        assert_eq!(
            headers,
            vec![
                ("ce_id", &b"e-1"[..]),
                ("ce_id\0", &b"e-forged"[..]),
                ("cloudEvents:type\0", &b"Forged"[..]),
                ("x-tenant\0", &b"other"[..]),
                ("x-tenant", &b"acme"[..]),
            ],
            "every header kept, a cut name with the NUL it was cut at"
        );
        assert_eq!(envelope.headers.get("x-tenant"), Ok(Some("acme")));
        let defects: Vec<&str> = envelope.defects.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            defects,
            vec!["ce_id", "cloudEvents:type"],
            "a poison pill naming the headers, under any binding's name"
        );
    }

    #[test]
    fn a_header_name_that_is_not_utf8_is_read_lossily_instead_of_panicking() {
        let cluster = MockCluster::new(1).expect("librdkafka mock cluster");
        cluster.create_topic("raw", 1, 1).expect("topic");
        let bootstrap = cluster.bootstrap_servers();
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .create()
            .expect("producer");
        produce_raw(
            &producer,
            "raw",
            &[
                (b"ce_type", b"order.placed"),
                (b"\xff\xfeX", b"opaque"),
                (b"after", b""),
            ],
        );

        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("group.id", "raw-headers")
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("raw", 0, Offset::Beginning)
            .expect("partition");
        consumer.assign(&tpl).expect("assign");
        let record = match consumer.poll(Duration::from_secs(10)) {
            Some(Ok(record)) => record,
            Some(Err(e)) => panic!("consume: {e}"),
            None => panic!("no record within 10 s from the mock cluster"),
        };

        let envelope = envelope_of(&record, "raw".into(), usize::MAX);
        let headers: Vec<(&str, &[u8])> = envelope.headers.iter().collect();
        assert_eq!(
            headers,
            vec![
                ("ce_type", &b"order.placed"[..]),
                ("\u{FFFD}\u{FFFD}X", &b"opaque"[..]),
                ("after", &b""[..]),
            ],
            "every header kept, in order, the bad name read lossily"
        );
        assert_eq!(envelope.kind.as_deref(), Some("order.placed"));
    }
}

#[cfg(test)]
mod placement_tests {
    use consumer_backend::Placement;
    use consumer_backend::{DeadLetter, DeadLetterKind};

    use super::record_envelope;

    #[derive(Debug, thiserror::Error)]
    #[error("poison")]
    struct Poison;

    /// Found by the `kafka_record` fuzz target (partition and offset -1):
    /// the record's placement is its partition and offset for spans, while
    /// its dead letter carries the destination and position as text only.
    #[test]
    fn a_records_placement_is_for_spans_and_its_dead_letter_keeps_the_position() {
        let envelope = record_envelope("topic", -1, -1, None, b"", 0, std::iter::empty());
        assert_eq!(
            envelope.origin.placement,
            Placement::Log {
                partition: -1,
                offset: -1
            }
        );
        let letter = DeadLetter::new(DeadLetterKind::Poison, &Poison, &envelope, "h", 1, None);
        let back = DeadLetter::from_message(&letter.to_message()).expect("parses back");
        assert_eq!(back.origin.channel, "topic");
        assert_eq!(back.origin.position, envelope.origin.position);
        assert_eq!(back.origin.placement, Placement::Unknown);
    }
}
