//! [`JobRow`]: a claimed job as the claim reads it, and the delivery the
//! runtime gets from it.

use std::sync::Arc;

use consumer_core::Envelope;
use consumer_core::envelope::{Headers, Origin, Position};
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
}

impl JobRow {
    /// The envelope the runtime handles: the row's headers (a retry's
    /// carry its attempt, as the retry copy wrote them: the `attempt`
    /// column is the operator's copy, and a message's own malformed
    /// attempt header stays the defect it is), its key, and its queue and
    /// `seq` as origin. Headers the queue cannot read back (a row written
    /// by hand) leave the message without them.
    /// A structured-mode body over `max_body` bytes is left unparsed for
    /// the runtime's size check (`Source::limit_body`).
    pub(crate) fn envelope(self, queue: &Arc<str>, max_body: usize) -> Arc<Envelope> {
        let headers = headers_from_json(&self.headers).unwrap_or_else(|| {
            tracing::warn!(
                target: "consumer::jobs",
                seq = self.seq,
                "unreadable headers column: the job is delivered without its headers"
            );
            Headers::new()
        });
        let origin = Origin {
            channel: Arc::clone(queue).into(),
            position: Position::from(self.seq.to_string()),
            ..Origin::default()
        };
        let id = self.id;
        Arc::new(Envelope::from_parts_within(
            max_body,
            self.payload.into(),
            headers,
            self.key,
            origin,
            || id,
        ))
    }
}
