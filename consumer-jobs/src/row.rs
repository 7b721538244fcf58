//! [`JobRow`]: a claimed job as the claim reads it, and the delivery the
//! runtime gets from it.

use std::sync::Arc;

use consumer_core::Envelope;
use consumer_core::envelope::{Headers, Origin, Position, names};
use consumer_core::store::headers_from_json;

/// One claimed job.
#[derive(Debug, Clone)]
pub(crate) struct JobRow {
    /// Its place in the queue's order (the primary key).
    pub seq: i64,
    /// How many times it was claimed, this claim included: with `seq`, the
    /// name of this delivery.
    pub claims: i64,
    /// The message id.
    pub id: String,
    /// The key whose order it keeps, if any.
    pub key: Option<String>,
    /// Headers, as `headers_json` wrote them.
    pub headers: String,
    /// The body.
    pub payload: Vec<u8>,
    /// The attempt this delivery is (1 for the first).
    pub attempt: i64,
}

impl JobRow {
    /// The envelope the runtime handles: the row's headers with its
    /// attempt, its key, and its queue and `seq` as origin. Headers the
    /// queue cannot read back (a row written by hand) leave the message
    /// without them, which the runtime reports as the message's defect.
    pub(crate) fn envelope(self, queue: &Arc<str>) -> Arc<Envelope> {
        let mut headers = headers_from_json(&self.headers).unwrap_or_else(|| {
            tracing::warn!(
                target: "consumer::jobs",
                seq = self.seq,
                "unreadable headers column: the job is delivered without its headers"
            );
            Headers::new()
        });
        headers.insert(names::ATTEMPT, self.attempt.max(1).to_string());
        let origin = Origin {
            channel: Arc::clone(queue).into(),
            position: Position::from(self.seq.to_string()),
            ..Origin::default()
        };
        let id = self.id;
        Arc::new(Envelope::from_parts(
            self.payload.into(),
            headers,
            self.key,
            origin,
            || id,
        ))
    }
}
