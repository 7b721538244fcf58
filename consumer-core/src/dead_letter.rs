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

    fn parse(s: &str) -> Option<Self> {
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
    /// The original body, unchanged.
    pub payload: bytes::Bytes,
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
        }
    }

    /// The context as headers, after every original header (an original
    /// `x-dlq-*` header, from an earlier dead-lettering, is replaced).
    pub fn headers(&self) -> Headers {
        let mut h = self.original_headers.clone();
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
        h.insert(headers::DESTINATION, self.origin.destination.as_str());
        h.insert(headers::POSITION, self.origin.position.as_str());
        h.insert(headers::MESSAGE_ID, self.message_id.as_str());
        if let Some(key) = &self.key {
            h.insert(headers::KEY, key.as_str());
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
        for name in [
            headers::KIND,
            headers::ERROR,
            headers::CAUSES,
            headers::ATTEMPTS,
            headers::FIRST_FAILURE,
            headers::LAST_FAILURE,
            headers::HANDLER,
            headers::DESTINATION,
            headers::POSITION,
            headers::MESSAGE_ID,
            headers::KEY,
        ] {
            original_headers.remove(name);
        }
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
                destination: text(headers::DESTINATION)?,
                position: text(headers::POSITION)?,
            },
            original_headers,
            payload: message.payload.clone(),
        })
    }

    /// The original message, ready to publish again after the cause is fixed:
    /// original headers with the attempt count reset.
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
                destination: "orders".into(),
                position: "2/17".into(),
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
    }
}
