//! The log lines as a listener: which event is logged, at which level,
//! with which fields (target `consumer::runtime`; the fields are the
//! documented ones).

use super::{Happened, StepThen};
use crate::runtime::circuit::Transition;

pub(super) fn on(what: &Happened<'_>) {
    match *what {
        Happened::ShutdownTimedOut { .. }
        | Happened::SourceFailed { .. }
        | Happened::FailureNotRecorded { .. }
        | Happened::FailuresNotCleared { .. } => on_consumer(what),
        Happened::Circuit { .. } => on_circuit(what),
        Happened::Paused { .. }
        | Happened::Resumed { .. }
        | Happened::PausesUnread { .. }
        | Happened::PausesRead => on_pause(what),
        Happened::Ignored(envelope) => {
            tracing::debug!(target: "consumer::runtime", message_id = %envelope.id, kind = ?envelope.kind, "no handler takes this event type; acked as told");
        }
        Happened::Duplicate { envelope, .. } => {
            tracing::debug!(target: "consumer::runtime", message_id = %envelope.id, "duplicate delivery skipped");
        }
        Happened::Retrying {
            envelope,
            handler,
            attempt,
            delay,
            error,
        } => tracing::warn!(
            target: "consumer::runtime",
            handler,
            message_id = %envelope.id,
            attempt,
            ?delay,
            error = %error,
            "transient failure; retrying"
        ),
        Happened::RetryCopyRefused {
            envelope,
            handler,
            attempt,
            error,
        } => tracing::warn!(
            target: "consumer::runtime",
            handler,
            message_id = %envelope.id,
            attempt,
            error = %error,
            "the broker did not take the retry copy; retrying in place"
        ),
        Happened::Parked { .. } | Happened::KeyHeld { .. } | Happened::KeyDrained { .. } => {
            on_held(what);
        }
        Happened::DeadLettering { .. }
        | Happened::AlreadyDeadLettered { .. }
        | Happened::MarkFailed { .. }
        | Happened::LetterStored { .. }
        | Happened::LetterTooLarge { .. }
        | Happened::LetterWithoutPayloadRefused { .. }
        | Happened::SettleFailed { .. } => on_letter(what),
        Happened::ReleaseFailed { .. }
        | Happened::AckFailed { .. }
        | Happened::SettleStepFailed { .. } => on_settle_step(what),
        Happened::Running
        | Happened::HeldCounted { .. }
        | Happened::Draining
        | Happened::Received(_)
        | Happened::Left { .. }
        | Happened::Attempted { .. }
        | Happened::Processed
        | Happened::Retried { .. }
        | Happened::DeadLettered { .. }
        | Happened::Released(_)
        | Happened::SettleOperation { .. } => {}
    }
}

/// The log lines of held keys: a delivery parked, a key held, a key drained.
fn on_held(what: &Happened<'_>) {
    match *what {
        Happened::Parked {
            envelope,
            handler,
            key,
        } => tracing::info!(
            target: "consumer::runtime",
            handler,
            message_id = %envelope.id,
            key,
            "its key is held: parked behind the dead-lettered head until an operator releases or skips it"
        ),
        Happened::KeyHeld {
            envelope,
            handler,
            key,
        } => tracing::error!(
            target: "consumer::runtime",
            handler,
            message_id = %envelope.id,
            key,
            "key held: its later messages are parked until an operator releases or skips this dead letter (consumer held-keys)"
        ),
        Happened::KeyDrained { handler, key } => tracing::info!(
            target: "consumer::runtime",
            handler,
            key,
            "key drained: its parked messages ran, and its messages run as they come again"
        ),
        _ => {}
    }
}

/// The log lines of settle operations that failed: a release, an ack, a
/// step and what follows it.
fn on_settle_step(what: &Happened<'_>) {
    match *what {
        Happened::ReleaseFailed { error } => {
            tracing::warn!(target: "consumer::runtime", error = %error, "release failed; the broker redelivers unsettled deliveries");
        }
        Happened::AckFailed { error } => {
            tracing::warn!(target: "consumer::runtime", error = %error, "ack failed; the broker will redeliver and dedup will skip it");
        }
        Happened::SettleStepFailed { step, error, then } => match then {
            StepThen::RefusedForGood => {
                tracing::warn!(target: "consumer::runtime", step, error = %error, "settle step refused for good; taking its fallback");
            }
            StepThen::OutOfTime { failures } => {
                tracing::warn!(target: "consumer::runtime", step, error = %error, failures, "settle step still failing at the settle timeout; taking its fallback");
            }
            StepThen::TryAgain { delay } => {
                tracing::warn!(target: "consumer::runtime", step, error = %error, ?delay, "settle step failed; trying again");
            }
        },
        _ => {}
    }
}

