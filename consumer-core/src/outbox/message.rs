//! The broker message of a claimed row: CloudEvents binary mode, the
//! aggregate id as partition key, the row's own headers, and the trace
//! context restored from the row (never the relay's own).

use std::collections::BTreeMap;

use crate::envelope::{Headers, Message, cloudevent, format_time, names};
use crate::publish::Outgoing;

use super::Row;
use super::schedule::from_ms;

/// A row the relay cannot turn into a message: reading it again gives
/// the same answer, so it is marked failed at once (its aggregate blocked,
/// like an event the broker refused for good) until an operator repairs
/// the row and retries it.
#[derive(Debug, thiserror::Error)]
#[error("outbox event {event_id}: the headers column is not a JSON object of strings ({reason})")]
pub(super) struct UnreadableRow {
    event_id: String,
    reason: String,
}

/// `row` as the message to publish, with `source` as its CloudEvents
/// source. The payload is moved out of the row (the row is only needed for
/// its id and aggregate afterwards).
pub(super) fn outgoing(row: &mut Row, source: &str) -> Result<Outgoing, UnreadableRow> {
    let mut headers = Headers::new();
    if let Some(extra) = &row.headers {
        let map: BTreeMap<String, String> =
            serde_json::from_str(extra).map_err(|e| UnreadableRow {
                event_id: row.id.clone(),
                reason: e.to_string(),
            })?;
        for (k, v) in map {
            headers.insert(k, v);
        }
    }
    // What only the row knows; `cloudevent::complete` adds the rest
    // (`ce_specversion`), so the publisher's own completion finds nothing
    // to do and the message is written once.
    headers.insert(names::ID, row.id.as_str());
    headers.insert(names::SOURCE, source);
    headers.insert(names::TYPE, row.event_type.as_str());
    headers.insert(names::SUBJECT, row.aggregate_id.as_str());
    headers.insert(names::CONTENT_TYPE, "application/json");
    // A scheduled event happened when it fell due.
    let time = row.due_at_ms.unwrap_or(row.created_at_ms);
    headers.insert(names::TIME, format_time(from_ms(time)));
    cloudevent::complete(&mut headers, source);
    inject_trace(row, &mut headers);
    Ok(Outgoing {
        destination: row.destination.clone(),
        message: Message {
            key: Some(row.aggregate_id.clone()),
            headers,
            payload: bytes::Bytes::from(std::mem::take(&mut row.payload).into_bytes()),
        },
    })
}

/// Restores the enqueuing transaction's context from the row: the
/// publisher's `send` span is its child (see
/// [`trace::Sends`](crate::trace::Sends)), so the trace goes from the
/// transaction through the relay to the consumers. Unreadable trace
/// metadata loses the trace link, not the event: it is logged and the
/// event goes out without it, as a consumer treats a malformed
/// `traceparent`.
fn inject_trace(row: &Row, headers: &mut Headers) {
    let Some(meta) = &row.trace_metadata else {
        return;
    };
    let parent = crate::trace::metadata::decode(meta)
        .and_then(|saved| saved.map_or(Ok(None), |h| crate::trace::extract(&h)));
    match parent {
        Ok(Some(parent)) => crate::trace::inject(&parent, headers),
        Ok(None) => {}
        Err(e) => tracing::warn!(
            target: "consumer::outbox",
            event_id = %row.id,
            error = %e,
            "unreadable trace_metadata: the event goes out without its trace context"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(headers: Option<&str>, trace: Option<&str>) -> Row {
        Row {
            id: "0190c5e0-0000-7000-8000-000000000001".into(),
            aggregate_type: "Order".into(),
            aggregate_id: "o-1".into(),
            version: 1,
            event_type: "OrderPlaced".into(),
            destination: "orders".into(),
            payload: "{}".into(),
            headers: headers.map(str::to_owned),
            trace_metadata: trace.map(str::to_owned),
            created_at_ms: 1_000,
            attempts: 0,
            due_at_ms: None,
            held: false,
        }
    }

    #[test]
    fn a_row_becomes_a_complete_cloudevent_the_publisher_leaves_alone() {
        let out = outgoing(&mut row(Some(r#"{"x-tenant":"acme"}"#), None), "/outbox")
            .unwrap_or_else(|e| panic!("{e}"));
        let h = &out.message.headers;
        assert_eq!(
            h.get(names::ID),
            Ok(Some("0190c5e0-0000-7000-8000-000000000001"))
        );
        assert_eq!(h.get(names::SOURCE), Ok(Some("/outbox")));
        assert_eq!(h.get(names::SPEC_VERSION), Ok(Some("1.0")));
        assert_eq!(h.get(names::TIME), Ok(Some("1970-01-01T00:00:01Z")));
        assert_eq!(h.get("x-tenant"), Ok(Some("acme")));
        assert!(!cloudevent::needs_completion(h));
        assert_eq!(out.message.key.as_deref(), Some("o-1"));
    }

    #[test]
    fn a_scheduled_event_happened_when_it_fell_due() {
        let mut r = row(None, None);
        r.due_at_ms = Some(61_000);
        let out = outgoing(&mut r, "/outbox").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            out.message.headers.get(names::TIME),
            Ok(Some("1970-01-01T00:01:01Z"))
        );
    }

    #[test]
    fn headers_that_do_not_parse_are_an_error_naming_the_event() {
        for bad in ["not json", r#"{"x-retry": 3}"#, "[]"] {
            let err = outgoing(&mut row(Some(bad), None), "/outbox")
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                err.contains("0190c5e0-0000-7000-8000-000000000001"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn unreadable_trace_metadata_loses_only_the_trace() {
        let out =
            outgoing(&mut row(None, Some("not json")), "/outbox").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out.message.headers.get(names::TRACEPARENT), Ok(None));
        let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let meta = format!(r#"{{"traceparent":"{tp}"}}"#);
        let out =
            outgoing(&mut row(None, Some(&meta)), "/outbox").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out.message.headers.get(names::TRACEPARENT), Ok(Some(tp)));
    }
}
