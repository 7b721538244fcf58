//! W3C trace context over message headers.
//!
//! Consumers always use the W3C propagator (not the global one): the wire
//! format is part of the framework's contract with producers in any
//! language. A `traceparent` that is malformed or oversized is logged and
//! ignored: the handler then runs in a new root span, and the message is
//! processed as usual.

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

pub mod metadata;
mod send;
mod traceparent;

pub use metadata::TRACE_METADATA;
pub use send::{SendTarget, Sends};
use traceparent::is_w3c_traceparent;

use crate::envelope::{Headers, names};

/// Longest `traceparent` accepted. Version 00 is exactly 55 bytes; later
/// versions may append fields, so allow some room but not unbounded input.
pub const MAX_TRACEPARENT_LEN: usize = 256;
/// Longest `tracestate` accepted (the W3C limit is 32 members of at most
/// 256 bytes; vendors are told to keep it under 512).
pub const MAX_TRACESTATE_LEN: usize = 8192;

struct HeaderExtractor<'a> {
    traceparent: Option<&'a str>,
    tracestate: Option<&'a str>,
}

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            names::TRACEPARENT => self.traceparent,
            names::TRACESTATE => self.tracestate,
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec![names::TRACEPARENT, names::TRACESTATE]
    }
}

struct HeaderInjector<'a>(&'a mut Headers);

impl Injector for HeaderInjector<'_> {
    /// An empty `tracestate` is not sent (W3C Trace Context: vendors should
    /// not send an empty one), and takes any earlier one away: a header of
    /// no value reaches the wire as noise, and on SQS, where every header
    /// is an attribute, one that cannot be an attribute of its own.
    fn set(&mut self, key: &str, value: String) {
        if value.is_empty() {
            self.0.remove(key);
        } else {
            self.0.insert(key, value);
        }
    }
}

