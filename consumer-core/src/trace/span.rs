//! The span a handler runs in, and the OpenTelemetry context it runs in
//! whatever the application's log filter.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, TraceContextExt, TraceFlags, TraceState};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};
use tracing::Span;
use tracing::field::{Empty, display};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::extract;
use crate::envelope::{Envelope, Placement};

/// A malformed trace context is logged at most once per this many seconds
/// (with how many went unlogged): a producer that writes garbage must not
/// flood the log.
const MALFORMED_LOG_EVERY_SECS: u64 = 10;

static MALFORMED_LAST_LOGGED: AtomicU64 = AtomicU64::new(0);
static MALFORMED_UNLOGGED: AtomicU64 = AtomicU64::new(0);

/// What every span of one consumer carries besides the delivery's own
/// attributes.
#[derive(Debug, Clone)]
pub struct SpanScope {
    /// `messaging.system`.
    pub system: &'static str,
    /// `messaging.consumer.group.name`: the Kafka consumer group.
    pub group: Option<Box<str>>,
    /// `server.address` and `server.port`.
    pub server: Option<(Box<str>, u16)>,
}

/// The context a delivery is processed in: the producer's, from its
/// headers, or none (a root: its handler gets a fresh one, see
/// [`consume_span`]). A malformed trace context is logged (at most once
/// every 10 s) and ignored.
///
/// The runtime attaches it to everything it does for the delivery, so the
/// handler's span ([`consume_span`]) and the settle spans
/// ([`settle_span`]) continue the producer's trace even when the
/// application's subscriber records none of them.
pub fn delivery_context(envelope: &Envelope) -> Context {
    match extract(&envelope.headers) {
        Ok(parent) => parent.unwrap_or_default(),
        Err(e) => {
            log_malformed(&envelope.id, &e);
            Context::new()
        }
    }
}

/// The span a handler runs in (`process <destination>`, kind CONSUMER),
/// and the OpenTelemetry context to attach to its task: a child of the
/// current context (the delivery's: see [`delivery_context`]). Attributes
/// follow the OpenTelemetry messaging conventions; what they do not name
/// is under `consumer.`.
///
/// The context does not depend on the span being recorded: when the
/// application's subscriber filters the span out (a global filter at
/// WARN, say), the context is the producer's own, so what the handler
/// sends on ([`trace::inject_current`](super::inject_current), the outbox)
/// still continues the producer's trace; and a delivery without a valid
/// parent gets a fresh root (new random trace and span ids, sampled), so
/// what its handler sends still carries a `traceparent`.
pub fn consume_span(envelope: &Envelope, handler: &str, scope: &SpanScope) -> (Span, Context) {
    let parent = Context::current();
    if spans_go_nowhere() {
        return (Span::none(), or_fresh_root(parent));
    }
    let span = tracing::info_span!(
        target: "consumer::runtime",
        "process",
        otel.name = %format_args!("process {}", envelope.origin.channel),
        otel.kind = "consumer",
        otel.status_code = Empty,
        messaging.system = scope.system,
        messaging.operation.name = "process",
        messaging.operation.type = "process",
        messaging.destination.name = Empty,
        messaging.destination.partition.id = Empty,
        messaging.consumer.group.name = Empty,
        messaging.message.id = %envelope.id,
        messaging.message.body.size = envelope.payload.len(),
        messaging.kafka.message.key = Empty,
        messaging.kafka.offset = Empty,
        messaging.rabbitmq.destination.routing_key = Empty,
        messaging.rabbitmq.message.delivery_tag = Empty,
        server.address = Empty,
        server.port = Empty,
        error.type = Empty,
        consumer.handler = handler,
        consumer.delivery.attempt = envelope.attempt,
        consumer.message.key = Empty,
        consumer.offset = Empty,
    );
    if span.is_disabled() {
        return (span, or_fresh_root(parent));
    }
    record_delivery(&span, envelope, scope);
    if let Some(key) = &envelope.key {
        if scope.system == "kafka" {
            span.record("messaging.kafka.message.key", key.as_str());
        } else {
            span.record("consumer.message.key", key.as_str());
        }
    }
    let _ = span.set_parent(parent.clone());
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        // Recorded by no OpenTelemetry layer (a fmt-only subscriber, or an
        // OpenTelemetry layer with a filter of its own): go on in the
        // producer's context.
        return (span, or_fresh_root(parent));
    }
    (span, cx)
}

