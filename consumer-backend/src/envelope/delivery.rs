//! [`Envelope`]: one delivery as the runtime sees it, read once from the
//! backend's headers, never failing on bad input.

use bytes::Bytes;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::cloudevent::{from_structured, is_structured};
use super::headers::not_utf8;
use super::{HeaderError, Headers, Origin, names};

/// One delivered message, as the runtime sees it whatever the backend.
///
/// Built with [`Envelope::from_parts`], which never fails: headers that are
/// present but malformed are recorded in [`Envelope::defects`], and the
/// runtime dead-letters such a message on its first attempt instead of
/// guessing.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// CloudEvents `id`; the position on the broker when the producer set none.
    pub id: String,
    /// CloudEvents `type`.
    pub kind: Option<String>,
    /// CloudEvents `source`.
    pub source: Option<String>,
    /// CloudEvents `subject`.
    pub subject: Option<String>,
    /// CloudEvents `time`.
    pub time: Option<OffsetDateTime>,
    /// Partition key: messages with the same key are processed in order.
    pub key: Option<String>,
    /// Every header as received, framework headers included.
    pub headers: Headers,
    /// The body, undecoded.
    pub payload: Bytes,
    /// Which delivery attempt this is (1 for the first).
    pub attempt: u32,
    /// When an earlier attempt first failed, if one did.
    pub first_failure: Option<OffsetDateTime>,
    /// Where it came from.
    pub origin: Origin,
    /// Headers present but malformed; non-empty means poison.
    pub defects: Vec<HeaderError>,
}

impl Envelope {
    /// Reads the CloudEvents attributes and framework headers out of a
    /// received message. `fallback_id` is used when the producer set no
    /// `ce_id`: it must be stable across redeliveries (the broker position).
    ///
    /// A message whose `content-type` is `application/cloudevents+json` is a
    /// structured-mode event: its attributes are read from the body, and the
    /// payload is the event's `data` (or decoded `data_base64`), as
    /// [`cloudevent`](super::cloudevent) says; a body that is not a valid
    /// event is a defect. This parses a structured body of any size: a
    /// source reads with [`Envelope::from_parts_within`] the limit its
    /// consumer gave it.
    pub fn from_parts(
        payload: Bytes,
        headers: Headers,
        key: Option<String>,
        origin: Origin,
        fallback_id: impl FnOnce() -> String,
    ) -> Self {
        Self::from_parts_within(usize::MAX, payload, headers, key, origin, fallback_id)
    }

    /// [`Envelope::from_parts`] for a consumer that takes bodies of at most
    /// `max_body` bytes ([`Source::limit_body`](crate::source::Source::limit_body)):
    /// a structured-mode body over it is not parsed. It stays the payload,
    /// whole, and the runtime's size check dead-letters it as too large, so
    /// a body the consumer refuses costs no JSON parse (nor the memory of
    /// one), and the limit is the body's as received, whatever its `data`.
    pub fn from_parts_within(
        max_body: usize,
        mut payload: Bytes,
        mut headers: Headers,
        key: Option<String>,
        origin: Origin,
        fallback_id: impl FnOnce() -> String,
    ) -> Self {
        // The last value of an attribute wins, as with `Headers::get`.
        let mut found = scan(&headers);
        let mut defects = Vec::new();
        let structured = found[Attr::ContentType as usize].is_some_and(is_structured);
        if structured && payload.len() <= max_body {
            match from_structured(&headers, &payload) {
                Ok((h, p)) => {
                    headers = h;
                    payload = p;
                    found = scan(&headers);
                }
                Err(e) => defects.push(e),
            }
        }
        let mut text = |attr: Attr| {
            let value = found[attr as usize]?;
            match std::str::from_utf8(value) {
                Ok(v) => Some(v),
                Err(_) => {
                    defects.push(not_utf8(attr.name()));
                    None
                }
            }
        };
        let id = text(Attr::Id);
        let kind = text(Attr::Type).map(str::to_owned);
        let source = text(Attr::Source).map(str::to_owned);
        let subject = text(Attr::Subject).map(str::to_owned);
        let time_raw = text(Attr::Time);
        let attempt_raw = text(Attr::Attempt);
        let first_failure_raw = text(Attr::FirstFailure);
        let header_key = text(Attr::PartitionKey);

        let time = parse_time(names::TIME, time_raw, &mut defects);
        let first_failure = parse_time(names::FIRST_FAILURE, first_failure_raw, &mut defects);
        let attempt = parse_attempt(attempt_raw, &mut defects);
        let id = message_id(id, fallback_id, &mut defects);
        let key = key.or_else(|| header_key.map(str::to_owned));
        Self {
            id,
            kind,
            source,
            subject,
            time,
            key,
            headers,
            payload,
            attempt,
            first_failure,
            origin,
            defects,
        }
    }
}

