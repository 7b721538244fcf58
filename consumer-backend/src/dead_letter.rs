//! Dead letters: a message the consumer gave up on, with the context needed
//! to understand it and to replay it.
//!
//! The context travels as headers (`x-dlq-*`) next to every original header,
//! so it survives any broker, and a dead letter read back from a DLQ parses
//! into the same [`DeadLetter`] with [`DeadLetter::from_message`].

use std::fmt;

use time::OffsetDateTime;

use crate::envelope::{Envelope, Headers, Message, Origin, format_time, names};

/// Header names of the dead-letter context.
pub mod headers {
    /// `poison`, `terminal` or `exhausted`.
    pub const KIND: &str = "x-dlq-kind";
    /// The error's own message.
    pub const ERROR: &str = "x-dlq-error";
    /// The cause chain, one cause per line, outermost first.
    pub const CAUSES: &str = "x-dlq-causes";
    /// Attempts made, the last one included.
    pub const ATTEMPTS: &str = "x-dlq-attempts";
    /// First failure, RFC 3339.
    pub const FIRST_FAILURE: &str = "x-dlq-first-failure";
    /// Last failure, RFC 3339.
    pub const LAST_FAILURE: &str = "x-dlq-last-failure";
    /// Handler (consumer group) that gave up.
    pub const HANDLER: &str = "x-dlq-handler";
    /// Topic or queue it was consumed from.
    pub const DESTINATION: &str = "x-dlq-destination";
    /// Position there (`partition/offset`, delivery tag, ...).
    pub const POSITION: &str = "x-dlq-position";
    /// Id of the original message.
    pub const MESSAGE_ID: &str = "x-dlq-message-id";
    /// Partition key of the original message.
    pub const KEY: &str = "x-dlq-key";
    /// `true` when the dead-letter destination refused the letter for its
    /// size and it was sent again without the original payload: the whole
    /// letter, payload included, is in the store's dead-letter table
    /// (`consumer_dead_letters`, by handler and message id).
    pub const PAYLOAD_OMITTED: &str = "x-dlq-payload-omitted";
    /// Size in bytes of the payload that was left out.
    pub const PAYLOAD_SIZE: &str = "x-dlq-payload-size";
    /// SHA-256 of the payload that was left out, lowercase hex.
    pub const PAYLOAD_SHA256: &str = "x-dlq-payload-sha256";

    /// Every context header, for stripping them from a letter read back.
    pub const ALL: [&str; 14] = [
        KIND,
        ERROR,
        CAUSES,
        ATTEMPTS,
        FIRST_FAILURE,
        LAST_FAILURE,
        HANDLER,
        DESTINATION,
        POSITION,
        MESSAGE_ID,
        KEY,
        PAYLOAD_OMITTED,
        PAYLOAD_SIZE,
        PAYLOAD_SHA256,
    ];
}

/// Why a message was dead-lettered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeadLetterKind {
    /// It could not be decoded (or its headers were malformed, or it was too
    /// large): retrying cannot help.
    Poison,
    /// The handler returned an error classified as terminal.
    Terminal,
    /// Transient failures used up every attempt.
    Exhausted,
}

impl DeadLetterKind {
    /// The lowercase name used in headers.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Poison => "poison",
            Self::Terminal => "terminal",
            Self::Exhausted => "exhausted",
        }
    }

    /// The kind named `s` (`poison`, `terminal`, `exhausted`), as headers
    /// and the dead-letter table write it.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "poison" => Some(Self::Poison),
            "terminal" => Some(Self::Terminal),
            "exhausted" => Some(Self::Exhausted),
            _ => None,
        }
    }
}

impl fmt::Display for DeadLetterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A message given up on, with its structured error context.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    /// Why.
    pub kind: DeadLetterKind,
    /// The error's message.
    pub error: String,
    /// Its `source()` chain, outermost first.
    pub causes: Vec<String>,
    /// Attempts made, the last included.
    pub attempts: u32,
    /// When the first attempt failed.
    pub first_failure: OffsetDateTime,
    /// When the last attempt failed.
    pub last_failure: OffsetDateTime,
    /// The handler that gave up.
    pub handler: String,
    /// Id of the original message.
    pub message_id: String,
    /// Partition key of the original message.
    pub key: Option<String>,
    /// Where the original was consumed from.
    pub origin: Origin,
    /// Every original header, trace context included.
    pub original_headers: Headers,
    /// The original body, unchanged; empty when it was left out (see
    /// [`DeadLetter::payload_omitted`]).
    pub payload: bytes::Bytes,
    /// Set when the letter was published without its payload, because the
    /// dead-letter destination refused it for its size.
    pub payload_omitted: Option<OmittedPayload>,
}

/// What is known of a payload a dead letter had to leave out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OmittedPayload {
    /// Its size in bytes.
    pub size: usize,
    /// Its SHA-256, lowercase hex: matches the original record, which may
    /// still be on the broker at the letter's origin.
    pub sha256: String,
}

