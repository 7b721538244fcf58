//! Trace roots at any log level (no services: the in-memory broker and
//! in-memory SQLite).
//!
//! This binary installs one global subscriber, as an application does with
//! `RUST_LOG=warn`: a global `EnvFilter` at WARN over a log layer and an
//! OpenTelemetry layer, so no span of the framework is recorded. A delivery
//! without a valid parent (no `traceparent`, or a malformed one) must still
//! get a fresh, valid root context, so the outbox row its handler writes and
//! the message it publishes carry a `traceparent`, a new trace per delivery;
//! a valid `traceparent` is still continued. It is a binary of its own
//! because the global subscriber is process-wide.

mod ping;

use std::sync::{LazyLock, Once};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;

const PRODUCER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PRODUCER_TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// The exporter of the OpenTelemetry layer: with the global filter at WARN
/// it must stay empty, or these tests would not test an unrecorded span.
static EXPORTER: LazyLock<InMemorySpanExporter> = LazyLock::new(InMemorySpanExporter::default);

/// Installs the global subscriber once for the whole binary.
fn global_warn_subscriber() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(EXPORTER.clone())
            .build();
        let tracer = provider.tracer("trace-roots");
        std::mem::forget(provider);
        let subscriber = tracing_subscriber::registry()
            .with(EnvFilter::new("warn"))
            .with(tracing_subscriber::fmt::layer().with_test_writer())
            .with(tracing_opentelemetry::layer().with_tracer(tracer));
        tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber");
    });
}

/// [`ping::run`] under the global WARN filter, checking that it recorded
/// no span.
async fn run(traceparents: &[Option<&str>]) -> Vec<ping::Sent> {
    global_warn_subscriber();
    let sent = ping::run(traceparents).await;
    assert!(
        EXPORTER.get_finished_spans().expect("spans").is_empty(),
        "the global filter at WARN really drops every span"
    );
    sent
}

/// The trace id of a valid, sampled W3C `traceparent` (version 00, lower
/// case hex, non-zero ids, flags 01); fails the test otherwise.
fn valid_trace_id(traceparent: Option<&str>, what: &str) -> String {
    let tp = traceparent.unwrap_or_else(|| panic!("{what}: no traceparent"));
    let parts: Vec<&str> = tp.split('-').collect();
    let hex = |s: &str, len: usize| {
        s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    assert!(
        parts.len() == 4
            && parts[0] == "00"
            && hex(parts[1], 32)
            && hex(parts[2], 16)
            && parts[3] == "01"
            && parts[1].bytes().any(|b| b != b'0')
            && parts[2].bytes().any(|b| b != b'0'),
        "{what}: {tp} is not a valid sampled traceparent"
    );
    parts[1].to_owned()
}

/// Without a `traceparent`, and with a malformed one, each delivery's
/// handler runs in a fresh root: its outbox row and its message carry a
/// valid `traceparent` of that root's trace, a new trace per delivery.
#[tokio::test(flavor = "current_thread")]
async fn a_delivery_without_a_valid_parent_starts_a_trace_that_what_it_sends_carries() {
    let sent = run(&[None, Some("garbage"), None, Some("00-zz-00-01")]).await;
    let mut traces = Vec::new();
    for (i, s) in sent.iter().enumerate() {
        let row = valid_trace_id(s.outbox.as_deref(), &format!("delivery {i}'s outbox row"));
        let message = valid_trace_id(
            s.published.as_deref(),
            &format!("delivery {i}'s published message"),
        );
        assert_eq!(row, message, "delivery {i}: one trace for all it sends");
        assert_eq!(s.seen, row, "delivery {i}: MessageContext::trace_context");
        traces.push(row);
    }
    let distinct: std::collections::BTreeSet<&String> = traces.iter().collect();
    assert_eq!(
        distinct.len(),
        traces.len(),
        "a new trace per delivery: {traces:?}"
    );
}

/// A valid `traceparent` is continued: with no span recorded, what the
/// handler sends names the producer's span as its parent.
#[tokio::test(flavor = "current_thread")]
async fn a_valid_traceparent_is_still_continued() {
    let sent = run(&[Some(PRODUCER_TRACEPARENT)]).await;
    assert_eq!(sent[0].outbox.as_deref(), Some(PRODUCER_TRACEPARENT));
    assert_eq!(sent[0].published.as_deref(), Some(PRODUCER_TRACEPARENT));
    assert_eq!(sent[0].seen, PRODUCER_TRACE);
}
