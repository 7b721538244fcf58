//! `traceparent`, `tracestate` and the outbox's `trace_metadata` header
//! with arbitrary bytes: extraction never panics, and a context it accepts
//! is a W3C one that injects back to the same trace and parent.
#![no_main]

use consumer_backend::envelope::{Headers, names};
use consumer_backend::trace;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use opentelemetry::trace::TraceContextExt;

#[derive(Debug, Arbitrary)]
struct Input<'a> {
    traceparent: Option<&'a [u8]>,
    tracestate: Option<&'a [u8]>,
    trace_metadata: Option<&'a [u8]>,
}

fuzz_target!(|input: Input<'_>| {
    let mut headers = Headers::new();
    if let Some(v) = input.traceparent {
        headers.append(names::TRACEPARENT, v);
    }
    if let Some(v) = input.tracestate {
        headers.append(names::TRACESTATE, v);
    }
    if let Some(v) = input.trace_metadata {
        headers.append(trace::TRACE_METADATA, v);
    }
    let Ok(Some(cx)) = trace::extract(&headers) else {
        return;
    };
    let span = cx.span().span_context().clone();
    assert!(span.is_valid());
    let mut out = Headers::new();
    trace::inject(&cx, &mut out);
    let injected = out
        .get(names::TRACEPARENT)
        .ok()
        .flatten()
        .expect("injected");
    assert_eq!(injected.len(), 55, "{injected}");
    if let Some(Ok(original)) = input.traceparent.map(std::str::from_utf8) {
        assert_eq!(
            &injected[3..52],
            &original[3..52],
            "same trace and parent id"
        );
    }
    let back = trace::extract(&out)
        .expect("what we inject parses")
        .expect("present");
    assert_eq!(back.span().span_context().trace_id(), span.trace_id());
});
