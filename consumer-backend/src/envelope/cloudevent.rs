//! What makes an outgoing message a valid CloudEvent, and how a
//! structured-mode event (`application/cloudevents+json`) is read as the
//! binary-mode message every backend hands the runtime.

use base64::Engine as _;
use bytes::Bytes;
use serde_json::Value;

use super::{HeaderError, Headers, names};

/// The `source` a publisher gives a message that names none: a relative
/// URI-reference, valid wherever the service runs. Not the host name: the
/// CloudEvents `source` names the producing context, which every replica
/// of a service shares, and `source` + `id` stay unique through the
/// UUIDv7 ids the framework generates.
pub const DEFAULT_SOURCE: &str = "/consumer";

/// The media type of a structured-mode JSON CloudEvent.
pub const STRUCTURED_JSON: &str = "application/cloudevents+json";

/// Makes `headers` a valid binary-mode CloudEvent when they name a type:
/// a missing `ce_id` becomes a fresh UUIDv7, a missing `ce_source`
/// becomes `source`, a missing `ce_specversion` becomes `1.0`. Headers
/// with no `ce_type` cannot be a CloudEvent (the type is the one required
/// attribute only the producer knows): they lose any `ce_specversion`, so
/// the message does not claim to be one, and are otherwise left alone.
///
/// Returns whether anything changed; `needs_completion` says so without
/// changing anything.
pub fn complete(headers: &mut Headers, source: &str) -> bool {
    if !needs_completion(headers) {
        return false;
    }
    if !has(headers, names::TYPE) {
        headers.remove(names::SPEC_VERSION);
        return true;
    }
    if !has(headers, names::ID) {
        headers.insert(names::ID, uuid::Uuid::now_v7().to_string());
    }
    if !has(headers, names::SOURCE) {
        headers.insert(names::SOURCE, source);
    }
    if !has(headers, names::SPEC_VERSION) {
        headers.insert(names::SPEC_VERSION, "1.0");
    }
    true
}

/// Whether [`complete`] would change `headers`.
pub fn needs_completion(headers: &Headers) -> bool {
    if has(headers, names::TYPE) {
        !(has(headers, names::ID)
            && has(headers, names::SOURCE)
            && has(headers, names::SPEC_VERSION))
    } else {
        headers.get_bytes(names::SPEC_VERSION).is_some()
    }
}

fn has(headers: &Headers, name: &str) -> bool {
    headers.get_bytes(name).is_some_and(|v| !v.is_empty())
}

/// Whether a `content-type` value is a structured-mode JSON CloudEvent
/// (parameters such as `; charset=utf-8` allowed).
pub(super) fn is_structured(content_type: &[u8]) -> bool {
    let media = content_type
        .split(|b| *b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    media.eq_ignore_ascii_case(STRUCTURED_JSON.as_bytes())
}

/// Reads a structured-mode event into binary mode: the attributes become
/// `ce_*` headers (replacing any the transport carried: the body is the
/// event), `datacontenttype` the `content-type` header, `traceparent` and
/// `tracestate` their own headers, and the payload is `data` (JSON
/// serialized, or the string itself for a non-JSON content type) or the
/// decoded `data_base64`. Every other header is kept.
///
/// A body that is not a valid structured event is an error naming what is
/// wrong; the message is then a poison pill.
pub(super) fn from_structured(
    headers: &Headers,
    payload: &[u8],
) -> Result<(Headers, Bytes), HeaderError> {
    let event = parse_event(payload)?;
    let content_type = match event.get("datacontenttype") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => return Err(bad("has a `datacontenttype` that is not a string")),
    };
    let data = event_data(&event, content_type)?;
    let mut out = attribute_headers(headers, &event, payload.len())?;
    if content_type.is_none() && event.get("data").is_some_and(|d| !d.is_null()) {
        // The JSON format's default for `data` given as JSON.
        out.insert(names::CONTENT_TYPE, "application/json");
    }
    Ok((out, data))
}

/// A structured body that is not a valid event: what is wrong with it.
fn bad(reason: impl std::fmt::Display) -> HeaderError {
    HeaderError {
        name: names::CONTENT_TYPE.to_owned(),
        reason: format!("is `{STRUCTURED_JSON}` but the body {reason}"),
    }
}

/// The event object, with its required attributes and at most one of
/// `data` and `data_base64`.
fn parse_event(payload: &[u8]) -> Result<serde_json::Map<String, Value>, HeaderError> {
    let event = match serde_json::from_slice(payload) {
        Ok(Value::Object(map)) => map,
        Ok(_) => return Err(bad("is not a JSON object")),
        Err(e) => return Err(bad(format_args!("is not JSON: {e}"))),
    };
    for required in ["id", "source", "type", "specversion"] {
        match event.get(required) {
            Some(Value::String(s)) if !s.is_empty() => {}
            Some(Value::String(_)) => return Err(bad(format_args!("has an empty `{required}`"))),
            Some(_) => {
                return Err(bad(format_args!("has a `{required}` that is not a string")));
            }
            None => return Err(bad(format_args!("has no `{required}`"))),
        }
    }
    if event.contains_key("data") && event.contains_key("data_base64") {
        return Err(bad("has both `data` and `data_base64`"));
    }
    Ok(event)
}

