//! From the parts of a service to the document: a channel per source,
//! retry, dead-letter and outbox destination; a receive operation per
//! handler and event type (on the retry channel too); send operations for
//! retry copies, dead letters and each outbox event.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::document::{
    ASYNCAPI_VERSION, Action, Bindings, Channel, Components, Document, Info, Message, Operation,
    Ref, escape,
};
use super::schemas::{RawSchema, Schemas, Side, all_refs, component_key};
use super::{AsyncApiError, headers};
use consumer_core::describe::{
    ChannelDescription, HandlerDescription, PartDescription, ServiceDescription,
};

mod consumer;

enum Payload {
    Schema(RawSchema),
    DeadLetter,
}

struct PendingMessage {
    name: String,
    summary: String,
    event_type: Option<String>,
    prefix: &'static str,
    payload: Payload,
}

struct PlannedChannel {
    description: ChannelDescription,
    messages: Vec<usize>,
}

struct PlannedOperation {
    id: String,
    action: Action,
    channel: String,
    summary: String,
    messages: Vec<usize>,
}

#[derive(Default)]
struct Plan {
    channels: BTreeMap<String, PlannedChannel>,
    operations: Vec<PlannedOperation>,
    messages: Vec<PendingMessage>,
    problems: Vec<String>,
}

impl Plan {
    /// The id of `description`'s channel, added when new; `role` tells two
    /// channels of one address apart (a queue and the routing key of the
    /// same name on the dead-letter exchange).
    fn channel(&mut self, description: &ChannelDescription, role: &str) -> String {
        let same = |c: &PlannedChannel| {
            c.description.address == description.address
                && c.description.protocol == description.protocol
                && c.description.binding == description.binding
        };
        if let Some((id, _)) = self.channels.iter().find(|(_, c)| same(c)) {
            return id.clone();
        }
        // Ids are names, not addresses: `orders.retry.{delay}` is
        // `orders.retry.delay`.
        let base = component_key(&description.address.replace(['{', '}'], ""));
        let mut id = base.clone();
        if self.channels.contains_key(&id) && !role.is_empty() {
            id = format!("{base}.{role}");
        }
        let mut n = 2;
        while self.channels.contains_key(&id) {
            id = format!("{base}.{n}");
            n += 1;
        }
        self.channels.insert(
            id.clone(),
            PlannedChannel {
                description: description.clone(),
                messages: Vec::new(),
            },
        );
        id
    }

    fn message(&mut self, channel: &str, message: PendingMessage) -> usize {
        self.messages.push(message);
        let index = self.messages.len() - 1;
        if let Some(c) = self.channels.get_mut(channel) {
            c.messages.push(index);
        }
        index
    }

    fn operation(
        &mut self,
        id: String,
        action: Action,
        channel: &str,
        summary: String,
        messages: Vec<usize>,
    ) {
        let mut unique = component_key(&id);
        let mut n = 2;
        while self.operations.iter().any(|o| o.id == unique) {
            unique = component_key(&format!("{id}.{n}"));
            n += 1;
        }
        self.operations.push(PlannedOperation {
            id: unique,
            action,
            channel: channel.to_owned(),
            summary,
            messages,
        });
    }

    fn relay(
        &mut self,
        schemas: &mut Schemas,
        name: &str,
        system: &str,
        events: &[(
            consumer_core::describe::DeclaredEvent,
            String,
            Option<ChannelDescription>,
        )],
    ) {
        if events.is_empty() {
            self.problems.push(format!(
                "relay `{name}`: its outbox declares no event type: declare each with `Outbox::with_event::<T>(event_type)`"
            ));
        }
        for (event, destination, channel) in events {
            if destination.is_empty() {
                self.problems.push(format!(
                    "relay `{name}`: event `{}` goes to its aggregate type, unknown here: give the outbox a default destination or declare the event with `Outbox::with_event_to`",
                    event.event_type
                ));
                continue;
            }
            let Some(channel) = channel else {
                self.problems.push(format!(
                    "relay `{name}`: its {system} publisher does not describe destination `{destination}` (`Publisher::channel`)"
                ));
                continue;
            };
            let Some(schema) = schemas.payload(Side::Send, &event.payload) else {
                self.problems.push(format!(
                    "relay `{name}`: event `{}` is a `{}`, which has no JSON schema: derive `schemars::JsonSchema` for it",
                    event.event_type,
                    event.payload.type_name()
                ));
                continue;
            };
            let id = self.channel(channel, "");
            let m = self.message(
                &id,
                PendingMessage {
                    name: event.event_type.clone(),
                    summary: summary(Some(&event.event_type), event.payload.type_name()),
                    event_type: Some(event.event_type.clone()),
                    prefix: channel.attribute_prefix,
                    payload: Payload::Schema(schema),
                },
            );
            self.operation(
                format!("{name}.{}", event.event_type),
                Action::Send,
                &id,
                format!(
                    "Relay `{name}` publishes the outbox's `{}` events.",
                    event.event_type
                ),
                vec![m],
            );
        }
    }
}

