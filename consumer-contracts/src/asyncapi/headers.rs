//! The header schemas of the messages: the CloudEvents attributes (binary
//! content mode) an event carries, and the context a dead letter carries.

use serde_json::{Value, json};

use consumer_core::dead_letter::{DeadLetterKind, headers as dlq};
use consumer_core::envelope::names;

/// The CloudEvents attributes under `prefix`; `ce_type` fixed to
/// `event_type` when the message has one (a message without a type is not
/// a CloudEvent, so then nothing is required).
pub(crate) fn cloudevents(prefix: &str, event_type: Option<&str>) -> Value {
    let name = |attribute: &str| format!("{prefix}{attribute}");
    let kind = match event_type {
        Some(t) => {
            json!({ "type": "string", "const": t, "description": "The CloudEvents type: what the router dispatches on." })
        }
        None => json!({ "type": "string", "description": "The CloudEvents type, if any." }),
    };
    let required: Vec<String> = match event_type {
        Some(_) => ["id", "source", "specversion", "type"]
            .iter()
            .map(|a| name(a))
            .collect(),
        None => Vec::new(),
    };
    let mut properties = serde_json::Map::new();
    properties.insert(
        name("id"),
        json!({ "type": "string", "minLength": 1, "description": "The event id: with the source, unique per event; the default idempotency key." }),
    );
    properties.insert(
        name("source"),
        json!({ "type": "string", "minLength": 1, "format": "uri-reference", "description": "The producing context." }),
    );
    properties.insert(
        name("specversion"),
        json!({ "type": "string", "const": "1.0", "description": "The CloudEvents version." }),
    );
    properties.insert(name("type"), kind);
    properties.insert(
        name("time"),
        json!({ "type": "string", "format": "date-time", "description": "When the event happened (RFC 3339)." }),
    );
    properties.insert(
        name("subject"),
        json!({ "type": "string", "description": "The subject of the event in the context of its source." }),
    );
    properties.insert(
        name("partitionkey"),
        json!({ "type": "string", "description": "The partition key: events of one key keep their order." }),
    );
    properties.insert(
        names::TRACEPARENT.to_owned(),
        json!({ "type": "string", "description": "W3C trace context." }),
    );
    json!({
        "type": "object",
        "description": "CloudEvents attributes in binary content mode, one header each; other headers are allowed.",
        "required": required,
        "properties": properties,
    })
}

/// The headers of a dead letter: the original ones and the context.
pub(crate) fn dead_letter() -> Value {
    let always = [
        dlq::KIND,
        dlq::ERROR,
        dlq::CAUSES,
        dlq::ATTEMPTS,
        dlq::FIRST_FAILURE,
        dlq::LAST_FAILURE,
        dlq::HANDLER,
        dlq::DESTINATION,
        dlq::POSITION,
        dlq::MESSAGE_ID,
    ];
    let kinds = [
        DeadLetterKind::Poison,
        DeadLetterKind::Terminal,
        DeadLetterKind::Exhausted,
    ]
    .map(DeadLetterKind::as_str);
    let mut properties = serde_json::Map::new();
    for name in dlq::ALL {
        let schema = match name {
            dlq::KIND => {
                json!({ "type": "string", "enum": kinds, "description": "Why it was dead-lettered." })
            }
            dlq::ATTEMPTS | dlq::PAYLOAD_SIZE => {
                json!({ "type": "string", "pattern": "^[0-9]+$" })
            }
            dlq::FIRST_FAILURE | dlq::LAST_FAILURE => {
                json!({ "type": "string", "format": "date-time" })
            }
            dlq::PAYLOAD_OMITTED => json!({ "type": "string", "const": "true" }),
            _ => json!({ "type": "string" }),
        };
        properties.insert(name.to_owned(), schema);
    }
    json!({
        "type": "object",
        "description": "The original message's headers, and the context of its failure.",
        "required": always,
        "properties": properties,
    })
}

/// The payload of a dead letter: the original bytes, whatever they were.
pub(crate) fn dead_letter_payload() -> Value {
    json!({
        "description": "The original payload, unchanged (it may not be JSON: a poison message is dead-lettered as it came); empty when x-dlq-payload-omitted is true."
    })
}
