//! How a framework message maps onto AMQP 0-9-1, both ways.
//!
//! AMQP 0-9-1 has no CloudEvents binding in the CloudEvents specification;
//! RabbitMQ has one of its own (the [RabbitMQ protocol binding] of
//! knative eventing-rabbitmq), which names each attribute `ce-<attribute>`
//! in the headers table and puts `datacontenttype` in the `content-type`
//! property. That is what the CloudEvents SDKs' RabbitMQ bindings read and
//! write (the Python SDK 2.x: `cloudevents.core.bindings.rabbitmq`), so a
//! publisher writes it by default: the framework's `ce_id`, `ce_type`,
//! `ce_source`, `ce_specversion`, `ce_time`, `ce_subject`,
//! `ce_partitionkey`, ... go out as `ce-id`, `ce-type`, ...
//! [`AttributePrefix`] (set with
//! [`AmqpPublisherBuilder::with_attribute_prefix`](crate::AmqpPublisherBuilder::with_attribute_prefix))
//! chooses `ce_` (the Kafka binding's names, what earlier versions wrote)
//! or the CloudEvents AMQP 1.0 binding's `cloudEvents_` / `cloudEvents:`
//! instead. `content-type`, `traceparent` and `tracestate` keep their names.
//!
//! On receipt every one of these is read: `ce-type`, `cloudEvents:type`
//! and `cloudEvents_type` give the event type when no `ce_type` is present
//! (see [`attribute`]), and so does the AMQP `type` property; a
//! structured-mode event (`content-type: application/cloudevents+json`,
//! header or property) is read from the body (see
//! [`Envelope::from_parts`]). The headers stay as they arrived: the
//! envelope's [`headers`](Envelope::headers), and a retry copy or a dead
//! letter of it, carry the names its producer wrote (`ce-id` stays
//! `ce-id`, `ce_id` stays `ce_id`); only attributes the delivery carried
//! as AMQP properties alone (`content-type`, `type`) are added as headers.
//!
//! Besides the headers, a published message sets the native properties
//! other AMQP tools show: `message-id` (from `ce_id`), `content-type`,
//! `type` (from `ce_type`), `timestamp` (from `ce_time`, whole seconds) and
//! `delivery-mode = 2` (persistent). On receipt, `content-type` and
//! `message-id` are read from the properties when no header carries them.
//!
//! Header values are bytes; AMQP values that are not strings are read as
//! text (`42`, `true`); arrays and tables (RabbitMQ's own `x-death`) are
//! not carried into the envelope.
//!
//! [RabbitMQ protocol binding]: https://github.com/knative-extensions/eventing-rabbitmq/blob/main/cloudevents-protocol-spec/spec.md

use bytes::Bytes;
use consumer_backend::envelope::attribute;
use consumer_backend::names;
use consumer_backend::{Envelope, Headers, Message, Origin, Placement};
use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::content_id::content_id;
use crate::error::{Error, Result};
use crate::header_values;

/// How the CloudEvents attributes are named in the headers a publisher
/// writes; every one of them is read on receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AttributePrefix {
    /// `ce-type`: the RabbitMQ protocol binding, what the CloudEvents SDKs
    /// read on RabbitMQ. The default.
    #[default]
    CeDash,
    /// `ce_type`: the Kafka binding's names, the framework's own.
    CeUnderscore,
    /// `cloudEvents_type`: the AMQP 1.0 binding (the JMS-compatible form).
    CloudEventsUnderscore,
    /// `cloudEvents:type`: the AMQP 1.0 binding.
    CloudEventsColon,
}

impl AttributePrefix {
    /// The prefix itself, e.g. `ce-`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CeDash => "ce-",
            Self::CeUnderscore => "ce_",
            Self::CloudEventsUnderscore => "cloudEvents_",
            Self::CloudEventsColon => "cloudEvents:",
        }
    }

    /// `name` as written: a framework `ce_` attribute under this prefix,
    /// any other header unchanged.
    fn rename<'a>(self, name: &'a str) -> std::borrow::Cow<'a, str> {
        match name.strip_prefix("ce_") {
            Some(attr) if self != Self::CeUnderscore && !attr.is_empty() => {
                std::borrow::Cow::Owned(format!("{}{attr}", self.as_str()))
            }
            _ => std::borrow::Cow::Borrowed(name),
        }
    }
}