/// The payload: `data` as its content type says (JSON serialized, or the
/// string itself), or the decoded `data_base64`.
fn event_data(
    event: &serde_json::Map<String, Value>,
    content_type: Option<&str>,
) -> Result<Bytes, HeaderError> {
    Ok(match (event.get("data"), event.get("data_base64")) {
        (Some(Value::Null) | None, None) => Bytes::new(),
        (_, Some(Value::String(b64))) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map(Bytes::from)
            .map_err(|e| bad(format_args!("has a `data_base64` that is not base64: {e}")))?,
        (_, Some(_)) => return Err(bad("has a `data_base64` that is not a string")),
        (Some(Value::String(s)), None) if !content_type.is_none_or(is_json) => {
            Bytes::from(s.clone().into_bytes())
        }
        (Some(value), None) => Bytes::from(serde_json::to_vec(value).map_err(bad)?),
    })
}

/// The headers of the event: the transport's own, but for the `ce_` ones
/// and `content-type`, which the event's attributes replace.
fn attribute_headers(
    headers: &Headers,
    event: &serde_json::Map<String, Value>,
    payload_len: usize,
) -> Result<Headers, HeaderError> {
    let mut out = Headers::with_capacity(headers.len() + event.len(), payload_len);
    let replaced = |name: &str| {
        let n = name.as_bytes();
        n.len() > 3 && n[..3].eq_ignore_ascii_case(b"ce_")
            || name.eq_ignore_ascii_case(names::CONTENT_TYPE)
            || super::delivery::is_binding_attribute(name)
    };
    for (name, value) in headers.iter().filter(|(n, _)| !replaced(n)) {
        out.append(name, value);
    }
    for (attr, value) in event
        .iter()
        .filter(|(a, _)| !matches!(a.as_str(), "data" | "data_base64"))
    {
        let text = match value {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Null => continue,
            Value::Array(_) | Value::Object(_) => {
                return Err(bad(format_args!(
                    "has an attribute `{attr}` that is not a scalar"
                )));
            }
        };
        match attr.as_str() {
            "datacontenttype" => out.insert(names::CONTENT_TYPE, text),
            "traceparent" | "tracestate" => {
                if headers.get_bytes(attr).is_none() {
                    out.insert(attr, text);
                }
            }
            _ => out.insert(format!("ce_{attr}"), text),
        }
    }
    Ok(out)
}

/// Whether a media type is JSON (`application/json`, `text/json`, `+json`).
fn is_json(content_type: &str) -> bool {
    let media = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    media == "application/json" || media == "text/json" || media.ends_with("+json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typed_message_gets_id_source_and_specversion() {
        let mut h: Headers = [(names::TYPE, "OrderPlaced")].into_iter().collect();
        assert!(complete(&mut h, "/orders"));
        assert_eq!(h.get(names::SOURCE), Ok(Some("/orders")));
        assert_eq!(h.get(names::SPEC_VERSION), Ok(Some("1.0")));
        let id = h.get(names::ID).ok().flatten().unwrap_or_default();
        assert_eq!(
            uuid::Uuid::parse_str(id).map(|u| u.get_version_num()),
            Ok(7)
        );
        assert!(!needs_completion(&h), "complete once, then nothing to do");
    }

    #[test]
    fn what_the_producer_set_is_kept() {
        let mut h: Headers = [
            (names::TYPE, "T"),
            (names::ID, "e-1"),
            (names::SOURCE, "/mine"),
            (names::SPEC_VERSION, "1.0"),
        ]
        .into_iter()
        .collect();
        let before = h.clone();
        assert!(!complete(&mut h, "/default"));
        assert_eq!(h, before);
    }

    #[test]
    fn an_untyped_message_does_not_claim_to_be_a_cloudevent() {
        let mut h: Headers = [(names::SPEC_VERSION, "1.0"), (names::ID, "x")]
            .into_iter()
            .collect();
        assert!(complete(&mut h, "/s"));
        assert_eq!(h.get_bytes(names::SPEC_VERSION), None);
        assert_eq!(h.get_bytes(names::SOURCE), None);
        let mut raw = Headers::new();
        assert!(!complete(&mut raw, "/s"), "a raw message stays raw");
        assert!(raw.is_empty());
    }

    #[test]
    fn structured_content_types_are_recognised() {
        assert!(is_structured(b"application/cloudevents+json"));
        assert!(is_structured(
            b"Application/CloudEvents+JSON; charset=utf-8"
        ));
        assert!(!is_structured(b"application/json"));
        assert!(!is_structured(b"application/cloudevents-batch+json"));
    }
}