/// The attempt number `x-consumer-attempt` says (1 without one; a value
/// that is not a positive number is a defect, and 1).
fn parse_attempt(raw: Option<&str>, defects: &mut Vec<HeaderError>) -> u32 {
    let Some(raw) = raw else { return 1 };
    match raw.trim().parse::<u32>() {
        Ok(n) if n >= 1 => n,
        _ => {
            defects.push(HeaderError {
                name: names::ATTEMPT.to_owned(),
                reason: format!("is not a positive attempt number: {raw:?}"),
            });
            1
        }
    }
}

/// The message id `ce_id` says, else the backend's fallback (an empty
/// `ce_id` is a defect).
fn message_id(
    id: Option<&str>,
    fallback: impl FnOnce() -> String,
    defects: &mut Vec<HeaderError>,
) -> String {
    match id {
        Some(id) if !id.is_empty() => id.to_owned(),
        Some(_) => {
            defects.push(HeaderError {
                name: names::ID.to_owned(),
                reason: "is empty".to_owned(),
            });
            fallback()
        }
        None => fallback(),
    }
}

/// The last value of each attribute among `headers`, in one pass, each
/// name matched by its length first. An attribute under the framework's
/// name (`ce_type`) wins over the same attribute under another binding's
/// name (`ce-type`, `cloudEvents:type`; see [`Attr::of_binding`]), which is
/// read only when the framework's is absent.
fn scan(headers: &Headers) -> [Option<&[u8]>; Attr::COUNT] {
    let mut found: [Option<&[u8]>; Attr::COUNT] = [None; Attr::COUNT];
    let mut other: [Option<&[u8]>; Attr::COUNT] = [None; Attr::COUNT];
    for (name, value) in headers.iter_bytes() {
        if let Some(attr) = Attr::of(name) {
            found[attr as usize] = Some(value);
        } else if let Some(attr) = Attr::of_binding(name) {
            other[attr as usize] = Some(value);
        }
    }
    for (f, o) in found.iter_mut().zip(other) {
        if f.is_none() {
            *f = o;
        }
    }
    found
}

/// Whether `name` is a CloudEvents attribute under another binding's name
/// (`ce-type`, `cloudEvents:type`): a structured-mode event's own
/// attributes replace these as they replace the `ce_` ones.
pub(super) fn is_binding_attribute(name: &str) -> bool {
    Attr::of_binding(name.as_bytes()).is_some()
}

/// The value of CloudEvents attribute `attribute` (`"id"`, `"type"`,
/// `"partitionkey"`, `"datacontenttype"`, ...) among `headers`, as
/// [`Envelope::from_parts`] reads it: under the framework's name
/// (`ce_partitionkey`, `content-type`), else under another protocol
/// binding's (`ce-partitionkey`, `cloudEvents:partitionkey`,
/// `cloudEvents_partitionkey`). The headers themselves stay as they
/// arrived: a dead letter or a retry copy carries the names its producer
/// wrote.
pub fn attribute<'h>(headers: &'h Headers, attribute: &str) -> Option<&'h [u8]> {
    let attr = Attr::ALL.into_iter().find(|a| {
        a.attribute()
            .is_some_and(|n| n.eq_ignore_ascii_case(attribute))
    })?;
    scan(headers)[attr as usize]
}