/// The properties and headers a message is published with, its
/// CloudEvents attributes named with `prefix`.
pub(crate) fn to_properties(message: &Message, prefix: AttributePrefix) -> Result<BasicProperties> {
    let mut table = FieldTable::default();
    for (name, value) in message.headers.iter() {
        let name = prefix.rename(name);
        let key = ShortString::try_new(&*name).map_err(|_| {
            Error::Unencodable(format!(
                "header name `{}…` is longer than 255 bytes",
                name.chars().take(32).collect::<String>()
            ))
        })?;
        table.insert(key, AMQPValue::LongString(LongString::from(value.to_vec())));
    }
    if let Some(key) = &message.key
        && attribute(&message.headers, "partitionkey").is_none()
    {
        table.insert(
            ShortString::from(&*prefix.rename(names::PARTITION_KEY)),
            AMQPValue::LongString(LongString::from(key.as_bytes().to_vec())),
        );
    }
    let mut props = BasicProperties::default()
        .with_delivery_mode(2)
        .with_headers(table);
    let text = |name| attribute(&message.headers, name).and_then(|v| std::str::from_utf8(v).ok());
    if let Some(id) = text("id").and_then(|v| ShortString::try_new(v).ok()) {
        props = props.with_message_id(id);
    }
    if let Some(ct) = text("datacontenttype").and_then(|v| ShortString::try_new(v).ok()) {
        props = props.with_content_type(ct);
    }
    if let Some(kind) = text("type").and_then(|v| ShortString::try_new(v).ok()) {
        props = props.with_type(kind);
    }
    if let Some(t) = text("time").and_then(|v| OffsetDateTime::parse(v, &Rfc3339).ok())
        && let Ok(secs) = u64::try_from(t.unix_timestamp())
    {
        props = props.with_timestamp(secs);
    }
    Ok(props)
}

/// Reads a delivery from `queue` into the framework's envelope, as the
/// source does (usable on `basic.get` results too), parsing a
/// structured-mode body of any size.
pub fn to_envelope(queue: &str, delivery: &lapin::message::Delivery, payload: Bytes) -> Envelope {
    to_envelope_within(usize::MAX, queue, delivery, payload)
}

/// [`to_envelope`] for a consumer that takes bodies of at most `max_body`
/// bytes: a structured-mode body over it is not parsed (see
/// [`Envelope::from_parts_within`]).
pub fn to_envelope_within(
    max_body: usize,
    queue: &str,
    delivery: &lapin::message::Delivery,
    payload: Bytes,
) -> Envelope {
    let received = Received {
        exchange: delivery.exchange.as_str(),
        routing_key: delivery.routing_key.as_str(),
        delivery_tag: delivery.delivery_tag,
        properties: &delivery.properties,
    };
    envelope_of(queue, &received, payload, max_body)
}

/// What a delivery says about itself on the wire, besides its body.
#[derive(Debug, Clone, Copy)]
pub struct Received<'a> {
    /// The exchange it was published to.
    pub exchange: &'a str,
    /// Its routing key.
    pub routing_key: &'a str,
    /// The channel's delivery tag.
    pub delivery_tag: u64,
    /// Its properties and headers table.
    pub properties: &'a BasicProperties,
}