/// The log lines of a dead letter's way: where it went, or why it did not.
fn on_letter(what: &Happened<'_>) {
    match *what {
        Happened::DeadLettering {
            envelope,
            handler,
            kind,
            attempts,
            error,
        } => tracing::error!(
            target: "consumer::runtime",
            handler,
            message_id = %envelope.id,
            origin = %envelope.origin,
            kind = %kind,
            attempts,
            error = %error,
            "dead-lettering message"
        ),
        Happened::AlreadyDeadLettered { message_id } => {
            tracing::info!(target: "consumer::runtime", message_id = %message_id, "already dead-lettered; acking the redelivery");
        }
        Happened::MarkFailed { error } => {
            tracing::warn!(target: "consumer::runtime", error = %error, "could not mark the message dead-lettered after its letter was confirmed");
        }
        Happened::LetterStored {
            handler,
            message_id,
            refusal,
            ..
        } => tracing::error!(
            target: "consumer::runtime",
            handler,
            message_id = %message_id,
            refusal = %refusal,
            "the broker refused the dead letter; it is in the store's dead-letter table"
        ),
        Happened::LetterTooLarge {
            message_id,
            size,
            error,
            ..
        } => tracing::warn!(
            target: "consumer::runtime",
            message_id = %message_id,
            size,
            error = %error,
            "the dead-letter destination refused the letter for its size; it is in the store's dead-letter table"
        ),
        Happened::LetterWithoutPayloadRefused { message_id, error } => tracing::warn!(
            target: "consumer::runtime",
            message_id = %message_id,
            error = %error,
            "the letter without its payload was refused too; the whole letter is in the store's dead-letter table"
        ),
        Happened::SettleFailed {
            handler,
            message_id,
            kind,
            error,
            again_in,
            ..
        } => tracing::error!(
            target: "consumer::runtime",
            handler,
            message_id = %message_id,
            kind = %kind,
            error = %error,
            again_in = ?again_in,
            "could not dead-letter the message on the broker nor in the store; holding it (its key's later messages wait) and trying again"
        ),
        _ => {}
    }
}

/// The log lines of the consumer itself and of its store and source.
fn on_consumer(what: &Happened<'_>) {
    match *what {
        Happened::ShutdownTimedOut { in_flight } => tracing::error!(
            target: "consumer::runtime",
            in_flight,
            "shutdown timeout: abandoning running attempts unsettled; the broker will redeliver them"
        ),
        Happened::SourceFailed { error, delay } => {
            tracing::warn!(target: "consumer::runtime", error = %error, ?delay, "source failed; trying again");
        }
        Happened::FailureNotRecorded { error } => {
            tracing::warn!(target: "consumer::runtime", error = %error, "could not record the failed attempt");
        }
        Happened::FailuresNotCleared { error } => {
            tracing::debug!(target: "consumer::runtime", error = %error, "could not clear failure records; purge will");
        }
        _ => {}
    }
}

/// An operator paused or resumed a handler; the pauses could not be read.
fn on_pause(what: &Happened<'_>) {
    match *what {
        Happened::Paused {
            handler,
            by,
            reason,
        } => tracing::warn!(
            target: "consumer::runtime",
            handler,
            by,
            reason,
            "handler paused by an operator: its deliveries wait, spending no attempt, until it is resumed"
        ),
        Happened::Resumed {
            handler,
            was_paused: true,
        } => {
            tracing::info!(target: "consumer::runtime", handler, "handler resumed: its deliveries run again")
        }
        Happened::PausesUnread { error } => tracing::warn!(
            target: "consumer::runtime",
            error = %error,
            "cannot read the paused handlers from the store; keeping the ones read last"
        ),
        Happened::PausesRead => {
            tracing::info!(target: "consumer::runtime", "the paused handlers can be read from the store again");
        }
        _ => {}
    }
}

/// A handler's circuit opened, failed a probe, or closed.
fn on_circuit(what: &Happened<'_>) {
    let Happened::Circuit {
        handler,
        transition,
        opens_after,
    } = *what
    else {
        return;
    };
    match transition {
        Transition::Opened {
            open_for,
            reopened: false,
        } => tracing::warn!(
            target: "consumer::runtime",
            handler,
            opens_after,
            ?open_for,
            "circuit opened: different messages in a row failed transiently; taking no deliveries and spending no attempts until a probe succeeds"
        ),
        Transition::Opened {
            open_for,
            reopened: true,
        } => tracing::warn!(
            target: "consumer::runtime",
            handler,
            ?open_for,
            "circuit probe failed; open again"
        ),
        Transition::Closed { was_open } => tracing::info!(
            target: "consumer::runtime",
            handler,
            ?was_open,
            "circuit closed: the probe worked; taking deliveries again"
        ),
    }
}
