//! The outbox's `trace_metadata` JSON, `{"traceparent": "...",
//! "tracestate": "..."}`: written by `Outbox::enqueue` from the current
//! context, read back by the relay, and by consumers when a CDC pipeline
//! places it in a header instead of `traceparent`. The one codec for all
//! three.

use std::collections::BTreeMap;

use super::{MAX_TRACEPARENT_LEN, MAX_TRACESTATE_LEN, TraceContextError};
use crate::envelope::{Headers, names};

/// Header carrying an outbox row's `trace_metadata` JSON, as a CDC pipeline
/// (Debezium's outbox event router) places it.
pub const TRACE_METADATA: &str = "trace_metadata";

/// Longest `trace_metadata` read: both headers at their limits, plus the
/// JSON around them.
const MAX_LEN: usize = MAX_TRACEPARENT_LEN + MAX_TRACESTATE_LEN + 64;

/// The `traceparent` and `tracestate` of `headers` (non-empty ones only)
/// as the JSON stored with an outbox event; `None` when there is neither.
pub fn encode(headers: &Headers) -> Option<String> {
    let mut map = BTreeMap::new();
    for name in [names::TRACEPARENT, names::TRACESTATE] {
        if let Ok(Some(v)) = headers.get(name)
            && !v.is_empty()
        {
            map.insert(name, v);
        }
    }
    if map.is_empty() {
        None
    } else {
        serde_json::to_string(&map).ok()
    }
}

/// The current context (see [`current`](super::current)) as
/// `trace_metadata`.
pub fn encode_current() -> Option<String> {
    let mut headers = Headers::new();
    super::inject_current(&mut headers);
    encode(&headers)
}

/// `traceparent` and `tracestate` headers from `trace_metadata` JSON
/// (other members are ignored). `Ok(None)` when it holds no
/// `traceparent`; an error when it is too long or not a JSON object of
/// strings. The values are not checked here: [`extract`](super::extract)
/// does that.
pub fn decode(raw: &str) -> Result<Option<Headers>, TraceContextError> {
    if raw.len() > MAX_LEN {
        return Err(TraceContextError::Oversized {
            name: TRACE_METADATA,
            len: raw.len(),
            max: MAX_LEN,
        });
    }
    let map: BTreeMap<String, String> = serde_json::from_str(raw)
        .map_err(|_| TraceContextError::Malformed(raw.chars().take(64).collect()))?;
    if !map.contains_key(names::TRACEPARENT) {
        return Ok(None);
    }
    let mut headers = Headers::new();
    for name in [names::TRACEPARENT, names::TRACESTATE] {
        if let Some(v) = map.get(name) {
            headers.insert(name, v.as_str());
        }
    }
    Ok(Some(headers))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn what_is_encoded_decodes_to_the_same_headers() {
        let mut h = Headers::new();
        h.insert(names::TRACEPARENT, TP);
        h.insert(names::TRACESTATE, "vendor=x");
        h.insert("x-other", "not trace context");
        let json = encode(&h).unwrap_or_default();
        assert_eq!(
            json,
            format!(r#"{{"traceparent":"{TP}","tracestate":"vendor=x"}}"#)
        );
        let back = decode(&json).ok().flatten().unwrap_or_default();
        assert_eq!(back.get(names::TRACEPARENT), Ok(Some(TP)));
        assert_eq!(back.get(names::TRACESTATE), Ok(Some("vendor=x")));
        assert_eq!(back.len(), 2);
    }

    #[test]
    fn empty_values_and_no_context_encode_to_nothing() {
        let mut h = Headers::new();
        h.insert(names::TRACESTATE, "");
        assert_eq!(encode(&h), None);
        assert_eq!(encode(&Headers::new()), None);
    }

    #[test]
    fn decoding_refuses_what_is_not_an_object_of_strings_or_too_long() {
        assert!(matches!(decode(r#"{"tracestate":"a=b"}"#), Ok(None)));
        for bad in ["not json", "[1]", r#"{"traceparent": 1}"#] {
            assert!(
                matches!(decode(bad), Err(TraceContextError::Malformed(_))),
                "{bad}"
            );
        }
        let long = format!(r#"{{"traceparent":"{}"}}"#, "0".repeat(MAX_LEN));
        assert!(matches!(
            decode(&long),
            Err(TraceContextError::Oversized { .. })
        ));
    }
}
