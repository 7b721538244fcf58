//! The `send <destination>` span of each message a publisher sends.

use std::borrow::Cow;

use opentelemetry::Context;
use opentelemetry::trace::TraceContextExt;
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::{extract, inject, record_error};
use crate::envelope::cloudevent::{self, DEFAULT_SOURCE};
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
/// ```
/// use consumer_backend::{Error, Outgoing, Publisher, Sends};
///
/// struct Discard;
///
/// impl Discard {
///     /// The broker's own publish, without spans.
///     async fn publish_unspanned(&self, batch: &[Outgoing]) -> Vec<Result<(), Error>> {
///         batch.iter().map(|_| Ok(())).collect()
///     }
/// }
///
/// impl Publisher for Discard {
///     fn system(&self) -> &'static str {
///         "discard"
///     }
///
///     async fn publish(&self, batch: &[Outgoing]) -> Vec<Result<(), Error>> {
///         let sends = Sends::start(self.system(), batch);
///         let results = self.publish_unspanned(sends.batch()).await;
///         sends.finish(&results);
///         results
///     }
/// }
/// ```
///
/// When no subscriber records the spans, the batch goes out untouched
/// (not copied) and the messages keep the context they were made in.
pub struct Sends<'a> {
    batch: Cow<'a, [Outgoing]>,
    spans: Vec<Span>,
}

/// How a span names where a message goes, where the system's conventions
/// say more than [`Outgoing::destination`] (RabbitMQ: the exchange and
/// the routing key).
#[derive(Debug, Clone)]
pub struct SendTarget<'a> {
    /// `messaging.destination.name`.
    pub name: Cow<'a, str>,
    /// What the span name says after `send`: the destination, or a part
    /// of it that does not grow with traffic (the conventions want few
    /// span names).
    pub span_name: Cow<'a, str>,
    /// `messaging.rabbitmq.destination.routing_key`.
    pub routing_key: Option<Cow<'a, str>>,
}

impl<'a> SendTarget<'a> {
    /// The destination as given, for both names.
    pub fn of(out: &'a Outgoing) -> Self {
        Self {
            name: Cow::Borrowed(&out.destination),
            span_name: Cow::Borrowed(&out.destination),
            routing_key: None,
        }
    }
}

impl<'a> Sends<'a> {
    /// Starts a span for each message of `batch`, named by its
    /// destination; messages that name no source get
    /// [`DEFAULT_SOURCE`](crate::envelope::cloudevent::DEFAULT_SOURCE).
    pub fn start(system: &'static str, batch: &'a [Outgoing]) -> Self {
        Self::start_from(system, DEFAULT_SOURCE, batch, |out| SendTarget::of(out))
    }

    /// [`start`](Self::start), with the backend saying how each message's
    /// destination is named.
    pub fn start_with<F>(system: &'static str, batch: &'a [Outgoing], target: F) -> Self
    where
        F: for<'o> Fn(&'o Outgoing) -> SendTarget<'o>,
    {
        Self::start_from(system, DEFAULT_SOURCE, batch, target)
    }

    /// [`start_with`](Self::start_with), completing each message as a
    /// CloudEvent with `source` as its default source
    /// ([`cloudevent::complete`](crate::envelope::cloudevent::complete)):
    /// every message a publisher sends through this is either a valid
    /// CloudEvent or, without a type, claims not to be one.
    pub fn start_from<F>(
        system: &'static str,
        source: &str,
        batch: &'a [Outgoing],
        target: F,
    ) -> Self
    where
        F: for<'o> Fn(&'o Outgoing) -> SendTarget<'o>,
    {
        let mut spans = Vec::new();
        let mut rewritten: Option<Vec<Outgoing>> = None;
        for (i, out) in batch.iter().enumerate() {
            if cloudevent::needs_completion(&out.message.headers) {
                let copy = rewritten.get_or_insert_with(|| batch.to_vec());
                if let Some(o) = copy.get_mut(i) {
                    cloudevent::complete(&mut o.message.headers, source);
                }
            }
            let out = rewritten.as_ref().and_then(|c| c.get(i)).unwrap_or(out);
            let span = send_span(system, out, &target);
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
                record_error(span, e.error_type());
            }
        }
    }

    /// A publisher's whole `publish` where each message goes to its own
    /// destination ([`SendTarget::of`]): [`start_from`](Self::start_from),
    /// `publish` on the completed batch, each result converted into this
    /// crate's [`Error`], then [`finish`](Self::finish).
    pub async fn around<E>(
        system: &'static str,
        source: &str,
        batch: &[Outgoing],
        publish: impl AsyncFnOnce(&[Outgoing]) -> Vec<Result<(), E>>,
    ) -> Vec<Result<(), Error>>
    where
        E: Into<Error>,
    {
        let sends = Sends::start_from(system, source, batch, |o| SendTarget::of(o));
        let results: Vec<Result<(), Error>> = publish(sends.batch())
            .await
            .into_iter()
            .map(|r| r.map_err(Into::into))
            .collect();
        sends.finish(&results);
        results
    }
}

fn send_span<F>(system: &'static str, out: &Outgoing, target: &F) -> Span
where
    F: for<'o> Fn(&'o Outgoing) -> SendTarget<'o>,
{
    // Names are only worked out for a span that is recorded.
    let span = tracing::info_span!(
        target: "consumer::runtime",
        "send",
        otel.name = Empty,
        otel.kind = "producer",
        otel.status_code = Empty,
        messaging.system = system,
        messaging.operation.name = "send",
        messaging.operation.type = "send",
        messaging.destination.name = Empty,
        messaging.rabbitmq.destination.routing_key = Empty,
        messaging.message.id = Empty,
        messaging.message.body.size = out.message.payload.len(),
        messaging.kafka.message.key = Empty,
        error.type = Empty,
        consumer.message.key = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    let target = target(out);
    span.record("otel.name", format!("send {}", target.span_name));
    span.record("messaging.destination.name", &*target.name);
    if let Some(rk) = &target.routing_key {
        span.record("messaging.rabbitmq.destination.routing_key", &**rk);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::Message;

    fn out(message: Message) -> Outgoing {
        Outgoing {
            destination: "t".to_owned(),
            message,
        }
    }

    #[test]
    fn every_typed_message_goes_out_a_valid_cloudevent_even_untraced() {
        let json = Message::json("OrderPlaced", &1).unwrap_or_else(|_| Message::raw(""));
        let batch = [
            out(json),
            out(Message::raw("r")),
            out(Message::raw("m")
                .with_header(names::TYPE, "T")
                .with_source("/mine")),
        ];
        let sends = Sends::start_from("memory", "/orders", &batch, |o| SendTarget::of(o));
        let sent = sends.batch();
        let get = |i: usize, name| sent[i].message.headers.get(name).ok().flatten();
        assert_eq!(get(0, names::SOURCE), Some("/orders"));
        assert_eq!(get(1, names::SOURCE), None, "no type: not a CloudEvent");
        assert_eq!(get(1, names::SPEC_VERSION), None);
        assert_eq!(get(2, names::SOURCE), Some("/mine"));
        assert_eq!(get(2, names::SPEC_VERSION), Some("1.0"));
        assert!(get(2, names::ID).is_some());
    }

    #[test]
    fn a_complete_batch_is_not_copied() {
        let m = Message::raw("x")
            .with_header(names::TYPE, "T")
            .with_header(names::SPEC_VERSION, "1.0")
            .with_id("e")
            .with_source("/s");
        let batch = [out(m)];
        let sends = Sends::start("memory", &batch);
        assert!(matches!(sends.batch, Cow::Borrowed(_)));
    }
}
