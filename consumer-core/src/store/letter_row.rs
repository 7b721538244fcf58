//! A dead letter as the dead-letter table stores it, prepared once for
//! either database.

use crate::dead_letter::DeadLetter;
use crate::envelope::Headers;

/// The columns of one `consumer_dead_letters` row.
#[doc(hidden)]
#[derive(Debug)]
pub struct LetterRow<'a> {
    pub handler: &'a str,
    pub message_id: &'a str,
    pub kind: &'static str,
    pub error: &'a str,
    /// JSON array of strings.
    pub causes: String,
    pub attempts: i32,
    pub first_failure_ms: i64,
    pub last_failure_ms: i64,
    pub destination: &'a str,
    pub position: &'a str,
    pub key: Option<&'a str>,
    /// JSON, see [`headers_json`].
    pub headers: String,
    pub payload: &'a [u8],
    pub refusal: &'a str,
}

impl<'a> LetterRow<'a> {
    /// The row for `letter`, refused by the broker for `refusal`.
    pub fn of(letter: &'a DeadLetter, refusal: &'a str) -> Self {
        let ms = |t: time::OffsetDateTime| {
            i64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0)
        };
        Self {
            handler: &letter.handler,
            message_id: &letter.message_id,
            kind: letter.kind.as_str(),
            error: &letter.error,
            causes: serde_json::Value::from(letter.causes.clone()).to_string(),
            attempts: i32::try_from(letter.attempts).unwrap_or(i32::MAX),
            first_failure_ms: ms(letter.first_failure),
            last_failure_ms: ms(letter.last_failure),
            destination: &letter.origin.destination,
            position: &letter.origin.position,
            key: letter.key.as_deref(),
            headers: headers_json(&letter.original_headers),
            payload: &letter.payload,
            refusal,
        }
    }
}

impl LetterRow<'_> {
    /// Binds the columns, in table order (`handler` .. `refusal`), to
    /// `query`: the same 14 parameters on either database.
    pub fn bind<'q, DB>(
        &self,
        query: sqlx::query::Query<'q, DB, DB::Arguments>,
    ) -> sqlx::query::Query<'q, DB, DB::Arguments>
    where
        DB: sqlx::Database,
        for<'t> &'t str: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
        for<'t> Option<&'t str>: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
        for<'t> &'t [u8]: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
        for<'t> i32: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
        for<'t> i64: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    {
        query
            .bind(self.handler)
            .bind(self.message_id)
            .bind(self.kind)
            .bind(self.error)
            .bind(self.causes.as_str())
            .bind(self.attempts)
            .bind(self.first_failure_ms)
            .bind(self.last_failure_ms)
            .bind(self.destination)
            .bind(self.position)
            .bind(self.key)
            .bind(self.headers.as_str())
            .bind(self.payload)
            .bind(self.refusal)
    }
}

/// Headers as a JSON array of `{"name": .., "value": ..}` in order, with
/// `"value_hex"` instead of `"value"` for a value that is not UTF-8.
pub fn headers_json(headers: &Headers) -> String {
    let entries: Vec<serde_json::Value> = headers
        .iter()
        .map(|(name, value)| match std::str::from_utf8(value) {
            Ok(text) => serde_json::json!({ "name": name, "value": text }),
            Err(_) => serde_json::json!({ "name": name, "value_hex": crate::hex::encode(value) }),
        })
        .collect();
    serde_json::Value::from(entries).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_keep_order_and_bytes_that_are_not_text() {
        let mut h = Headers::new();
        h.append("a", "1");
        h.append("b", [0xffu8, 0x00]);
        assert_eq!(
            headers_json(&h),
            r#"[{"name":"a","value":"1"},{"name":"b","value_hex":"ff00"}]"#
        );
    }
}
