//! Letters as JSON: the lines `export` writes and `import` reads, and what
//! `--json` prints. Every byte survives: the payload as base64, a header
//! value that is not text as hex (the dead-letter table's own encoding),
//! so an export imported and exported again is byte-identical.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use consumer_core::envelope::format_time;
use consumer_core::store::{headers_from_json, headers_json};
use consumer_core::{DeadLetter, DeadLetterKind, dead_letter::OmittedPayload, envelope::Origin};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::letter::Letter;

/// One letter, portable between places: nothing a place assigns on
/// arrival (a row id, a delivery tag, the time it was stored) is in it.
#[derive(Debug, Serialize, Deserialize)]
pub struct LetterJson {
    /// The letter's id (derived, checked on import).
    pub id: String,
    /// The handler that gave up.
    pub handler: String,
    /// The original message's id.
    pub message_id: String,
    /// `poison`, `terminal`, `exhausted`.
    pub kind: String,
    /// The error's message.
    pub error: String,
    /// Its cause chain, outermost first.
    pub causes: Vec<String>,
    /// Attempts made.
    pub attempts: u32,
    /// RFC 3339.
    pub first_failure: String,
    /// RFC 3339.
    pub last_failure: String,
    /// Topic or queue it was consumed from.
    pub destination: String,
    /// Its position there.
    pub position: String,
    /// Partition key.
    pub key: Option<String>,
    /// Original headers in order: `{"name", "value"}` or `{"name", "value_hex"}`.
    pub headers: serde_json::Value,
    /// The payload, base64.
    pub payload_base64: String,
    /// What was left out when the payload was omitted.
    pub payload_omitted: Option<OmittedJson>,
    /// Why the broker refused it (dead-letter table only).
    pub refusal: Option<String>,
}

/// [`OmittedPayload`] as JSON.
#[derive(Debug, Serialize, Deserialize)]
pub struct OmittedJson {
    /// Bytes left out.
    pub size: usize,
    /// Their SHA-256.
    pub sha256: String,
}

impl LetterJson {
    /// `letter` as JSON.
    pub fn of(letter: &Letter) -> Self {
        let dl = &letter.letter;
        Self {
            id: letter.id.clone(),
            handler: dl.handler.clone(),
            message_id: dl.message_id.clone(),
            kind: dl.kind.as_str().to_owned(),
            error: dl.error.clone(),
            causes: dl.causes.clone(),
            attempts: dl.attempts,
            first_failure: format_time(dl.first_failure),
            last_failure: format_time(dl.last_failure),
            destination: dl.origin.channel.to_string(),
            position: dl.origin.position.to_string(),
            key: dl.key.clone(),
            headers: serde_json::from_str(&headers_json(&dl.original_headers))
                .unwrap_or(serde_json::Value::Null),
            payload_base64: BASE64.encode(&dl.payload),
            payload_omitted: dl.payload_omitted.as_ref().map(|o| OmittedJson {
                size: o.size,
                sha256: o.sha256.clone(),
            }),
            refusal: letter.refusal.clone(),
        }
    }

    /// The letter back; `Err` says which field is wrong.
    pub fn into_letter(self) -> Result<Letter, String> {
        let time = |field: &str, text: &str| {
            OffsetDateTime::parse(text, &Rfc3339)
                .map_err(|e| format!("{field} {text:?} is not RFC 3339: {e}"))
        };
        let dl = DeadLetter {
            kind: DeadLetterKind::parse(&self.kind).ok_or_else(|| {
                format!("kind {:?} is not poison, terminal or exhausted", self.kind)
            })?,
            error: self.error,
            causes: self.causes,
            attempts: self.attempts,
            first_failure: time("first_failure", &self.first_failure)?,
            last_failure: time("last_failure", &self.last_failure)?,
            handler: self.handler,
            message_id: self.message_id,
            key: self.key,
            origin: Origin {
                channel: self.destination.into(),
                position: self.position.into(),
                ..Origin::default()
            },
            original_headers: headers_from_json(&self.headers.to_string())
                .ok_or("headers are not [{\"name\", \"value\" | \"value_hex\"}]")?,
            payload: BASE64
                .decode(&self.payload_base64)
                .map_err(|e| format!("payload_base64 is not base64: {e}"))?
                .into(),
            payload_omitted: self.payload_omitted.map(|o| OmittedPayload {
                size: o.size,
                sha256: o.sha256,
            }),
        };
        let mut letter = Letter::new(dl);
        if letter.id != self.id {
            return Err(format!(
                "id {} does not match its handler, message id and last failure (expected {})",
                self.id, letter.id
            ));
        }
        letter.refusal = self.refusal;
        Ok(letter)
    }
}

/// What `list --json` and `show --json` print: the portable letter, and
/// when the table stored it.
#[derive(Debug, Serialize)]
pub struct ListedJson {
    /// The letter.
    #[serde(flatten)]
    pub letter: LetterJson,
    /// When the dead-letter table stored it.
    pub stored_at: Option<String>,
    /// The payload parsed, when it is JSON (`show` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_json: Option<serde_json::Value>,
    /// Whether a replay already sent it, per the replay journal (`list` on
    /// a Kafka topic, where a replayed letter stays; absent elsewhere).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replayed: Option<bool>,
}

impl ListedJson {
    /// `letter` for `list --json`; with its payload parsed for `show`.
    pub fn of(letter: &Letter, with_payload: bool) -> Self {
        Self {
            letter: LetterJson::of(letter),
            stored_at: letter.stored_at.map(format_time),
            payload_json: with_payload
                .then(|| serde_json::from_slice(&letter.letter.payload).ok())
                .flatten(),
            replayed: None,
        }
    }

    /// The same, saying whether a replay already sent it.
    pub fn replayed(mut self, replayed: Option<bool>) -> Self {
        self.replayed = replayed;
        self
    }
}

/// One JSON line (no trailing newline).
pub fn line<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\":{:?}}}", e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use consumer_core::{Envelope, Headers};

    fn letter() -> Letter {
        let mut headers = Headers::new();
        headers.append("x-bytes", [0xffu8, 0x00]);
        headers.append("ce_id", "m-1");
        let envelope = Envelope::from_parts(
            bytes::Bytes::from_static(b"\x00{not json"),
            headers,
            Some("k".into()),
            Origin::default(),
            || "m-1".into(),
        );
        #[derive(Debug, thiserror::Error)]
        #[error("boom")]
        struct Boom;
        Letter::new(DeadLetter::new(
            DeadLetterKind::Poison,
            &Boom,
            &envelope,
            "h",
            1,
            None,
        ))
    }

    #[test]
    fn a_letter_survives_json_byte_for_byte() {
        let l = letter();
        let text = line(&LetterJson::of(&l));
        let back = serde_json::from_str::<LetterJson>(&text)
            .expect("parses")
            .into_letter()
            .expect("a letter");
        assert_eq!(back.id, l.id);
        assert_eq!(back.letter.payload, l.letter.payload);
        assert_eq!(back.letter.original_headers, l.letter.original_headers);
        assert_eq!(line(&LetterJson::of(&back)), text);
    }

    #[test]
    fn an_id_that_does_not_match_the_letter_is_refused() {
        let mut json = LetterJson::of(&letter());
        json.message_id = "m-2".into();
        let err = json.into_letter().expect_err("refused");
        assert!(err.contains("does not match"), "{err}");
    }
}
