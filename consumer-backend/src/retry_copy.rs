//! The copy of a delivery that goes back through the broker for a later
//! attempt.

use std::time::Duration;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::envelope::{Envelope, Headers, Message, format_time, names};

/// A delivery sent back through the broker to be attempted again after
/// [`delay`](Self::delay).
#[derive(Debug, Clone)]
pub struct RetryCopy {
    /// What to publish: the original key, payload and headers, with
    /// `ce_id` pinned to the id the consumer used, and
    /// `x-consumer-attempt`, `x-consumer-first-failure` and
    /// `x-consumer-due` set.
    pub message: Message,
    /// The attempt number the copy carries (the failed one plus one).
    pub attempt: u32,
    /// When the first attempt failed.
    pub first_failure: OffsetDateTime,
    /// How long the broker should hold the copy.
    pub delay: Duration,
    /// When the copy is due (now plus the delay).
    pub due: OffsetDateTime,
    /// Why the attempt failed (the handler's error as displayed), where
    /// the runtime set it ([`with_error`](Self::with_error)): a backend that
    /// keeps the delivery in place (the database's job queue) records it.
    pub error: Option<String>,
}

impl RetryCopy {
    /// The copy of `envelope` for attempt `attempt`, due after `delay`.
    ///
    /// The id is pinned because the id the consumer deduplicated on may not
    /// be a header at all (a broker position, an AMQP `message-id`, a
    /// content hash): the copy has another position and other headers, and
    /// without the pin a crash between the copy's confirm and the
    /// original's ack would run both under two dedup keys.
    pub fn new(
        envelope: &Envelope,
        attempt: u32,
        first_failure: OffsetDateTime,
        delay: Duration,
    ) -> Self {
        let due = OffsetDateTime::now_utc() + delay;
        let mut headers: Headers = envelope.headers.clone();
        headers.insert(names::ID, envelope.id.as_str());
        headers.insert(names::ATTEMPT, itoa::Buffer::new().format(attempt));
        headers.insert(names::FIRST_FAILURE, format_time(first_failure));
        headers.insert(names::DUE, format_time(due));
        Self {
            message: Message {
                key: envelope.key.clone(),
                headers,
                payload: envelope.payload.clone(),
            },
            attempt,
            first_failure,
            delay,
            due,
            error: None,
        }
    }

    /// The copy, with why its attempt failed.
    #[must_use]
    pub fn with_error(mut self, error: impl Into<String>) -> Self {
        self.error = Some(error.into());
        self
    }
}

/// How long until a retry copy is due, read from its `x-consumer-due`
/// header: `None` without a readable one (deliver it now), zero when it is
/// past.
pub fn due_in(headers: &Headers) -> Option<Duration> {
    let raw = headers.get(names::DUE).ok().flatten()?;
    let due = OffsetDateTime::parse(raw, &Rfc3339).ok()?;
    let wait = due - OffsetDateTime::now_utc();
    Some(wait.try_into().unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::envelope::Origin;

    #[test]
    fn the_copy_keeps_an_id_that_was_not_a_header_and_carries_the_attempt() {
        let mut headers = Headers::new();
        headers.insert("x-tenant", "acme");
        let envelope = Envelope::from_parts(
            Bytes::from_static(b"{}"),
            headers,
            Some("k".into()),
            Origin {
                channel: "orders".into(),
                position: "0/7".into(),
                ..Origin::default()
            },
            || "orders/0/7".into(),
        );
        let first = OffsetDateTime::now_utc();
        let copy = RetryCopy::new(&envelope, 2, first, Duration::from_secs(60));
        let back = Envelope::from_parts(
            copy.message.payload.clone(),
            copy.message.headers.clone(),
            copy.message.key.clone(),
            Origin::default(),
            || "another position".into(),
        );
        assert_eq!(back.id, "orders/0/7", "the id is pinned");
        assert_eq!(back.attempt, 2);
        assert_eq!(back.key.as_deref(), Some("k"));
        assert_eq!(back.headers.get("x-tenant"), Ok(Some("acme")));
        assert!(back.first_failure.is_some());
        let wait = due_in(&copy.message.headers).expect("a due time");
        assert!(wait > Duration::from_secs(50) && wait <= Duration::from_secs(60));
    }

    #[test]
    fn a_due_time_in_the_past_or_unreadable_delivers_now() {
        let mut past = Headers::new();
        past.insert(names::DUE, "2020-01-01T00:00:00Z");
        assert_eq!(due_in(&past), Some(Duration::ZERO));
        let mut bad = Headers::new();
        bad.insert(names::DUE, "tomorrow");
        assert_eq!(due_in(&bad), None);
        assert_eq!(due_in(&Headers::new()), None);
    }
}
