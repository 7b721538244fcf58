//! How a message's headers travel as SQS message attributes, within SQS's
//! limit of ten attributes per message, and how a payload that is not SQS
//! text travels in a body.
//!
//! # The mapping
//!
//! * Every header is a `String` attribute of the same name: the
//!   CloudEvents attributes keep their Kafka-binding names (`ce_id`,
//!   `ce_type`, `ce_source`, `ce_specversion`, `ce_time`, `ce_subject`,
//!   `ce_partitionkey`), the content type is `content-type`, the trace
//!   context is `traceparent` and `tracestate`, and the framework's own are
//!   `x-consumer-attempt`, `x-consumer-first-failure`, ...
//! * When the headers do not all fit, the first ones in this order are
//!   attributes of their own: `traceparent`, `tracestate`, `ce_id`,
//!   `ce_type`, `ce_source`, `ce_specversion`, `ce_time`, `content-type`,
//!   `ce_subject`, `ce_partitionkey`, then the others in their order; the
//!   rest go, in order, into one attribute, [`HEADERS`]
//!   (`x-consumer-headers`): a JSON array of `[name, value]` pairs, a value
//!   that is not UTF-8 as `{"base64": "..."}`. So do headers SQS cannot
//!   carry as attributes of their own: a name SQS refuses (other
//!   characters than `A-Za-z0-9_-.`, over 256 characters, an `AWS.` or
//!   `Amazon.` prefix), an empty value, a value that is not SQS text, a
//!   second header of the same name.
//! * A dead letter's context (`x-dlq-kind`, `x-dlq-error`, `x-dlq-causes`,
//!   `x-dlq-attempts`, the first and last failure, the handler, the
//!   origin, the message id, the key, and what a letter left out) is one
//!   attribute, [`DEAD_LETTER_CONTEXT`] (`x-dlq-context`): a JSON object of
//!   those headers without their `x-dlq-` prefix, readable in the AWS
//!   console.
//! * A payload that is not SQS text (not UTF-8, or with characters SQS
//!   refuses, such as NUL) is sent base64-encoded, with the attribute
//!   [`BODY_ENCODING`] (`x-consumer-body-encoding`) set to `base64`.
//!
//! Reading goes the other way, and never fails: attributes of any type
//! from other clients are headers (`Number` as its text, `Binary` as its
//! bytes), and a malformed packed attribute is kept as a header of its
//! own name.

use base64::Engine as _;
use bytes::Bytes;
use consumer_backend::Headers;
use consumer_backend::envelope::HeaderError;
use serde_json::{Map, Value};

use crate::client::AttributeValue;

/// The attribute holding the headers that did not fit, as a JSON array.
pub const HEADERS: &str = "x-consumer-headers";
/// The attribute holding a dead letter's context, as a JSON object.
pub const DEAD_LETTER_CONTEXT: &str = "x-dlq-context";
/// The attribute saying the body is base64 (`base64`).
pub const BODY_ENCODING: &str = "x-consumer-body-encoding";
/// The most message attributes SQS takes per message.
pub const MAX_ATTRIBUTES: usize = 10;
/// The prefix of a dead letter's context headers.
const DEAD_LETTER_PREFIX: &str = "x-dlq-";

/// The headers that get attributes of their own first, in this order.
const FIRST: [&str; 10] = [
    "traceparent",
    "tracestate",
    "ce_id",
    "ce_type",
    "ce_source",
    "ce_specversion",
    "ce_time",
    "content-type",
    "ce_subject",
    "ce_partitionkey",
];

/// A message as SQS carries it: a body and at most ten attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed {
    /// The body.
    pub body: String,
    /// The attributes.
    pub attributes: Vec<(String, AttributeValue)>,
}

impl Packed {
    /// What SQS counts toward its size limit: the body, and each
    /// attribute's name, data type and value.
    pub fn size(&self) -> usize {
        self.body.len()
            + self
                .attributes
                .iter()
                .map(|(n, v)| n.len() + v.size())
                .sum::<usize>()
    }
}

/// Whether SQS takes `name` as a message attribute name.
pub fn is_valid_attribute_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    !name.is_empty()
        && name.len() <= 256
        && !name.starts_with('.')
        && !name.ends_with('.')
        && !name.contains("..")
        && !lower.starts_with("aws.")
        && !lower.starts_with("amazon.")
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Whether SQS takes `text` in a body or a `String` attribute: XML's
/// characters (tab, line feed, carriage return, and U+0020 up, without
/// U+FFFE and U+FFFF).
pub fn is_sqs_text(text: &str) -> bool {
    text.chars().all(|c| {
        matches!(c, '\t' | '\n' | '\r') || (c >= ' ' && c != '\u{FFFE}' && c != '\u{FFFF}')
    })
}

