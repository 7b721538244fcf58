//! What the fuzz targets check, beyond "never panics": the properties the
//! framework relies on for any envelope a backend builds from the wire.

use consumer_backend::dead_letter::DeadLetter;
use consumer_backend::envelope::{Envelope, Headers};
use consumer_backend::RetryCopy;
use consumer_backend::dead_letter::DeadLetterKind;

/// The error every property builds a dead letter with.
#[derive(Debug)]
struct Poison;

impl std::fmt::Display for Poison {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("poison")
    }
}

impl std::error::Error for Poison {}

/// Whatever the envelope, its dead letter parses back with the same id,
/// key and origin (channel and position) and with every original header that is not a
/// dead-letter context header; and its retry copy keeps its id and carries
/// the next attempt.
pub fn check_envelope(envelope: &Envelope) {
    assert!(!envelope.id.is_empty(), "an envelope always has an id");

    let letter = DeadLetter::new(DeadLetterKind::Poison, &Poison, envelope, "h", 1, None);
    let back = DeadLetter::from_message(&letter.to_message()).expect("a dead letter parses back");
    assert_eq!(back.message_id, envelope.id);
    assert_eq!(back.key, envelope.key);
    // Where it sat (topic or queue, position) travels; the broker's own
    // terms for it (`Placement`, for spans) do not.
    assert_eq!(back.origin.channel, envelope.origin.channel);
    assert_eq!(back.origin.position, envelope.origin.position);
    assert_eq!(back.payload, envelope.payload);
    assert_eq!(back.original_headers, without_context(&envelope.headers));
    let small = DeadLetter::from_message(&letter.without_payload().to_message())
        .expect("a dead letter without its payload parses back");
    assert_eq!(
        small.payload_omitted.map(|o| o.size),
        Some(envelope.payload.len())
    );

    let copy = RetryCopy::new(
        envelope,
        2,
        time::OffsetDateTime::now_utc(),
        std::time::Duration::ZERO,
    );
    let again = Envelope::from_parts(
        copy.message.payload.clone(),
        copy.message.headers.clone(),
        copy.message.key.clone(),
        envelope.origin.clone(),
        || "another position".to_owned(),
    );
    assert_eq!(again.id, envelope.id, "the retry copy keeps the id");
    assert_eq!(again.attempt, 2);
}

/// The headers a dead letter read back reports as original: every header
/// but the dead-letter context ones.
fn without_context(headers: &Headers) -> Headers {
    let mut h = headers.clone();
    for name in consumer_backend::dead_letter::headers::ALL {
        h.remove(name);
    }
    h
}