/// The attributes [`Envelope::from_parts`] reads, in the order it reports
/// their defects.
#[derive(Clone, Copy)]
enum Attr {
    Id,
    Type,
    Source,
    Subject,
    Time,
    Attempt,
    FirstFailure,
    PartitionKey,
    ContentType,
}

impl Attr {
    const COUNT: usize = 9;

    /// Every attribute, in defect order.
    const ALL: [Self; Self::COUNT] = [
        Self::Id,
        Self::Type,
        Self::Source,
        Self::Subject,
        Self::Time,
        Self::Attempt,
        Self::FirstFailure,
        Self::PartitionKey,
        Self::ContentType,
    ];

    /// The attribute a header name stands for (case-insensitively):
    /// `eq_ignore_ascii_case` compares lengths first, so all but one or two
    /// candidates are ruled out before any bytes are compared.
    fn of(name: &[u8]) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|a| name.eq_ignore_ascii_case(a.name().as_bytes()))
    }

    /// The attribute another CloudEvents binding's header name stands for:
    /// `ce-<attribute>` (the HTTP binding, and RabbitMQ's as the CloudEvents
    /// SDKs write it), `cloudEvents:<attribute>` and `cloudEvents_<attribute>`
    /// (the AMQP 1.0 binding). `datacontenttype` is the content type.
    fn of_binding(name: &[u8]) -> Option<Self> {
        let rest = strip_prefix_ignore_case(name, b"ce-")
            .or_else(|| strip_prefix_ignore_case(name, b"cloudEvents:"))
            .or_else(|| strip_prefix_ignore_case(name, b"cloudEvents_"))?;
        Self::ALL.into_iter().find(|a| {
            a.attribute()
                .is_some_and(|n| rest.eq_ignore_ascii_case(n.as_bytes()))
        })
    }

    /// The CloudEvents attribute's own name (`type`), for those that are
    /// CloudEvents attributes.
    fn attribute(self) -> Option<&'static str> {
        match self {
            Self::ContentType => Some("datacontenttype"),
            Self::Attempt | Self::FirstFailure => None,
            other => other.name().strip_prefix("ce_"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Id => names::ID,
            Self::Type => names::TYPE,
            Self::Source => names::SOURCE,
            Self::Subject => names::SUBJECT,
            Self::Time => names::TIME,
            Self::Attempt => names::ATTEMPT,
            Self::FirstFailure => names::FIRST_FAILURE,
            Self::PartitionKey => names::PARTITION_KEY,
            Self::ContentType => names::CONTENT_TYPE,
        }
    }
}

fn strip_prefix_ignore_case<'a>(name: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    (name.len() > prefix.len() && name[..prefix.len()].eq_ignore_ascii_case(prefix))
        .then(|| &name[prefix.len()..])
}