/// Whether no span could go anywhere: no `tracing` subscriber was ever
/// set, and no `log` logger takes INFO. A span macro then returns a
/// disabled span anyway, but with `tracing`'s `log` feature on (another
/// crate may turn it on) it first builds every field for the `log` crate,
/// which costs more than the rest of a delivery's spans.
fn spans_go_nowhere() -> bool {
    !tracing::dispatcher::has_been_set() && log::max_level() < log::LevelFilter::Info
}

/// `parent` when it holds a valid span context, else a fresh root: the
/// context of a handler whose span no OpenTelemetry layer records.
fn or_fresh_root(parent: Context) -> Context {
    if parent.span().span_context().is_valid() {
        parent
    } else {
        parent.with_remote_span_context(fresh_root())
    }
}

/// A new trace's root span context, for a delivery without a valid parent
/// whose handler span is not recorded: random trace and span ids (the
/// SDK's own generator), sampled as the SDK's default sampler
/// (`ParentBased(AlwaysOn)`) samples a root, so downstream services record
/// what follows. The span itself is never exported: what the handler sends
/// names it as parent, and all of it shares the trace id.
fn fresh_root() -> SpanContext {
    let ids = RandomIdGenerator::default();
    SpanContext::new(
        ids.new_trace_id(),
        ids.new_span_id(),
        TraceFlags::SAMPLED,
        false,
        TraceState::default(),
    )
}

/// A span for one settle operation on a delivery (`ack`, `release`,
/// `retry`, `dead_letter`, named `<operation> <destination>`, kind
/// CLIENT, `messaging.operation.type` `settle`), a child of the current
/// context: the handler's last attempt, else the delivery's.
pub fn settle_span(envelope: &Envelope, operation: &'static str, scope: &SpanScope) -> Span {
    if spans_go_nowhere() {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: "consumer::runtime",
        "settle",
        otel.name = %format_args!("{operation} {}", envelope.origin.channel),
        otel.kind = "client",
        otel.status_code = Empty,
        messaging.system = scope.system,
        messaging.operation.name = operation,
        messaging.operation.type = "settle",
        messaging.destination.name = Empty,
        messaging.destination.partition.id = Empty,
        messaging.consumer.group.name = Empty,
        messaging.message.id = %envelope.id,
        messaging.kafka.offset = Empty,
        messaging.rabbitmq.destination.routing_key = Empty,
        messaging.rabbitmq.message.delivery_tag = Empty,
        server.address = Empty,
        server.port = Empty,
        error.type = Empty,
        consumer.offset = Empty,
    );
    if !span.is_disabled() {
        record_delivery(&span, envelope, scope);
        let _ = span.set_parent(Context::current());
    }
    span
}

/// The attributes every span about one delivery has: destination, where
/// it sat, the group and the broker.
fn record_delivery(span: &Span, envelope: &Envelope, scope: &SpanScope) {
    span.record(
        "messaging.destination.name",
        &*envelope.origin.span_destination(),
    );
    match &envelope.origin.placement {
        Placement::Log { partition, offset } => {
            span.record("messaging.destination.partition.id", display(partition));
            if scope.system == "kafka" {
                span.record("messaging.kafka.offset", offset);
            } else {
                span.record("consumer.offset", offset);
            }
        }
        Placement::Exchange {
            routing_key,
            delivery_tag,
            ..
        } => {
            if !routing_key.is_empty() {
                span.record(
                    "messaging.rabbitmq.destination.routing_key",
                    routing_key.as_str(),
                );
            }
            span.record("messaging.rabbitmq.message.delivery_tag", delivery_tag);
        }
        _ => {}
    }
    if let Some(group) = &scope.group {
        span.record("messaging.consumer.group.name", &**group);
    }
    if let Some((address, port)) = &scope.server {
        span.record("server.address", &**address);
        span.record("server.port", port);
    }
}

fn log_malformed(message_id: &str, error: &super::TraceContextError) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let last = MALFORMED_LAST_LOGGED.load(Ordering::Relaxed);
    if now >= last + MALFORMED_LOG_EVERY_SECS
        && MALFORMED_LAST_LOGGED
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        let unlogged = MALFORMED_UNLOGGED.swap(0, Ordering::Relaxed);
        tracing::warn!(
            target: "consumer::runtime",
            message_id,
            error = %error,
            unlogged_since_last = unlogged,
            "ignoring a message's malformed trace context; its handler runs in a new root span"
        );
    } else {
        MALFORMED_UNLOGGED.fetch_add(1, Ordering::Relaxed);
    }
}
