//! The relay's log lines as a listener (target `consumer::outbox`).

use super::{Happened, RoundThen};

pub(super) fn on(what: &Happened<'_>) {
    match *what {
        Happened::BacklogNotRead { error } => {
            tracing::debug!(target: "consumer::outbox", error = %error, "could not count the outbox backlog");
        }
        Happened::RoundFailed {
            error,
            then: RoundThen::PublishAgain,
        } => {
            tracing::warn!(target: "consumer::outbox", error = %error, "relay round failed; its events will be published again");
        }
        Happened::ClaimingAgain { error } => {
            tracing::warn!(target: "consumer::outbox", error = %error, "relay round failed; trying again");
        }
        Happened::Retrying {
            row,
            attempt,
            retry_after,
            error,
        } => tracing::warn!(
            target: "consumer::outbox",
            event_id = %row.id,
            attempts = attempt,
            ?retry_after,
            error = %error,
            "broker refused an outbox event; retrying later"
        ),
        Happened::GaveUp {
            row,
            attempt,
            error,
        } => tracing::error!(
            target: "consumer::outbox",
            event_id = %row.id,
            aggregate_type = %row.aggregate_type,
            aggregate_id = %row.aggregate_id,
            attempts = attempt,
            error = %error,
            "outbox event failed for good; its aggregate is blocked until Outbox::retry_failed"
        ),
        Happened::BacklogRead(_)
        | Happened::RoundEnded { .. }
        | Happened::RoundFailed {
            then: RoundThen::Told,
            ..
        }
        | Happened::Sent { .. } => {}
    }
}
