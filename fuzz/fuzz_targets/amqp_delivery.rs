//! An AMQP 0-9-1 header table as it comes off the wire (parsed by
//! amq-protocol from arbitrary bytes) with arbitrary properties, through
//! the RabbitMQ backend's envelope mapping, then the dead letter and retry
//! copy built from it.
#![no_main]

use consumer_amqp::headers::{Received, envelope_of};
use lapin::BasicProperties;
use lapin::types::ShortString;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Delivery<'a> {
    table: &'a [u8],
    message_id: Option<&'a str>,
    content_type: Option<&'a str>,
    exchange: &'a str,
    routing_key: &'a str,
    delivery_tag: u64,
    payload: &'a [u8],
}

fuzz_target!(|d: Delivery<'_>| {
    let Ok((_, table)) = lapin::types::parsing::parse_field_table(d.table) else {
        return;
    };
    let mut properties = BasicProperties::default().with_headers(table);
    if let Some(id) = d.message_id.and_then(|s| ShortString::try_new(s).ok()) {
        properties = properties.with_message_id(id);
    }
    if let Some(ct) = d.content_type.and_then(|s| ShortString::try_new(s).ok()) {
        properties = properties.with_content_type(ct);
    }
    let received = Received {
        exchange: d.exchange,
        routing_key: d.routing_key,
        delivery_tag: d.delivery_tag,
        properties: &properties,
    };
    let envelope = envelope_of(
        "queue",
        &received,
        bytes::Bytes::copy_from_slice(d.payload),
        usize::MAX,
    );
    consumer_fuzz::check_envelope(&envelope);
});