/// The headers and payload as SQS carries them (see the module docs).
pub fn pack(headers: &Headers, payload: &[u8]) -> Packed {
    let mut fixed: Vec<(String, AttributeValue)> = Vec::new();
    let body = match std::str::from_utf8(payload) {
        Ok(text) if is_sqs_text(text) => text.to_owned(),
        _ => {
            fixed.push((BODY_ENCODING.to_owned(), AttributeValue::string("base64")));
            base64::engine::general_purpose::STANDARD.encode(payload)
        }
    };
    let Sorted {
        context,
        mut native,
        mut overflow,
    } = Sorted::of(headers);
    if !context.is_empty() {
        fixed.push((
            DEAD_LETTER_CONTEXT.to_owned(),
            AttributeValue::string(Value::Object(context).to_string()),
        ));
    }
    fit(&mut native, &mut overflow, MAX_ATTRIBUTES - fixed.len());
    let mut attributes = fixed;
    attributes.extend(
        native
            .into_iter()
            .map(|(_, name, text)| (name.to_owned(), AttributeValue::string(text))),
    );
    if !overflow.is_empty() {
        attributes.push((HEADERS.to_owned(), packed_headers(overflow)));
    }
    Packed { body, attributes }
}

/// The headers sorted by how they travel, each with its position.
struct Sorted<'h> {
    /// A dead letter's context, by field (the name without `x-dlq-`).
    context: Map<String, Value>,
    /// Those that can be attributes of their own.
    native: Vec<(usize, &'h str, &'h str)>,
    /// Those that cannot: they go into [`HEADERS`].
    overflow: Vec<(usize, &'h str, &'h [u8])>,
}

impl<'h> Sorted<'h> {
    /// A header can be an attribute of its own when its name is one SQS
    /// takes and none of this module's, its value non-empty SQS text, and
    /// no header before it has the same name (SQS's names ignore case).
    fn of(headers: &'h Headers) -> Self {
        let mut sorted = Sorted {
            context: Map::new(),
            native: Vec::new(),
            overflow: Vec::new(),
        };
        for (i, (name, value)) in headers.iter().enumerate() {
            if let Some(field) = name.strip_prefix(DEAD_LETTER_PREFIX) {
                sorted
                    .context
                    .insert(field.to_owned(), Value::String(lossless_text(value)));
                continue;
            }
            let reserved = [HEADERS, DEAD_LETTER_CONTEXT, BODY_ENCODING]
                .iter()
                .any(|r| r.eq_ignore_ascii_case(name));
            let text = std::str::from_utf8(value)
                .ok()
                .filter(|t| !t.is_empty() && is_sqs_text(t));
            let seen = sorted
                .native
                .iter()
                .any(|(_, n, _)| n.eq_ignore_ascii_case(name));
            match text {
                Some(text) if !reserved && !seen && is_valid_attribute_name(name) => {
                    sorted.native.push((i, name, text));
                }
                _ => sorted.overflow.push((i, name, value)),
            }
        }
        sorted
    }
}

/// Orders `native` (the ones named first, in that order, then the others
/// in theirs) and, when they do not all fit in `room` attributes or some
/// must be packed anyway, moves the last ones to `overflow`, leaving one
/// attribute for [`HEADERS`]; `overflow` stays in the headers' order.
fn fit<'h>(
    native: &mut Vec<(usize, &'h str, &'h str)>,
    overflow: &mut Vec<(usize, &'h str, &'h [u8])>,
    room: usize,
) {
    let rank = |name: &str| {
        FIRST
            .iter()
            .position(|f| f.eq_ignore_ascii_case(name))
            .unwrap_or(FIRST.len())
    };
    native.sort_by_key(|(i, name, _)| (rank(name), *i));
    if native.len() > room || !overflow.is_empty() {
        let keep = room.saturating_sub(1).min(native.len());
        for (i, name, text) in native.drain(keep..) {
            overflow.push((i, name, text.as_bytes()));
        }
        overflow.sort_by_key(|(i, _, _)| *i);
    }
}

/// The [`HEADERS`] attribute: `[name, value]` pairs, a value that is not
/// UTF-8 as `{"base64": "..."}`.
fn packed_headers(overflow: Vec<(usize, &str, &[u8])>) -> AttributeValue {
    let pairs: Vec<Value> = overflow
        .into_iter()
        .map(|(_, name, value)| {
            let value = match std::str::from_utf8(value) {
                Ok(text) => Value::String(text.to_owned()),
                Err(_) => serde_json::json!({
                    "base64": base64::engine::general_purpose::STANDARD.encode(value)
                }),
            };
            Value::Array(vec![Value::String(name.to_owned()), value])
        })
        .collect();
    AttributeValue::string(Value::Array(pairs).to_string())
}