/// [`to_envelope`] from a delivery's parts. Never fails (this is what the
/// fuzz target drives with arbitrary header tables): values that are not
/// strings are read as text, tables, arrays, decimals and void as JSON
/// (see `header_values`); malformed framework headers, and framework
/// headers that are not text, become the envelope's defects.
pub fn envelope_of(
    queue: &str,
    delivery: &Received<'_>,
    payload: Bytes,
    max_body: usize,
) -> Envelope {
    let props = delivery.properties;
    let mut headers = Headers::new();
    let mut refused = Vec::new();
    if let Some(table) = props.headers() {
        for (name, value) in table {
            match header_values::read(name.as_str(), value) {
                header_values::Read::Bytes(bytes) => headers.append(name.as_str(), bytes),
                header_values::Read::Refused(defect) => refused.push(defect),
            }
        }
    }
    if attribute(&headers, "datacontenttype").is_none()
        && let Some(ct) = props.content_type()
    {
        headers.append(names::CONTENT_TYPE, ct.as_str());
    }
    // The AMQP `type` property is the event type where no header says it
    // (what a router dispatches on).
    if attribute(&headers, "type").is_none()
        && let Some(kind) = props.kind()
    {
        headers.append(names::TYPE, kind.as_str());
    }
    let routing_key = delivery.routing_key;
    // Through the default exchange the routing key names the queue, not a
    // partition: such messages have no key (each gets a lane of its own).
    let key = if routing_key.is_empty() || routing_key == queue {
        None
    } else {
        Some(routing_key.to_owned())
    };
    // A header key wins over the routing key: it is what the publisher meant.
    let key = match attribute(&headers, "partitionkey").map(std::str::from_utf8) {
        Some(Ok(k)) => Some(k.to_owned()),
        _ => key,
    };
    let origin = Origin {
        channel: queue.into(),
        position: format!(
            "{}/{}#{}",
            delivery.exchange, routing_key, delivery.delivery_tag
        )
        .into(),
        placement: Placement::Exchange {
            exchange: delivery.exchange.to_owned(),
            routing_key: routing_key.to_owned(),
            delivery_tag: delivery.delivery_tag,
        },
    };
    let message_id = props.message_id().as_ref().map(|m| m.as_str().to_owned());
    let body = payload.clone();
    let fallback = move || match message_id {
        Some(id) if !id.is_empty() => id,
        _ => content_id(delivery, &body),
    };
    let mut envelope =
        Envelope::from_parts_within(max_body, payload, headers, key, origin, fallback);
    envelope.defects.extend(refused);
    envelope
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(tag: u64, headers: FieldTable, routing_key: &str) -> lapin::message::Delivery {
        let mut d = lapin::message::Delivery::mock(
            tag,
            "".into(),
            routing_key.into(),
            false,
            b"{}".to_vec(),
        );
        d.properties = BasicProperties::default().with_headers(headers);
        d
    }

    #[test]
    fn the_fallback_id_is_stable_across_redeliveries() {
        let mut t = FieldTable::default();
        t.insert("x-tenant".into(), AMQPValue::LongString("acme".into()));
        let a = to_envelope("q", &delivery(1, t.clone(), "q"), Bytes::from_static(b"{}"));
        let b = to_envelope("q", &delivery(7, t, "q"), Bytes::from_static(b"{}"));
        assert_eq!(a.id, b.id);
        assert_ne!(a.origin.position, b.origin.position);
        let c = to_envelope(
            "q",
            &delivery(1, FieldTable::default(), "q"),
            Bytes::from_static(b"{}"),
        );
        assert_ne!(a.id, c.id, "other headers, other message");
    }

    #[test]
    fn headers_the_broker_adds_on_redelivery_do_not_change_the_fallback_id() {
        let mut t = FieldTable::default();
        t.insert("x-tenant".into(), AMQPValue::LongString("acme".into()));
        let first = to_envelope("q", &delivery(1, t.clone(), "q"), Bytes::from_static(b"{}"));
        // A quorum queue counts redeliveries in a header of the message.
        t.insert("x-delivery-count".into(), AMQPValue::LongLongInt(1));
        let again = to_envelope("q", &delivery(2, t, "q"), Bytes::from_static(b"{}"));
        assert_eq!(first.id, again.id);
    }

    #[test]
    fn key_from_header_else_routing_key_but_not_the_queue_name() {
        let mut t = FieldTable::default();
        t.insert(
            names::PARTITION_KEY.into(),
            AMQPValue::LongString("k1".into()),
        );
        assert_eq!(
            to_envelope("q", &delivery(1, t, "rk"), Bytes::new())
                .key
                .as_deref(),
            Some("k1")
        );
        let plain = FieldTable::default();
        assert_eq!(
            to_envelope("q", &delivery(1, plain.clone(), "rk"), Bytes::new())
                .key
                .as_deref(),
            Some("rk")
        );
        assert_eq!(
            to_envelope("q", &delivery(1, plain, "q"), Bytes::new()).key,
            None
        );
    }

    #[test]
    fn headers_round_trip_and_cloudevents_prefixes_are_read() {
        let mut m = Message::raw(&b"x"[..]).with_key("k").with_id("m-1");
        m.headers.insert("bin", vec![0xff_u8, 0x00]);
        let props = to_properties(&m, AttributePrefix::CeUnderscore).expect("encodes");
        assert_eq!(props.message_id().as_ref().map(|s| s.as_str()), Some("m-1"));
        assert_eq!(props.delivery_mode(), &Some(2));
        let mut table = props.headers().clone().unwrap_or_default();
        table.insert(
            "cloudEvents:type".into(),
            AMQPValue::LongString("Order".into()),
        );
        table.insert("x-count".into(), AMQPValue::LongInt(3));
        let e = to_envelope("q", &delivery(1, table, "q"), Bytes::new());
        assert_eq!(e.id, "m-1");
        assert_eq!(e.key.as_deref(), Some("k"));
        assert_eq!(e.kind.as_deref(), Some("Order"));
        assert_eq!(e.headers.get_bytes("bin"), Some(&[0xff_u8, 0x00][..]));
        assert_eq!(e.headers.get("x-count"), Ok(Some("3")));
    }

    #[test]
    fn the_type_property_and_ce_dash_headers_give_the_event_type() {
        let mut d = delivery(1, FieldTable::default(), "q");
        d.properties = BasicProperties::default().with_type("OrderPaid".into());
        assert_eq!(
            to_envelope("q", &d, Bytes::new()).kind.as_deref(),
            Some("OrderPaid")
        );
        let mut t = FieldTable::default();
        t.insert(
            "ce-type".into(),
            AMQPValue::LongString("OrderPlaced".into()),
        );
        t.insert("ce-id".into(), AMQPValue::LongString("e-1".into()));
        let e = to_envelope("q", &delivery(1, t, "q"), Bytes::new());
        assert_eq!(
            (e.kind.as_deref(), e.id.as_str()),
            (Some("OrderPlaced"), "e-1")
        );
    }

    #[test]
    fn received_headers_keep_their_names_and_a_republished_copy_carries_them() {
        let mut t = FieldTable::default();
        for (name, value) in [
            ("cloudEvents:type", "OrderPlaced"),
            ("ce-id", "e-7"),
            ("ce_partitionkey", "k-1"),
            ("x-tenant", "acme"),
        ] {
            t.insert(name.into(), AMQPValue::LongString(value.into()));
        }
        let e = to_envelope("q", &delivery(1, t, "q"), Bytes::new());
        assert_eq!(
            (e.kind.as_deref(), e.id.as_str(), e.key.as_deref()),
            (Some("OrderPlaced"), "e-7", Some("k-1"))
        );
        let mut received: Vec<&str> = e.headers.iter().map(|(n, _)| n).collect();
        received.sort_unstable();
        let wrote = ["ce-id", "ce_partitionkey", "cloudEvents:type", "x-tenant"];
        assert_eq!(received, wrote, "no name added or renamed on receipt");
        let letter = Message {
            key: e.key.clone(),
            headers: e.headers.clone(),
            payload: e.payload.clone(),
        };
        let props = to_properties(&letter, AttributePrefix::CeUnderscore).expect("encodes");
        let table = props.headers().clone().unwrap_or_default();
        let mut sent: Vec<&str> = table.inner().keys().map(|k| k.as_str()).collect();
        sent.sort_unstable();
        assert_eq!(sent, wrote, "the copy goes out under the producer's names");
        assert_eq!(
            (
                props.message_id().as_ref().map(|m| m.as_str()),
                props.kind().as_ref().map(|k| k.as_str())
            ),
            (Some("e-7"), Some("OrderPlaced")),
            "the properties read the attributes under any binding's name"
        );
    }

    #[test]
    fn an_overlong_header_name_is_an_error_not_a_panic() {
        let m = Message::raw(&b"x"[..]).with_header("h".repeat(300), "v");
        assert!(matches!(
            to_properties(&m, AttributePrefix::CeUnderscore),
            Err(Error::Unencodable(_))
        ));
    }

    #[test]
    fn attributes_go_out_under_the_prefix_and_come_back_under_any() {
        let m = Message::json("OrderPlaced", &1)
            .unwrap_or_else(|_| Message::raw(""))
            .with_key("k")
            .with_source("/orders")
            .with_header("x-tenant", "acme");
        for prefix in [
            AttributePrefix::default(),
            AttributePrefix::CeUnderscore,
            AttributePrefix::CloudEventsUnderscore,
            AttributePrefix::CloudEventsColon,
        ] {
            let props = to_properties(&m, prefix).expect("encodes");
            let table = props.headers().clone().unwrap_or_default();
            let names: Vec<&str> = table.inner().keys().map(|k| k.as_str()).collect();
            let p = prefix.as_str();
            for attr in [
                "id",
                "type",
                "source",
                "specversion",
                "time",
                "partitionkey",
            ] {
                assert!(
                    names.contains(&format!("{p}{attr}").as_str()),
                    "{p}{attr} in {names:?}"
                );
            }
            if prefix != AttributePrefix::CeUnderscore {
                assert!(!names.iter().any(|n| n.starts_with("ce_")), "{names:?}");
            }
            assert!(names.contains(&"x-tenant") && names.contains(&"content-type"));
            let mut d = delivery(1, table, "q");
            d.properties = props;
            let e = to_envelope("q", &d, Bytes::new());
            assert_eq!(e.kind.as_deref(), Some("OrderPlaced"), "{p}");
            assert_eq!(e.source.as_deref(), Some("/orders"), "{p}");
            assert_eq!(e.key.as_deref(), Some("k"), "{p}");
            assert!(e.time.is_some() && e.defects.is_empty(), "{p}");
        }
        assert_eq!(
            AttributePrefix::default().as_str(),
            "ce-",
            "what the SDKs read on RabbitMQ"
        );
    }

    #[test]
    fn every_input_prefix_is_read() {
        for p in ["ce-", "ce_", "cloudEvents_", "cloudEvents:"] {
            let mut t = FieldTable::default();
            for (attr, v) in [
                ("id", "e-1"),
                ("type", "T"),
                ("source", "/s"),
                ("specversion", "1.0"),
            ] {
                t.insert(format!("{p}{attr}").into(), AMQPValue::LongString(v.into()));
            }
            let e = to_envelope("q", &delivery(1, t, "q"), Bytes::new());
            assert_eq!(
                (e.id.as_str(), e.kind.as_deref(), e.source.as_deref()),
                ("e-1", Some("T"), Some("/s")),
                "{p}"
            );
        }
    }

    #[test]
    fn a_structured_event_in_the_content_type_property_is_read_from_the_body() {
        let mut d = delivery(1, FieldTable::default(), "q");
        d.properties = BasicProperties::default()
            .with_content_type("application/cloudevents+json".into())
            .with_headers(FieldTable::default());
        let body = br#"{"specversion":"1.0","id":"e-9","source":"/py","type":"T","data":{"n":1}}"#;
        let e = to_envelope("q", &d, Bytes::from_static(body));
        assert!(e.defects.is_empty(), "{:?}", e.defects);
        assert_eq!((e.id.as_str(), e.source.as_deref()), ("e-9", Some("/py")));
        assert_eq!(&e.payload[..], br#"{"n":1}"#);
        let bad = to_envelope("q", &d, Bytes::from_static(b"{}"));
        assert_eq!(bad.defects.len(), 1, "a poison pill with a reason");
    }
}