fn parse_time(
    name: &str,
    raw: Option<&str>,
    defects: &mut Vec<HeaderError>,
) -> Option<OffsetDateTime> {
    let raw = raw?;
    match OffsetDateTime::parse(raw, &Rfc3339) {
        Ok(t) => Some(t),
        Err(_) => {
            defects.push(HeaderError {
                name: name.to_owned(),
                reason: format!("is not an RFC 3339 time: {raw:?}"),
            });
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_bindings_names_are_read_when_the_frameworks_are_absent() {
        let mut h = Headers::new();
        h.append("CE-TYPE", "Dash");
        h.append("cloudEvents:id", "colon-1");
        h.append("cloudEvents_subject", "s-1");
        h.append("ce-datacontenttype", "text/plain");
        let e = Envelope::from_parts(Bytes::new(), h.clone(), None, Origin::default(), || {
            "f".into()
        });
        assert_eq!(
            (e.kind.as_deref(), e.id.as_str(), e.subject.as_deref()),
            (Some("Dash"), "colon-1", Some("s-1"))
        );
        assert_eq!(attribute(&h, "datacontenttype"), Some(&b"text/plain"[..]));
        h.append("ce_type", "Framework");
        let e = Envelope::from_parts(Bytes::new(), h.clone(), None, Origin::default(), || {
            "f".into()
        });
        assert_eq!(
            e.kind.as_deref(),
            Some("Framework"),
            "ce_ wins, whatever the order"
        );
        assert_eq!(e.headers.len(), 5, "the headers stay as they came");
        assert_eq!(
            attribute(&h, "attempt"),
            None,
            "not a CloudEvents attribute"
        );
    }

    fn env(headers: Headers) -> Envelope {
        Envelope::from_parts(Bytes::new(), headers, None, Origin::default(), || {
            "fallback".into()
        })
    }

    #[test]
    fn reads_cloudevents_attributes_and_attempt() {
        let h: Headers = [
            (names::ID, "m-1"),
            (names::TYPE, "OrderPlaced"),
            (names::TIME, "2026-01-02T03:04:05Z"),
            (names::ATTEMPT, "3"),
            (names::PARTITION_KEY, "k"),
        ]
        .into_iter()
        .collect();
        let e = env(h);
        assert_eq!(e.id, "m-1");
        assert_eq!(e.kind.as_deref(), Some("OrderPlaced"));
        assert_eq!(e.attempt, 3);
        assert_eq!(e.key.as_deref(), Some("k"));
        assert!(e.time.is_some());
        assert!(e.defects.is_empty());
    }

    #[test]
    fn missing_id_uses_the_stable_fallback() {
        assert_eq!(env(Headers::new()).id, "fallback");
    }

    #[test]
    fn malformed_headers_are_defects_not_panics() {
        let mut h = Headers::new();
        h.append(names::ID, vec![0xff, 0xfe]);
        h.append(names::ATTEMPT, "zero");
        h.append(names::TIME, "yesterday");
        let e = env(h);
        let names: Vec<_> = e.defects.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, [names::ID, names::TIME, names::ATTEMPT]);
        assert_eq!(e.attempt, 1);
        assert_eq!(e.id, "fallback");
    }

    #[test]
    fn attributes_match_any_case_and_the_last_value_wins() {
        let h: Headers = [
            ("CE_ID", "first"),
            ("Ce_Type", "T"),
            (names::ID, "second"),
            ("X-Consumer-Attempt", "2"),
            ("ce_partitionKey", "k"),
        ]
        .into_iter()
        .collect();
        let e = env(h);
        assert_eq!(e.id, "second");
        assert_eq!(e.kind.as_deref(), Some("T"));
        assert_eq!(e.attempt, 2);
        assert_eq!(e.key.as_deref(), Some("k"));
        assert!(e.defects.is_empty());
    }

    fn structured(body: &str) -> Envelope {
        let h: Headers = [
            (
                names::CONTENT_TYPE,
                "application/cloudevents+json; charset=utf-8",
            ),
            ("x-tenant", "acme"),
            (names::TYPE, "transport-says"),
        ]
        .into_iter()
        .collect();
        Envelope::from_parts(
            Bytes::from(body.to_owned()),
            h,
            None,
            Origin::default(),
            || "fallback".into(),
        )
    }

    #[test]
    fn a_structured_event_is_read_from_the_body() {
        let e = structured(
            r#"{"specversion":"1.0","id":"e-1","source":"/orders","type":"OrderPlaced",
                "subject":"o-7","time":"2026-01-02T03:04:05Z","partitionkey":"o-7",
                "traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                "datacontenttype":"application/json","data":{"total":3}}"#,
        );
        assert!(e.defects.is_empty(), "{:?}", e.defects);
        assert_eq!(e.id, "e-1");
        assert_eq!(e.kind.as_deref(), Some("OrderPlaced"), "the body wins");
        assert_eq!(e.source.as_deref(), Some("/orders"));
        assert_eq!(e.subject.as_deref(), Some("o-7"));
        assert_eq!(e.key.as_deref(), Some("o-7"));
        assert!(e.time.is_some());
        assert_eq!(&e.payload[..], br#"{"total":3}"#);
        assert_eq!(
            e.headers.get(names::CONTENT_TYPE),
            Ok(Some("application/json"))
        );
        assert_eq!(e.headers.get("x-tenant"), Ok(Some("acme")));
        assert!(e.headers.get_bytes(names::TRACEPARENT).is_some());
    }

    #[test]
    fn a_structured_event_replaces_every_bindings_attribute_headers() {
        let h: Headers = [
            (names::CONTENT_TYPE, "application/cloudevents+json"),
            ("ce-time", "not a time"),
            ("cloudEvents:subject", "stale"),
            ("x-tenant", "acme"),
        ]
        .into_iter()
        .collect();
        let body = r#"{"specversion":"1.0","id":"e-2","source":"/s","type":"T","data":1}"#;
        let e = Envelope::from_parts(Bytes::from(body), h, None, Origin::default(), || {
            "fallback".into()
        });
        assert!(
            e.defects.is_empty(),
            "a leftover header is no defect: {:?}",
            e.defects
        );
        assert_eq!((e.id.as_str(), e.subject, e.time), ("e-2", None, None));
        assert_eq!(e.headers.get_bytes("ce-time"), None);
        assert_eq!(e.headers.get("x-tenant"), Ok(Some("acme")));
    }

    #[test]
    fn structured_data_base64_and_text_data_are_the_payload() {
        let e = structured(
            r#"{"specversion":"1.0","id":"e","source":"/s","type":"T","data_base64":"AP8="}"#,
        );
        assert!(e.defects.is_empty(), "{:?}", e.defects);
        assert_eq!(&e.payload[..], &[0x00, 0xff]);
        let e = structured(
            r#"{"specversion":"1.0","id":"e","source":"/s","type":"T",
                "datacontenttype":"text/plain","data":"hello"}"#,
        );
        assert_eq!(&e.payload[..], b"hello");
        let e = structured(r#"{"specversion":"1.0","id":"e","source":"/s","type":"T"}"#);
        assert!(e.defects.is_empty() && e.payload.is_empty());
    }

    #[test]
    fn a_structured_body_over_the_limit_is_left_unparsed() {
        let body = r#"{"specversion":"1.0","id":"e","source":"/s","type":"T","data":{"n":1}}"#;
        let read = |max_body| {
            let mut h = Headers::new();
            h.insert(names::CONTENT_TYPE, "application/cloudevents+json");
            Envelope::from_parts_within(
                max_body,
                Bytes::from(body),
                h,
                None,
                Origin::default(),
                || "fallback".into(),
            )
        };
        let at_limit = read(body.len());
        assert_eq!(
            (at_limit.id.as_str(), &at_limit.payload[..]),
            ("e", &br#"{"n":1}"#[..])
        );
        let over = read(body.len() - 1);
        assert_eq!(over.id, "fallback", "no attribute read from the body");
        assert_eq!(
            over.payload,
            body.as_bytes(),
            "the body whole, for the size check"
        );
        assert!(over.defects.is_empty());
    }

    #[test]
    fn a_malformed_structured_event_is_a_defect_that_says_why() {
        for (body, why) in [
            ("not json", "is not JSON"),
            ("[1]", "is not a JSON object"),
            (
                r#"{"specversion":"1.0","source":"/s","type":"T"}"#,
                "has no `id`",
            ),
            (
                r#"{"specversion":"1.0","id":"e","source":"/s","type":7}"#,
                "`type` that is not a string",
            ),
            (
                r#"{"specversion":"1.0","id":"","source":"/s","type":"T"}"#,
                "empty `id`",
            ),
            (
                r#"{"specversion":"1.0","id":"e","source":"/s","type":"T","data":1,"data_base64":"AA=="}"#,
                "both `data` and `data_base64`",
            ),
            (
                r#"{"specversion":"1.0","id":"e","source":"/s","type":"T","data_base64":"!!"}"#,
                "not base64",
            ),
        ] {
            let e = structured(body);
            assert_eq!(e.defects.len(), 1, "{body}");
            assert_eq!(e.defects[0].name, names::CONTENT_TYPE);
            assert!(
                e.defects[0].reason.contains(why),
                "{body}: {}",
                e.defects[0].reason
            );
            assert_eq!(e.id, "fallback");
            assert_eq!(
                &e.payload[..],
                body.as_bytes(),
                "the body is kept for the dead letter"
            );
        }
    }
}