/// Every channel the service's parts describe: the relays' destinations
/// and the consumers' inputs.
fn known_channels(parts: &[PartDescription]) -> Vec<ChannelDescription> {
    let mut known = Vec::new();
    for part in parts {
        match part {
            PartDescription::Relay { events, .. } => {
                known.extend(events.iter().filter_map(|(_, _, c)| c.clone()));
            }
            PartDescription::Consumer { channels, .. } => {
                known.extend(channels.iter().map(|c| c.input.clone()));
            }
        }
    }
    known
}

fn summary(event_type: Option<&str>, type_name: &str) -> String {
    match event_type {
        Some(t) => format!("The `{t}` event (Rust type `{}`).", short_name(type_name)),
        None => format!("A `{}`, without event type.", short_name(type_name)),
    }
}

/// `a::b::Name<c::D>` as `Name<D>`.
pub(crate) fn short_name(type_name: &str) -> String {
    let mut out = String::new();
    let mut segment = String::new();
    for c in type_name.chars() {
        if c.is_alphanumeric() || c == '_' {
            segment.push(c);
        } else if c == ':' {
            segment.clear();
        } else {
            out.push_str(&segment);
            segment.clear();
            out.push(c);
        }
    }
    out.push_str(&segment);
    out
}

fn bindings(protocol: &'static str, binding: Option<&Value>) -> Option<Bindings> {
    binding.map(|b| BTreeMap::from([(protocol, b.clone())]))
}

/// The AsyncAPI 3.1.0 document of `service`; `Err` names every handler,
/// event and type that keeps it from being made.
pub fn build(service: &ServiceDescription) -> Result<Value, AsyncApiError> {
    let incomplete = |problems| AsyncApiError::Incomplete {
        service: service.name.to_owned(),
        problems,
    };
    let mut schemas = Schemas::new();
    let plan = Plan::of(&service.parts, &mut schemas);
    if !plan.problems.is_empty() {
        return Err(incomplete(plan.problems));
    }
    let finished = schemas.finish().map_err(incomplete)?;
    let messages = MessageComponents::of(&plan.messages, &finished).map_err(incomplete)?;
    let mut schemas = finished.into_components();
    let MessageKeys { messages, keys } = messages.into_schemas(&mut schemas);
    let document = Document {
        asyncapi: ASYNCAPI_VERSION,
        info: Info {
            title: service.name.to_owned(),
            version: service.version.to_owned(),
            description: format!(
                "The channels, operations and messages of service `{}`, generated from what its host runs.",
                service.name
            ),
        },
        default_content_type: "application/json",
        channels: channels(&plan, &keys),
        operations: operations(plan.operations, &plan.channels, &keys),
        components: Components { messages, schemas },
    };
    let value = serde_json::to_value(&document).map_err(|e| incomplete(vec![e.to_string()]))?;
    let dangling = dangling_refs(&value);
    if dangling.is_empty() {
        Ok(value)
    } else {
        Err(incomplete(dangling))
    }
}

impl Plan {
    /// What each part reads and writes, planned as channels, operations
    /// and messages.
    fn of(parts: &[PartDescription], schemas: &mut Schemas) -> Self {
        let mut plan = Plan::default();
        for part in parts {
            match part {
                PartDescription::Consumer {
                    name,
                    system,
                    channels,
                    handlers,
                } => plan.consumer(schemas, name, system, channels.as_deref(), handlers),
                PartDescription::Relay {
                    name,
                    system,
                    events,
                } => plan.relay(schemas, name, system, events),
            }
        }
        let known = known_channels(parts);
        for part in parts {
            if let PartDescription::Consumer { name, handlers, .. } = part {
                for h in handlers {
                    plan.handler_sends(schemas, &known, name, h);
                }
            }
        }
        plan
    }