/// Why a trace context in the headers was ignored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TraceContextError {
    /// `traceparent` is not valid W3C trace context.
    #[error("traceparent {0:?} is not valid W3C trace context")]
    Malformed(String),
    /// A header is longer than accepted.
    #[error("{name} of {len} bytes is longer than the {max} accepted")]
    Oversized {
        /// Which header.
        name: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A header is not UTF-8.
    #[error("{0} is not valid UTF-8")]
    NotUtf8(&'static str),
}

/// Extracts the producer's trace context from message headers.
///
/// `Ok(None)` when there is none; `Err` when there is one that cannot be
/// used (the caller logs it and starts a root span).
pub fn extract(headers: &Headers) -> Result<Option<Context>, TraceContextError> {
    // Most deliveries carry neither header: one pass says so.
    let carried = headers.iter_bytes().any(|(name, _)| {
        name.eq_ignore_ascii_case(names::TRACEPARENT.as_bytes())
            || name.eq_ignore_ascii_case(TRACE_METADATA.as_bytes())
    });
    if !carried {
        return Ok(None);
    }
    let traceparent = match headers.get(names::TRACEPARENT) {
        Ok(None) => return extract_trace_metadata(headers),
        Ok(Some(v)) => v,
        Err(_) => return Err(TraceContextError::NotUtf8(names::TRACEPARENT)),
    };
    if traceparent.len() > MAX_TRACEPARENT_LEN {
        return Err(TraceContextError::Oversized {
            name: names::TRACEPARENT,
            len: traceparent.len(),
            max: MAX_TRACEPARENT_LEN,
        });
    }
    if !is_w3c_traceparent(traceparent) {
        let shown: String = traceparent.chars().take(64).collect();
        return Err(TraceContextError::Malformed(shown));
    }
    // A bad tracestate never invalidates a good traceparent: drop it alone.
    let tracestate = headers
        .get(names::TRACESTATE)
        .ok()
        .flatten()
        .filter(|s| s.len() <= MAX_TRACESTATE_LEN);
    let cx = TraceContextPropagator::new().extract(&HeaderExtractor {
        traceparent: Some(traceparent),
        tracestate,
    });
    if cx.span().span_context().is_valid() {
        Ok(Some(cx))
    } else {
        let shown: String = traceparent.chars().take(64).collect();
        Err(TraceContextError::Malformed(shown))
    }
}

/// Without `traceparent`, the context may arrive as the outbox's
/// `trace_metadata` JSON (`{"traceparent": "...", "tracestate": "..."}`).
fn extract_trace_metadata(headers: &Headers) -> Result<Option<Context>, TraceContextError> {
    let Ok(Some(raw)) = headers.get(TRACE_METADATA) else {
        return Ok(None);
    };
    match metadata::decode(raw)? {
        Some(inner) => extract(&inner),
        None => Ok(None),
    }
}

/// Injects `cx` as `traceparent`/`tracestate` headers.
pub fn inject(cx: &Context, headers: &mut Headers) {
    TraceContextPropagator::new().inject_context(cx, &mut HeaderInjector(headers));
}

/// The OpenTelemetry context code runs in: the current `tracing` span's
/// when that span is recorded, else the one attached to the current task
/// (a handler's, which the runtime attaches whatever the log filter), else
/// none.
pub fn current() -> Context {
    let cx = tracing::Span::current().context();
    if cx.span().span_context().is_valid() {
        cx
    } else {
        Context::current()
    }
}

/// Marks `span` failed with `error_type` (the closed set of the
/// conventions' `error.type` values the framework uses: `unavailable`,
/// `too_large`, ..., see [`BrokerErrorKind::as_str`](crate::error::BrokerErrorKind::as_str)).
pub fn record_error(span: &tracing::Span, error_type: &'static str) {
    if !span.is_disabled() {
        span.record("error.type", error_type);
        span.record("otel.status_code", "ERROR");
    }
}

/// Injects [`current`]'s context as `traceparent`/`tracestate`.
pub fn inject_current(headers: &mut Headers) {
    inject(&current(), headers);
}

// Here rather than beside `Message`'s other builders: the envelope module
// knows nothing of tracing, so trace can depend on it and not the reverse.
impl crate::envelope::Message {
    /// Injects the current span's W3C trace context (`traceparent`,
    /// `tracestate`), so the consumer's span becomes its child.
    pub fn with_current_trace(mut self) -> Self {
        inject_current(&mut self.headers);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_without_trace_state_sends_no_tracestate() {
        use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
        let span = SpanContext::new(
            TraceId::from_bytes(7u128.to_be_bytes()),
            SpanId::from_bytes(9u64.to_be_bytes()),
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        );
        let cx = Context::new().with_remote_span_context(span);
        let mut h = Headers::new();
        h.insert(names::TRACESTATE, "stale=1");
        inject(&cx, &mut h);
        assert!(h.get_bytes(names::TRACEPARENT).is_some());
        assert_eq!(
            h.get_bytes(names::TRACESTATE),
            None,
            "{:?}",
            h.iter().collect::<Vec<_>>()
        );
    }

    const TP: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn extracts_a_valid_traceparent() {
        let mut h = Headers::new();
        h.insert(names::TRACEPARENT, TP);
        h.insert(names::TRACESTATE, "vendor=x");
        let cx = extract(&h).expect("valid").expect("present");
        let sc = cx.span().span_context().clone();
        assert_eq!(
            sc.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(sc.trace_state().header(), "vendor=x");
        let mut out = Headers::new();
        inject(&cx, &mut out);
        assert_eq!(out.get(names::TRACEPARENT), Ok(Some(TP)));
    }

    #[test]
    fn rejects_malformed_oversized_and_binary_values() {
        for bad in [
            "garbage",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "",
            // W3C test vectors: a trace id one digit short, one-digit
            // version and flags, upper case, version ff, a zero parent,
            // trailing data after version 00.
            "00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01",
            "0-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-1",
            "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
        ] {
            let mut h = Headers::new();
            h.insert(names::TRACEPARENT, bad);
            assert!(
                matches!(extract(&h), Err(TraceContextError::Malformed(_))),
                "{bad}"
            );
        }
        let mut h = Headers::new();
        h.insert(names::TRACEPARENT, "0".repeat(10_000));
        assert!(matches!(
            extract(&h),
            Err(TraceContextError::Oversized { .. })
        ));
        let mut h = Headers::new();
        h.insert(names::TRACEPARENT, vec![0xff]);
        assert!(matches!(extract(&h), Err(TraceContextError::NotUtf8(_))));
        assert!(matches!(extract(&Headers::new()), Ok(None)));
    }

    #[test]
    fn a_later_version_may_append_fields() {
        let mut h = Headers::new();
        h.insert(
            names::TRACEPARENT,
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what-the-future-holds",
        );
        assert!(matches!(extract(&h), Ok(Some(_))));
        h.insert(
            names::TRACEPARENT,
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x",
        );
        assert!(matches!(extract(&h), Err(TraceContextError::Malformed(_))));
    }

    #[test]
    fn falls_back_to_the_outbox_trace_metadata_header() {
        let mut h = Headers::new();
        h.insert(TRACE_METADATA, format!(r#"{{"traceparent":"{TP}"}}"#));
        let cx = extract(&h).expect("valid").expect("present");
        assert_eq!(
            cx.span().span_context().trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        h.insert(TRACE_METADATA, "not json");
        assert!(matches!(extract(&h), Err(TraceContextError::Malformed(_))));
    }
}
