//! The saga log lines as a listener, under the target `consumer::saga`.

use super::Happened;
use crate::SagaStatus;
use crate::metrics::Ignored;

pub(super) fn on(saga: &'static str, what: &Happened<'_>) {
    match *what {
        Happened::Conflict { saga_id } => tracing::debug!(
            target: "consumer::saga",
            saga, saga_id,
            "version conflict: applying on top of the new version"
        ),
        Happened::Saved {
            saga_id, status, ..
        } => match status {
            SagaStatus::CompensationFailed => tracing::error!(
                target: "consumer::saga",
                saga, saga_id,
                "compensation failed: the saga is dead-lettered to the store's table; fix the cause, then `consumer sagas resume {saga} {saga_id}`"
            ),
            s if !s.is_active() => {
                tracing::info!(target: "consumer::saga", saga, saga_id, status = s.as_str(), "saga finished");
            }
            _ => {}
        },
        Happened::Ignored {
            saga_id,
            event_type,
            message_id,
            why: Ignored::OutOfStatus(status),
        } => tracing::warn!(
            target: "consumer::saga",
            saga, saga_id, event_type, message_id,
            status = status.as_str(),
            "acked without a transition: its registration does not run while the saga is {status}"
        ),
        Happened::Ignored {
            saga_id,
            event_type,
            message_id,
            why,
        } => tracing::debug!(
            target: "consumer::saga",
            saga, saga_id, event_type, message_id,
            reason = why.as_str(),
            "acked without a transition"
        ),
        Happened::KeyMismatchAccepted { message_id, error } => {
            tracing::warn!(target: "consumer::saga", message_id, "{error}");
        }
    }
}
