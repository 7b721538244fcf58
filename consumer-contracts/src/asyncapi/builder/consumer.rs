//! A consumer's part of the plan: its input channel with a receive
//! operation per handler and event type, the same on its retry channel
//! with the send operation of retry copies, and its dead-letter channel
//! with the send operation of dead letters.

use super::{Payload, PendingMessage, Plan, short_name, summary};
use crate::asyncapi::document::Action;
use crate::asyncapi::schemas::{RawSchema, Schemas, Side};
use consumer_core::describe::{
    ChannelDescription, HandlerDescription, PayloadType, SourceChannels,
};

/// One consumer's channels as planned, and the retry copies its handlers'
/// receive operations add up to.
struct ConsumerChannels<'c> {
    name: &'c str,
    described: &'c SourceChannels,
    input: String,
    retry: Option<String>,
    /// The messages on the retry channel: what the retry send operation
    /// sends.
    retried: Vec<usize>,
}

/// What one handler takes: its payload type and that type's schema.
struct Takes {
    payload: PayloadType,
    schema: RawSchema,
}

impl Plan {
    /// Plans consumer `name`'s channels and operations; a source that does
    /// not describe its channels, or a handler whose message type has no
    /// schema, is a problem instead.
    pub(super) fn consumer(
        &mut self,
        schemas: &mut Schemas,
        name: &str,
        system: &str,
        channels: Option<&SourceChannels>,
        handlers: &[HandlerDescription],
    ) {
        let Some(described) = channels else {
            self.problems.push(format!(
                "consumer `{name}`: its {system} source does not describe its channels (`Source::channels`)"
            ));
            return;
        };
        let mut planned = ConsumerChannels {
            name,
            described,
            input: self.channel(&described.input, ""),
            retry: described.retry.as_ref().map(|c| self.channel(c, "retry")),
            retried: Vec::new(),
        };
        for h in handlers {
            let Some(takes) = self.handler_takes(schemas, name, h) else {
                continue;
            };
            for event_type in event_types(h) {
                self.receive(&mut planned, h, &takes, event_type);
            }
        }
        self.retry_send(planned);
        if let Some(dlq) = &described.dead_letter {
            self.dead_letter_send(name, dlq);
        }
    }

    /// What handler `h` takes; `None`, with the problem noted, when it does
    /// not say or its type has no schema.
    fn handler_takes(
        &mut self,
        schemas: &mut Schemas,
        name: &str,
        h: &HandlerDescription,
    ) -> Option<Takes> {
        let Some(payload) = h.payload else {
            self.problems.push(format!(
                "consumer `{name}`: handler `{}` does not say its message type (`Handler::payload_type`; `#[handler]` does)",
                h.name
            ));
            return None;
        };
        let Some(schema) = schemas.payload(Side::Receive, &payload) else {
            self.problems.push(format!(
                "consumer `{name}`: handler `{}` takes `{}`, which has no JSON schema: derive `schemars::JsonSchema` for it",
                h.name,
                payload.type_name()
            ));
            return None;
        };
        Some(Takes { payload, schema })
    }

    /// The receive operation of `h` for `event_type` on the input and,
    /// unless retry copies come back on the input, on the retry channel;
    /// the retry channel's message is noted for the retry send operation.
    fn receive(
        &mut self,
        planned: &mut ConsumerChannels<'_>,
        h: &HandlerDescription,
        takes: &Takes,
        event_type: Option<&str>,
    ) {
        let name = planned.name;
        let type_name = takes.payload.type_name();
        let label = event_type.map_or_else(|| short_name(type_name), str::to_owned);
        let pending = |prefix| PendingMessage {
            name: label.clone(),
            summary: summary(event_type, type_name),
            event_type: event_type.map(str::to_owned),
            prefix,
            payload: Payload::Schema(takes.schema.clone()),
        };
        let m = self.message(
            &planned.input,
            pending(planned.described.input.attribute_prefix),
        );
        self.operation(
            format!("{name}.{}.{label}", h.name),
            Action::Receive,
            &planned.input,
            format!("Handler `{}` of consumer `{name}` takes `{label}`.", h.name),
            vec![m],
        );
        let (Some(retry), Some(rc)) = (&planned.retry, &planned.described.retry) else {
            return;
        };
        let m = self.message(retry, pending(rc.attribute_prefix));
        planned.retried.push(m);
        // Copies that come back on the input are taken there.
        if planned.described.retries_return_on_input {
            return;
        }
        self.operation(
            format!("{name}.{}.{label}.retry", h.name),
            Action::Receive,
            retry,
            format!(
                "Handler `{}` of consumer `{name}` takes `{label}` again: a retry copy, after its delay.",
                h.name
            ),
            vec![m],
        );
    }

    /// The send operation of retry copies, with every message the retry
    /// channel carries; none without a retry channel.
    fn retry_send(&mut self, planned: ConsumerChannels<'_>) {
        let ConsumerChannels {
            name,
            retry,
            retried,
            ..
        } = planned;
        if let Some(retry) = retry {
            self.operation(
                format!("{name}.retry"),
                Action::Send,
                &retry,
                format!("Consumer `{name}` sends the retry copy of a delivery that failed, to take it again after a delay."),
                retried,
            );
        }
    }

    /// The dead-letter channel `dlq`, its message and its send operation.
    fn dead_letter_send(&mut self, name: &str, dlq: &ChannelDescription) {
        let id = self.channel(dlq, "dead-letter");
        let m = self.message(
            &id,
            PendingMessage {
                name: "DeadLetter".to_owned(),
                summary: "A delivery no handler could process: its payload and headers, and why."
                    .to_owned(),
                event_type: None,
                prefix: dlq.attribute_prefix,
                payload: Payload::DeadLetter,
            },
        );
        self.operation(
            format!("{name}.dead-letter"),
            Action::Send,
            &id,
            format!("Consumer `{name}` dead-letters what it cannot process (poison, terminal failure, attempts exhausted)."),
            vec![m],
        );
    }
}

/// The event types a handler's receive operations are for: each it
/// declares, or one without a type when it declares none.
fn event_types(h: &HandlerDescription) -> Vec<Option<&str>> {
    if h.event_types.is_empty() {
        vec![None]
    } else {
        h.event_types.iter().map(|t| Some(*t)).collect()
    }
}
