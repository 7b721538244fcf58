//! A dead letter as the dead-letter table stores it, prepared once for
//! either database.

use std::borrow::Cow;

use crate::dead_letter::DeadLetter;
use crate::envelope::Headers;
use crate::sql::Arg;
use crate::sql::storable;

/// The columns of one `consumer_dead_letters` row. Text is
/// [`storable`]: a NUL that came with the message becomes U+FFFD (a header
/// value with one is kept byte for byte, as `value_hex`).
#[doc(hidden)]
#[derive(Debug)]
pub struct LetterRow<'a> {
    pub handler: Cow<'a, str>,
    pub message_id: Cow<'a, str>,
    pub kind: &'static str,
    pub error: Cow<'a, str>,
    /// JSON array of strings.
    pub causes: String,
    pub attempts: i32,
    pub first_failure_ms: i64,
    pub last_failure_ms: i64,
    pub destination: Cow<'a, str>,
    pub position: Cow<'a, str>,
    pub key: Option<Cow<'a, str>>,
    /// JSON, see [`headers_json`].
    pub headers: String,
    pub payload: &'a [u8],
    pub refusal: Cow<'a, str>,
}

impl<'a> LetterRow<'a> {
    /// The row for `letter`, refused by the broker for `refusal`.
    pub fn of(letter: &'a DeadLetter, refusal: &'a str) -> Self {
        let ms = |t: time::OffsetDateTime| {
            i64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0)
        };
        Self {
            handler: storable(&letter.handler),
            message_id: storable(&letter.message_id),
            kind: letter.kind.as_str(),
            error: storable(&letter.error),
            causes: serde_json::Value::from(
                letter
                    .causes
                    .iter()
                    .map(|c| storable(c).into_owned())
                    .collect::<Vec<_>>(),
            )
            .to_string(),
            attempts: i32::try_from(letter.attempts).unwrap_or(i32::MAX),
            first_failure_ms: ms(letter.first_failure),
            last_failure_ms: ms(letter.last_failure),
            destination: storable(&letter.origin.channel),
            position: storable(&letter.origin.position),
            key: letter.key.as_deref().map(storable),
            headers: headers_json(&letter.original_headers),
            payload: &letter.payload,
            refusal: storable(refusal),
        }
    }
}

impl LetterRow<'_> {
    /// The columns, in table order (`handler` .. `refusal`): the 14
    /// arguments of the dead-letter insert on either database.
    pub fn args(&self) -> [Arg<'_>; 14] {
        [
            Arg::Text(&self.handler),
            Arg::Text(&self.message_id),
            Arg::Text(self.kind),
            Arg::Text(&self.error),
            Arg::Text(&self.causes),
            Arg::Int(i64::from(self.attempts)),
            Arg::Int(self.first_failure_ms),
            Arg::Int(self.last_failure_ms),
            Arg::Text(&self.destination),
            Arg::Text(&self.position),
            Arg::MaybeText(self.key.as_deref()),
            Arg::Text(&self.headers),
            Arg::Bytes(self.payload),
            Arg::Text(&self.refusal),
        ]
    }
}

/// Headers as a JSON array of `{"name": .., "value": ..}` in order, with
/// `"value_hex"` instead of `"value"` for a value that is not UTF-8 or
/// holds a NUL (which PostgreSQL's JSONB refuses).
pub fn headers_json(headers: &Headers) -> String {
    let entries: Vec<serde_json::Value> = headers
        .iter()
        .map(|(name, value)| {
            let name = storable(name);
            match std::str::from_utf8(value) {
                Ok(text) if !text.contains('\0') => {
                    serde_json::json!({ "name": name, "value": text })
                }
                _ => serde_json::json!({ "name": name, "value_hex": hex::encode(value) }),
            }
        })
        .collect();
    serde_json::Value::from(entries).to_string()
}

/// Reads back what [`headers_json`] wrote (a `value_hex` entry becomes its
/// bytes again); `None` when `json` is not such an array.
pub fn headers_from_json(json: &str) -> Option<Headers> {
    let entries: Vec<serde_json::Value> = serde_json::from_str(json).ok()?;
    let mut headers = Headers::new();
    for entry in entries {
        let name = entry.get("name")?.as_str()?;
        match (entry.get("value"), entry.get("value_hex")) {
            (Some(serde_json::Value::String(text)), _) => headers.append(name, text.as_str()),
            (_, Some(serde_json::Value::String(hex))) => {
                headers.append(name, hex::decode(hex).ok()?)
            }
            _ => return None,
        }
    }
    Some(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_keep_order_and_bytes_that_are_not_text() {
        let mut h = Headers::new();
        h.append("a", "1");
        h.append("b", [0xffu8, 0x00]);
        h.append("c\0", "x\0");
        assert_eq!(
            headers_json(&h),
            "[{\"name\":\"a\",\"value\":\"1\"},{\"name\":\"b\",\"value_hex\":\"ff00\"},\
             {\"name\":\"c\u{FFFD}\",\"value_hex\":\"7800\"}]"
        );
        let back = headers_from_json(&headers_json(&h)).expect("reads back");
        assert_eq!(back.get_bytes("b"), Some(&[0xffu8, 0x00][..]));
        assert_eq!(back.iter().count(), 3);
    }
}
