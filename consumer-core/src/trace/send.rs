//! The `send <destination>` span of each message a publisher sends.

use std::borrow::Cow;

use opentelemetry::Context;
use opentelemetry::trace::TraceContextExt;
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::{extract, inject, record_error};
use crate::envelope::names;
use crate::error::Error;
use crate::publish::Outgoing;

/// The send spans of one batch (kind PRODUCER, a child of the context
/// each message carries from where it was made), and the batch as it goes
/// out: each message's `traceparent` names its send span, so consumers
/// continue from the send.
///
/// Every [`Publisher`](crate::Publisher) runs its batch through this:
///
/// ```ignore
/// let sends = Sends::start(self.system(), batch);
/// let results = self.publish_unspanned(sends.batch()).await;
/// sends.finish(&results);
/// ```
///
/// When no subscriber records the spans, the batch goes out untouched
/// (not copied) and the messages keep the context they were made in.
pub struct Sends<'a> {
    batch: Cow<'a, [Outgoing]>,
    spans: Vec<Span>,
}

impl<'a> Sends<'a> {
    /// Starts a span for each message of `batch`.
    pub fn start(system: &'static str, batch: &'a [Outgoing]) -> Self {
        let mut spans = Vec::new();
        let mut rewritten: Option<Vec<Outgoing>> = None;
        for (i, out) in batch.iter().enumerate() {
            let span = send_span(system, out);
            if span.is_disabled() {
                continue;
            }
            let parent = extract(&out.message.headers).ok().flatten();
            if let Some(parent) = parent {
                let _ = span.set_parent(parent);
            }
            let cx: Context = span.context();
            if cx.span().span_context().is_valid() {
                let copy = rewritten.get_or_insert_with(|| batch.to_vec());
                if let Some(o) = copy.get_mut(i) {
                    o.message.headers.remove(names::TRACESTATE);
                    inject(&cx, &mut o.message.headers);
                }
            }
            spans.resize_with(i, Span::none);
            spans.push(span);
        }
        let batch = match rewritten {
            Some(v) => Cow::Owned(v),
            None => Cow::Borrowed(batch),
        };
        Sends { batch, spans }
    }

    /// The batch to publish.
    pub fn batch(&self) -> &[Outgoing] {
        &self.batch
    }

    /// Ends the spans, each failed one with its `error.type`.
    pub fn finish(self, results: &[Result<(), Error>]) {
        for (span, result) in self.spans.iter().zip(results) {
            if let Err(e) = result {
                record_error(span, crate::metrics::error_type(e));
            }
        }
    }
}

fn send_span(system: &'static str, out: &Outgoing) -> Span {
    let span = tracing::info_span!(
        target: "consumer",
        "send",
        otel.name = %format_args!("send {}", out.destination),
        otel.kind = "producer",
        otel.status_code = Empty,
        messaging.system = system,
        messaging.operation.name = "send",
        messaging.operation.type = "send",
        messaging.destination.name = %out.destination,
        messaging.message.id = Empty,
        messaging.message.body.size = out.message.payload.len(),
        messaging.kafka.message.key = Empty,
        error.type = Empty,
        consumer.message.key = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    if let Ok(Some(id)) = out.message.headers.get(names::ID) {
        span.record("messaging.message.id", id);
    }
    if let Some(key) = &out.message.key {
        if system == "kafka" {
            span.record("messaging.kafka.message.key", key.as_str());
        } else {
            span.record("consumer.message.key", key.as_str());
        }
    }
    span
}
