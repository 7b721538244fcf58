//! A Kafka record as librdkafka hands it over (arbitrary key, payload and
//! header bytes, names included) through the Kafka backend's envelope
//! mapping, then the dead letter and retry copy built from it.
#![no_main]

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Record<'a> {
    partition: i32,
    offset: i64,
    key: Option<&'a [u8]>,
    payload: &'a [u8],
    headers: Vec<(&'a [u8], &'a [u8])>,
}

fuzz_target!(|r: Record<'_>| {
    let envelope = consumer_kafka::headers::record_envelope(
        "topic",
        r.partition,
        r.offset,
        r.key,
        r.payload,
        r.headers.len(),
        r.headers.iter().copied(),
    );
    assert_eq!(
        envelope.headers.len(),
        r.headers.len(),
        "every header is kept"
    );
    consumer_fuzz::check_envelope(&envelope);
});