    /// The send operations of what a handler (a saga) writes through the
    /// outbox: each on the channel of its destination, as a relay's
    /// publisher or a consumer's source of the service describes it.
    fn handler_sends(
        &mut self,
        schemas: &mut Schemas,
        known: &[ChannelDescription],
        consumer: &str,
        handler: &HandlerDescription,
    ) {
        for event in &handler.sends {
            let destination = event.destination.as_deref().unwrap_or_default();
            let Some(channel) = known.iter().find(|c| c.address == destination) else {
                self.problems.push(format!(
                    "consumer `{consumer}`: `{}` sends `{}` to `{destination}`, a destination no part of the service describes: declare it on the relay's outbox (`Outbox::with_event_to`)",
                    handler.name, event.event_type
                ));
                continue;
            };
            let Some(schema) = schemas.payload(Side::Send, &event.payload) else {
                self.problems.push(format!(
                    "consumer `{consumer}`: `{}` sends `{}` as a `{}`, which has no JSON schema: derive `schemars::JsonSchema` for it",
                    handler.name,
                    event.event_type,
                    event.payload.type_name()
                ));
                continue;
            };
            let id = self.channel(channel, "");
            let m = self.message(
                &id,
                PendingMessage {
                    name: event.event_type.clone(),
                    summary: summary(Some(&event.event_type), event.payload.type_name()),
                    event_type: Some(event.event_type.clone()),
                    prefix: channel.attribute_prefix,
                    payload: Payload::Schema(schema),
                },
            );
            self.operation(
                format!("{consumer}.{}.sends.{}", handler.name, event.event_type),
                Action::Send,
                &id,
                format!(
                    "`{}` of consumer `{consumer}` sends `{}` through the outbox.",
                    handler.name, event.event_type
                ),
                vec![m],
            );
        }
    }
}

/// The message components: one per distinct content, keyed by event type,
/// with the header and payload schemas each one refers to.
#[derive(Default)]
struct MessageComponents {
    messages: BTreeMap<String, Message>,
    headers: BTreeMap<String, Value>,
    payloads: BTreeMap<String, Value>,
    /// The component key of each planned message, by its index.
    keys: Vec<String>,
}

/// The message components and the key of each planned message.
struct MessageKeys {
    messages: BTreeMap<String, Message>,
    keys: Vec<String>,
}

impl MessageComponents {
    fn of(
        pending: &[PendingMessage],
        finished: &super::schemas::Finished,
    ) -> Result<Self, Vec<String>> {
        let mut out = Self::default();
        let mut problems = Vec::new();
        for message in pending {
            let (headers, payload) = match &message.payload {
                Payload::Schema(raw) => match finished.rewrite(raw) {
                    Ok(p) => (
                        headers::cloudevents(message.prefix, message.event_type.as_deref()),
                        p,
                    ),
                    Err(e) => {
                        problems.push(format!("message `{}`: {e}", message.name));
                        out.keys.push(String::new());
                        continue;
                    }
                },
                Payload::DeadLetter => (headers::dead_letter(), headers::dead_letter_payload()),
            };
            let key = out.key_for(message, &headers, &payload);
            out.add(&key, message, headers, payload);
            out.keys.push(key);
        }
        if problems.is_empty() {
            Ok(out)
        } else {
            Err(problems)
        }
    }

    /// The key under which `message` goes: its name, unless a message of
    /// that name with other content holds it (then the side, then a
    /// number, is appended).
    fn key_for(&self, message: &PendingMessage, headers: &Value, payload: &Value) -> String {
        let base = component_key(&message.name);
        let mut key = base.clone();
        // A type read and sent with different schemas: named by side first.
        let mut candidates = match &message.payload {
            Payload::Schema(raw) => vec![format!("{base}.{}", raw.side().suffix())],
            Payload::DeadLetter => Vec::new(),
        }
        .into_iter();
        let mut n = 2;
        loop {
            let same = self.messages.get(&key).is_none_or(|m| {
                m.name == message.name
                    && self.headers.get(&key) == Some(headers)
                    && self.payloads.get(&key) == Some(payload)
            });
            if same {
                return key;
            }
            key = candidates.next().unwrap_or_else(|| {
                n += 1;
                format!("{base}.{}", n - 1)
            });
        }
    }