impl OmittedPayload {
    /// Describes `payload`.
    pub fn of(payload: &[u8]) -> Self {
        use sha2::Digest;
        Self {
            size: payload.len(),
            sha256: hex::encode(sha2::Sha256::digest(payload)),
        }
    }
}

impl DeadLetter {
    /// Builds the record for `envelope`, taking the message and cause chain
    /// out of `error`.
    pub fn new(
        kind: DeadLetterKind,
        error: &(dyn std::error::Error + 'static),
        envelope: &Envelope,
        handler: &str,
        attempts: u32,
        first_failure: Option<OffsetDateTime>,
    ) -> Self {
        let now = OffsetDateTime::now_utc();
        let mut causes = Vec::new();
        let mut source = error.source();
        while let Some(cause) = source {
            causes.push(cause.to_string());
            source = cause.source();
        }
        Self {
            kind,
            error: error.to_string(),
            causes,
            attempts,
            first_failure: first_failure.or(envelope.first_failure).unwrap_or(now),
            last_failure: now,
            handler: handler.to_owned(),
            message_id: envelope.id.clone(),
            key: envelope.key.clone(),
            origin: envelope.origin.clone(),
            original_headers: envelope.headers.clone(),
            payload: envelope.payload.clone(),
            payload_omitted: None,
        }
    }

    /// The context as headers, after every original header (an original
    /// `x-dlq-*` header, from an earlier dead-lettering, is dropped: the
    /// letter's context is this one alone).
    pub fn headers(&self) -> Headers {
        let mut h = self.original_headers.clone();
        for name in headers::ALL {
            h.remove(name);
        }
        h.insert(headers::KIND, self.kind.as_str());
        h.insert(headers::ERROR, sanitize(&self.error));
        h.insert(
            headers::CAUSES,
            self.causes
                .iter()
                .map(|c| sanitize(c))
                .collect::<Vec<_>>()
                .join("\n"),
        );
        h.insert(headers::ATTEMPTS, self.attempts.to_string());
        h.insert(headers::FIRST_FAILURE, format_time(self.first_failure));
        h.insert(headers::LAST_FAILURE, format_time(self.last_failure));
        h.insert(headers::HANDLER, self.handler.as_str());
        h.insert(headers::DESTINATION, self.origin.channel.as_str());
        h.insert(headers::POSITION, self.origin.position.as_str());
        h.insert(headers::MESSAGE_ID, self.message_id.as_str());
        if let Some(key) = &self.key {
            h.insert(headers::KEY, key.as_str());
        }
        if let Some(omitted) = &self.payload_omitted {
            h.insert(headers::PAYLOAD_OMITTED, "true");
            h.insert(
                headers::PAYLOAD_SIZE,
                itoa::Buffer::new().format(omitted.size),
            );
            h.insert(headers::PAYLOAD_SHA256, omitted.sha256.as_str());
        }
        h
    }

    /// The message to publish to a DLQ: original body and key, context headers.
    pub fn to_message(&self) -> Message {
        Message {
            key: self.key.clone(),
            headers: self.headers(),
            payload: self.payload.clone(),
        }
    }

    /// The letter without its payload, for a dead-letter destination that
    /// refused the whole one for its size: every context header stays, and
    /// `x-dlq-payload-omitted`, `x-dlq-payload-size` and
    /// `x-dlq-payload-sha256` say what was left out.
    pub fn without_payload(&self) -> Self {
        Self {
            payload_omitted: Some(
                self.payload_omitted
                    .clone()
                    .unwrap_or_else(|| OmittedPayload::of(&self.payload)),
            ),
            payload: bytes::Bytes::new(),
            ..self.clone()
        }
    }

    /// Reads a dead letter back from a DLQ message; `None` when the context
    /// headers are missing or malformed.
    pub fn from_message(message: &Message) -> Option<Self> {
        let h = &message.headers;
        let text = |n: &str| h.get(n).ok().flatten().map(str::to_owned);
        let time = |n: &str| {
            let raw = text(n)?;
            OffsetDateTime::parse(&raw, &time::format_description::well_known::Rfc3339).ok()
        };
        let mut original_headers = h.clone();
        for name in headers::ALL {
            original_headers.remove(name);
        }
        let payload_omitted = match text(headers::PAYLOAD_OMITTED).as_deref() {
            Some("true") => Some(OmittedPayload {
                size: text(headers::PAYLOAD_SIZE)?.parse().ok()?,
                sha256: text(headers::PAYLOAD_SHA256)?,
            }),
            _ => None,
        };
        let causes = text(headers::CAUSES).unwrap_or_default();
        Some(Self {
            kind: DeadLetterKind::parse(&text(headers::KIND)?)?,
            error: text(headers::ERROR)?,
            causes: causes
                .lines()
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect(),
            attempts: text(headers::ATTEMPTS)?.parse().ok()?,
            first_failure: time(headers::FIRST_FAILURE)?,
            last_failure: time(headers::LAST_FAILURE)?,
            handler: text(headers::HANDLER)?,
            message_id: text(headers::MESSAGE_ID)?,
            key: text(headers::KEY),
            origin: Origin {
                channel: text(headers::DESTINATION)?.into(),
                position: text(headers::POSITION)?.into(),
                ..Origin::default()
            },
            original_headers,
            payload: message.payload.clone(),
            payload_omitted,
        })
    }

    /// The original message, ready to publish again after the cause is fixed:
    /// original headers with the attempt count reset. A letter whose
    /// payload was omitted replays with an empty payload: check
    /// [`DeadLetter::payload_omitted`] first.
    pub fn replay(&self) -> Message {
        let mut headers = self.original_headers.clone();
        headers.remove(names::ATTEMPT);
        headers.remove(names::FIRST_FAILURE);
        Message {
            key: self.key.clone(),
            headers,
            payload: self.payload.clone(),
        }
    }
}

/// Header values must not carry line breaks inside one cause, and brokers
/// cap header sizes: keep each value to one line of at most 4 KiB.
fn sanitize(s: &str) -> String {
    let one_line: String = s
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    if one_line.len() <= 4096 {
        return one_line;
    }
    let mut end = 4096;
    while !one_line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &one_line[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("payment failed")]
    struct Outer(#[source] Inner);
    #[derive(Debug, thiserror::Error)]
    #[error("card declined\nby issuer")]
    struct Inner;

    #[test]
    fn round_trips_through_headers_with_the_cause_chain() {
        let mut headers = Headers::new();
        headers.insert(names::ID, "m-9");
        headers.insert(
            names::TRACEPARENT,
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        );
        let env = Envelope::from_parts(
            bytes::Bytes::from_static(b"{}"),
            headers,
            Some("k".into()),
            Origin {
                channel: "orders".into(),
                position: "2/17".into(),
                ..Origin::default()
            },
            || unreachable!(),
        );
        let dl = DeadLetter::new(
            DeadLetterKind::Terminal,
            &Outer(Inner),
            &env,
            "charge",
            1,
            None,
        );
        let back = DeadLetter::from_message(&dl.to_message()).expect("parses back");
        assert_eq!(back.kind, DeadLetterKind::Terminal);
        assert_eq!(back.error, "payment failed");
        assert_eq!(back.causes, ["card declined by issuer"]);
        assert_eq!(back.origin.position, "2/17");
        assert_eq!(back.message_id, "m-9");
        assert_eq!(back.original_headers, env.headers);
        assert_eq!(
            back.replay().headers.get(names::TRACEPARENT),
            env.headers.get(names::TRACEPARENT)
        );
        assert_eq!(back.payload_omitted, None);
    }

    /// Found by reading what the `kafka_record` fuzz property asserts: a
    /// message that already carried `x-dlq-*` headers (a dead letter
    /// consumed from its DLQ and failing again) kept the old `x-dlq-key`
    /// when it had no key of its own, and parsed back with the wrong key.
    #[test]
    fn context_headers_of_an_earlier_dead_lettering_are_not_carried_over() {
        let mut headers = Headers::new();
        headers.insert(headers::KEY, "stale-key");
        headers.insert(headers::PAYLOAD_OMITTED, "true");
        headers.insert("x-tenant", "acme");
        let env = Envelope::from_parts(
            bytes::Bytes::from_static(b"{}"),
            headers,
            None,
            Origin::default(),
            || "m-2".into(),
        );
        let dl = DeadLetter::new(DeadLetterKind::Poison, &Inner, &env, "h", 1, None);
        let back = DeadLetter::from_message(&dl.to_message()).expect("parses back");
        assert_eq!(
            back.key, None,
            "the letter's key is the message's, which had none"
        );
        assert_eq!(back.payload_omitted, None);
        assert_eq!(back.original_headers.get("x-tenant"), Ok(Some("acme")));
    }

    #[test]
    fn a_letter_without_its_payload_keeps_the_context_and_says_what_was_left_out() {
        let env = Envelope::from_parts(
            bytes::Bytes::from_static(b"abc"),
            Headers::new(),
            Some("k".into()),
            Origin::default(),
            || "m-1".into(),
        );
        let dl = DeadLetter::new(DeadLetterKind::Poison, &Inner, &env, "h", 1, None);
        let small = dl.without_payload().to_message();
        assert!(small.payload.is_empty());
        let back = DeadLetter::from_message(&small).expect("parses back");
        let omitted = back.payload_omitted.expect("marked as omitted");
        assert_eq!(omitted.size, 3);
        assert_eq!(
            omitted.sha256, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            "SHA-256 of `abc`"
        );
        assert_eq!(
            (back.message_id.as_str(), back.kind),
            ("m-1", DeadLetterKind::Poison)
        );
        assert!(
            back.original_headers.is_empty(),
            "context headers are not original ones"
        );
    }
}