/// A context value as JSON text: context headers are written by the
/// runtime as text; anything else is kept readable.
fn lossless_text(value: &[u8]) -> String {
    String::from_utf8_lossy(value).into_owned()
}

/// A received message's headers and payload, and what in them does not
/// decode.
#[derive(Debug)]
pub struct Unpacked {
    /// The headers, the framework's and the producer's.
    pub headers: Headers,
    /// The payload.
    pub payload: Bytes,
    /// A body marked base64 that is not, or a packed header whose base64
    /// value is not: the message is poison, with this reason (it was not
    /// written by a publisher of this framework, or was altered).
    pub defects: Vec<HeaderError>,
}

fn not_base64(name: &str, what: &str, e: &base64::DecodeError) -> HeaderError {
    HeaderError {
        name: name.to_owned(),
        reason: format!("{what} is marked base64 but does not decode: {e}"),
    }
}

/// The headers and payload of a received message (see the module docs).
/// What is not packed as this module packs stays as it came; base64 that
/// does not decode is a defect (see [`Unpacked::defects`]).
pub fn unpack(body: &str, attributes: &[(String, AttributeValue)]) -> Unpacked {
    let mut defects = Vec::new();
    let mut headers = Headers::with_capacity(attributes.len(), 256);
    let mut packed: Option<&AttributeValue> = None;
    let mut context: Option<&AttributeValue> = None;
    let mut base64_body = false;
    let mut plain: Vec<&(String, AttributeValue)> = attributes.iter().collect();
    // SQS returns attributes as a map: a stable order for the headers.
    plain.sort_by(|a, b| a.0.cmp(&b.0));
    for attr in plain {
        let (name, value) = attr;
        if name == HEADERS {
            packed = Some(value);
        } else if name == DEAD_LETTER_CONTEXT {
            context = Some(value);
        } else if name == BODY_ENCODING && value.bytes() == b"base64" {
            base64_body = true;
        } else {
            headers.append(name, value.bytes());
        }
    }
    if let Some(value) = packed {
        match serde_json::from_slice::<Vec<(String, Value)>>(value.bytes()) {
            Ok(pairs) => {
                for (name, value) in pairs {
                    match value {
                        Value::String(text) => headers.append(&name, text),
                        Value::Object(o) => match o.get("base64").and_then(Value::as_str) {
                            Some(b) => match base64::engine::general_purpose::STANDARD.decode(b) {
                                Ok(decoded) => headers.append(&name, decoded),
                                Err(e) => defects.push(not_base64(&name, "the header", &e)),
                            },
                            None => headers.append(&name, Value::Object(o).to_string()),
                        },
                        other => headers.append(&name, other.to_string()),
                    }
                }
            }
            Err(_) => headers.append(HEADERS, value.bytes()),
        }
    }
    if let Some(value) = context {
        match serde_json::from_slice::<Map<String, Value>>(value.bytes()) {
            Ok(fields) => {
                for (field, value) in fields {
                    let text = match value {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    headers.append(format!("{DEAD_LETTER_PREFIX}{field}"), text);
                }
            }
            Err(_) => headers.append(DEAD_LETTER_CONTEXT, value.bytes()),
        }
    }
    let payload = if base64_body {
        match base64::engine::general_purpose::STANDARD.decode(body) {
            Ok(bytes) => Bytes::from(bytes),
            Err(e) => {
                defects.push(not_base64(BODY_ENCODING, "the body", &e));
                Bytes::copy_from_slice(body.as_bytes())
            }
        }
    } else {
        Bytes::copy_from_slice(body.as_bytes())
    };
    Unpacked {
        headers,
        payload,
        defects,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(h: &Headers) -> Vec<(String, Vec<u8>)> {
        let mut v: Vec<_> = h.iter().map(|(n, v)| (n.to_owned(), v.to_vec())).collect();
        v.sort();
        v
    }

    #[test]
    fn a_few_headers_are_attributes_of_their_own() {
        let h: Headers = [("ce_id", "m-1"), ("ce_type", "T"), ("x-tenant", "acme")]
            .into_iter()
            .collect();
        let p = pack(&h, b"{}");
        assert_eq!(p.attributes.len(), 3);
        assert!(p.attributes.iter().all(|(n, _)| n != HEADERS));
        let Unpacked {
            headers: back,
            payload: body,
            ..
        } = unpack(&p.body, &p.attributes);
        assert_eq!(sorted(&back), sorted(&h));
        assert_eq!(&body[..], b"{}");
    }

    #[test]
    fn many_headers_keep_the_first_named_ones_and_pack_the_rest_within_ten() {
        let mut h = Headers::new();
        for i in 0..14 {
            h.append(format!("x-h{i}"), format!("v{i}"));
        }
        h.append(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        );
        h.append("ce_id", "m-1");
        h.append("x-h0", "again");
        h.append("bad name", "v");
        h.append("x-empty", "");
        h.append("x-bin", [0u8, 0xff]);
        let p = pack(&h, b"x");
        assert_eq!(p.attributes.len(), MAX_ATTRIBUTES);
        let names: Vec<&str> = p.attributes.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(&names[..2], ["traceparent", "ce_id"]);
        assert_eq!(names.last(), Some(&HEADERS));
        let Unpacked {
            headers: back,
            payload: _,
            ..
        } = unpack(&p.body, &p.attributes);
        assert_eq!(sorted(&back), sorted(&h), "every header comes back");
        assert_eq!(back.get_bytes("x-bin"), Some(&[0u8, 0xff][..]));
    }

    #[test]
    fn a_dead_letters_context_is_one_json_attribute() {
        let h: Headers = [
            ("ce_id", "m-1"),
            ("x-dlq-kind", "poison"),
            ("x-dlq-error", "bad JSON"),
            ("x-dlq-causes", "line 1\nline 2"),
            ("x-dlq-attempts", "1"),
        ]
        .into_iter()
        .collect();
        let p = pack(&h, b"{");
        let context = p
            .attributes
            .iter()
            .find(|(n, _)| n == DEAD_LETTER_CONTEXT)
            .expect("the context attribute");
        let json: Value = serde_json::from_slice(context.1.bytes()).expect("JSON");
        assert_eq!(json["kind"], "poison");
        assert_eq!(p.attributes.len(), 2);
        let Unpacked {
            headers: back,
            payload: _,
            ..
        } = unpack(&p.body, &p.attributes);
        assert_eq!(sorted(&back), sorted(&h));
    }

    #[test]
    fn a_payload_that_is_not_sqs_text_travels_as_base64() {
        for payload in [&[0xffu8, 0xfe][..], b"nul\0inside"] {
            let p = pack(&Headers::new(), payload);
            assert!(is_sqs_text(&p.body));
            let Unpacked {
                headers: _,
                payload: back,
                ..
            } = unpack(&p.body, &p.attributes);
            assert_eq!(&back[..], payload);
        }
    }

    #[test]
    fn attributes_of_any_type_from_other_clients_are_read() {
        let attrs = vec![
            (
                "amount".to_owned(),
                AttributeValue::Number {
                    data_type: "Number.float".into(),
                    value: "12.5".into(),
                },
            ),
            (
                "blob".to_owned(),
                AttributeValue::Binary {
                    data_type: "Binary".into(),
                    value: Bytes::from_static(&[1, 2]),
                },
            ),
            (HEADERS.to_owned(), AttributeValue::string("not json")),
        ];
        let Unpacked {
            headers: h,
            payload: body,
            ..
        } = unpack("plain text", &attrs);
        assert_eq!(h.get("amount"), Ok(Some("12.5")));
        assert_eq!(h.get_bytes("blob"), Some(&[1u8, 2][..]));
        assert_eq!(h.get(HEADERS), Ok(Some("not json")), "kept, not a crash");
        assert_eq!(&body[..], b"plain text");
    }

    #[test]
    fn base64_that_does_not_decode_is_a_defect_not_a_raw_fallback() {
        let attrs = vec![(BODY_ENCODING.to_owned(), AttributeValue::string("base64"))];
        let u = unpack("not base64 at all!", &attrs);
        assert_eq!(u.defects.len(), 1, "{:?}", u.defects);
        assert_eq!(u.defects[0].name, BODY_ENCODING);
        assert!(
            u.defects[0].reason.contains("the body"),
            "{}",
            u.defects[0].reason
        );

        let packed = r#"[["x-bin", {"base64": "%%%"}], ["x-ok", {"base64": "AAE="}]]"#;
        let attrs = vec![(HEADERS.to_owned(), AttributeValue::string(packed))];
        let u = unpack("{}", &attrs);
        assert_eq!(u.defects.len(), 1, "{:?}", u.defects);
        assert_eq!(u.defects[0].name, "x-bin");
        assert_eq!(u.headers.get_bytes("x-ok"), Some(&[0u8, 1][..]));
    }
}