    fn add(&mut self, key: &str, message: &PendingMessage, headers: Value, payload: Value) {
        if self.messages.contains_key(key) {
            return;
        }
        let content_type = match message.payload {
            Payload::Schema(_) => Some("application/json"),
            Payload::DeadLetter => None,
        };
        self.messages.insert(
            key.to_owned(),
            Message {
                name: message.name.clone(),
                summary: message.summary.clone(),
                content_type,
                headers: Ref::new(format!("#/components/schemas/{key}.Headers")),
                payload: if payload.get("$ref").is_some() {
                    payload.clone()
                } else {
                    json!({ "$ref": format!("#/components/schemas/{key}.Payload") })
                },
            },
        );
        self.headers.insert(key.to_owned(), headers);
        self.payloads.insert(key.to_owned(), payload);
    }

    /// Puts the header and payload schemas among the component schemas;
    /// what is left are the messages and each planned message's key.
    fn into_schemas(self, schemas: &mut serde_json::Map<String, Value>) -> MessageKeys {
        for (key, headers) in self.headers {
            schemas.insert(format!("{key}.Headers"), headers);
        }
        for (key, payload) in self.payloads {
            if payload.get("$ref").is_none() {
                schemas.insert(format!("{key}.Payload"), payload);
            }
        }
        MessageKeys {
            messages: self.messages,
            keys: self.keys,
        }
    }
}

/// Each planned channel, with references to its messages.
fn channels(plan: &Plan, keys: &[String]) -> BTreeMap<String, Channel> {
    plan.channels
        .iter()
        .map(|(id, planned)| {
            let d = &planned.description;
            let channel = Channel {
                address: d.address.clone(),
                description: format!("`{}` ({})", d.address, d.protocol),
                messages: planned
                    .messages
                    .iter()
                    .map(|i| {
                        let key = &keys[*i];
                        (
                            key.clone(),
                            Ref::new(format!("#/components/messages/{}", escape(key))),
                        )
                    })
                    .collect(),
                parameters: d.parameters.iter().cloned().collect(),
                bindings: bindings(d.protocol, d.binding.as_ref()),
            };
            (id.clone(), channel)
        })
        .collect()
}

/// Each planned operation, with references to its channel's messages.
fn operations(
    planned: Vec<PlannedOperation>,
    channels: &BTreeMap<String, PlannedChannel>,
    keys: &[String],
) -> BTreeMap<String, Operation> {
    let mut operations = BTreeMap::new();
    for op in planned {
        let d = &channels[&op.channel].description;
        let binding = match op.action {
            Action::Receive => d.receive_binding.as_ref(),
            Action::Send => d.send_binding.as_ref(),
        };
        let mut refs: Vec<Ref> = Vec::new();
        for i in &op.messages {
            let r = Ref::new(format!(
                "#/channels/{}/messages/{}",
                escape(&op.channel),
                escape(&keys[*i])
            ));
            if !refs.contains(&r) {
                refs.push(r);
            }
        }
        operations.insert(
            op.id,
            Operation {
                action: op.action,
                channel: Ref::new(format!("#/channels/{}", escape(&op.channel))),
                summary: op.summary,
                messages: refs,
                bindings: bindings(d.protocol, binding),
            },
        );
    }
    operations
}

/// Every reference that does not resolve inside the document, or that
/// points at `definitions` / `$defs`.
pub(crate) fn dangling_refs(document: &Value) -> Vec<String> {
    let mut refs = BTreeMap::new();
    all_refs(document, &mut refs);
    refs.into_keys()
        .filter(|r| {
            r.contains("/definitions/")
                || r.contains("$defs")
                || r.strip_prefix('#')
                    .and_then(|p| document.pointer(p))
                    .is_none()
        })
        .map(|r| format!("reference `{r}` does not resolve"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_drop_paths_inside_generics_too() {
        assert_eq!(short_name("shop::OrderPlaced"), "OrderPlaced");
        assert_eq!(short_name("a::W<b::C, u32>"), "W<C, u32>");
    }
}
