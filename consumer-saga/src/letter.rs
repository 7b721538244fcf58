//! The dead letter of a saga whose compensation failed: written to the
//! store's dead-letter table in the transaction that records the failure,
//! so the saga is never `compensation_failed` without its letter, nor the
//! letter written twice.

use time::OffsetDateTime;

use super::SagaDatabase;
use super::compensation;
use super::record::Meta;
use consumer_core::dead_letter::{DeadLetter, DeadLetterKind};
use consumer_core::envelope::Envelope;
use consumer_core::store::{LetterRow, Tx, insert_dead_letter};

/// Header names the letter adds to the triggering message's headers.
pub mod headers {
    /// The saga type.
    pub const SAGA_TYPE: &str = "x-saga-type";
    /// The saga id.
    pub const SAGA_ID: &str = "x-saga-id";
    /// The version that recorded the failure.
    pub const SAGA_VERSION: &str = "x-saga-version";
}

/// Why the letter is in the table and not on a broker.
const REFUSAL: &str = "a saga whose compensation failed: kept here with its context, not a delivery to replay; fix the cause, then `consumer sagas resume` (or `abandon`) it";

/// Writes the letter of saga `saga_type`/`saga_id`, whose transition
/// triggered by `envelope` wrote `version` and ended in
/// `compensation_failed`. Its payload is the saga's context: the state,
/// the reason and the compensation log.
pub(super) async fn store<DB: SagaDatabase>(
    tx: &mut Tx<DB>,
    envelope: &Envelope,
    saga_type: &str,
    saga_id: &str,
    version: i64,
    meta: &Meta,
    state: &str,
) -> Result<(), consumer_core::Error> {
    let now = OffsetDateTime::now_utc();
    let failures = compensation::failures(meta);
    let mut original_headers = envelope.headers.clone();
    original_headers.insert(headers::SAGA_TYPE, saga_type);
    original_headers.insert(headers::SAGA_ID, saga_id);
    original_headers.insert(headers::SAGA_VERSION, itoa::Buffer::new().format(version));
    let context = serde_json::json!({
        "saga_type": saga_type,
        "saga_id": saga_id,
        "version": version,
        "reason": meta.reason,
        "state": serde_json::from_str::<serde_json::Value>(state).unwrap_or(serde_json::Value::Null),
        "compensation": meta.compensation,
    });
    let letter = DeadLetter {
        kind: DeadLetterKind::Terminal,
        error: format!(
            "saga `{saga_type}` `{saga_id}`: compensation failed ({} undo step(s) failed; the others ran)",
            failures.len()
        ),
        causes: failures,
        attempts: 1,
        first_failure: now,
        last_failure: now,
        handler: saga_type.to_owned(),
        message_id: envelope.id.clone(),
        key: Some(saga_id.to_owned()),
        origin: envelope.origin.clone(),
        original_headers,
        payload: bytes::Bytes::from(context.to_string()),
        payload_omitted: None,
    };
    insert_dead_letter::<DB>(tx, &LetterRow::of(&letter, REFUSAL)).await?;
    Ok(())
}
