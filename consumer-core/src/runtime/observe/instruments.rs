//! The OpenTelemetry instruments as a listener: which event records what.

use super::Happened;
use crate::metrics::attr::fallback;
use crate::metrics::consumer::ConsumerMetrics;
use crate::runtime::circuit::Transition;

pub(super) fn on(m: &ConsumerMetrics, what: &Happened<'_>) {
    match *what {
        Happened::Received(envelope) => m.received(envelope),
        Happened::Left { envelope, took } => m.left(envelope, took),
        Happened::Ignored(envelope) => m.unknown_type(envelope),
        Happened::Attempted {
            envelope,
            handler,
            took,
            error,
        } => m.processed(envelope, handler, took, error),
        Happened::Duplicate { envelope, handler } => m.duplicate(envelope, handler),
        Happened::RetryCopyRefused { .. }
        | Happened::LetterStored { .. }
        | Happened::LetterTooLarge { .. }
        | Happened::SettleFailed { .. } => on_fallback(m, what),
        Happened::Retried {
            envelope,
            handler,
            mode,
        } => m.retry(envelope, handler, mode),
        Happened::DeadLettered {
            envelope,
            handler,
            kind,
        } => m.dead_letter(envelope, handler, kind.as_str()),
        Happened::Parked { handler, .. } => m.parked(handler),
        Happened::KeyHeld { handler, .. } => m.key_held(handler),
        Happened::HeldCounted { handler, count } => m.held_counted(handler, count),
        Happened::Released(envelope) => m.released(envelope),
        Happened::SettleOperation {
            envelope,
            op,
            took,
            error,
        } => m.settle_operation(envelope, op, took, error),
        Happened::Circuit {
            handler,
            transition,
            ..
        } => match transition {
            Transition::Opened { reopened, .. } => m.circuit(handler, "open", i64::from(!reopened)),
            Transition::Closed { .. } => m.circuit(handler, "closed", -1),
        },
        Happened::Paused { handler, .. } => m.paused(handler, true),
        Happened::Resumed { handler, .. } => m.paused(handler, false),
        Happened::Running
        | Happened::PausesUnread { .. }
        | Happened::PausesRead
        | Happened::KeyDrained { .. }
        | Happened::Draining
        | Happened::ShutdownTimedOut { .. }
        | Happened::SourceFailed { .. }
        | Happened::FailureNotRecorded { .. }
        | Happened::FailuresNotCleared { .. }
        | Happened::Processed
        | Happened::Retrying { .. }
        | Happened::DeadLettering { .. }
        | Happened::AlreadyDeadLettered { .. }
        | Happened::MarkFailed { .. }
        | Happened::LetterWithoutPayloadRefused { .. }
        | Happened::ReleaseFailed { .. }
        | Happened::AckFailed { .. }
        | Happened::SettleStepFailed { .. } => {}
    }
}

/// The fallbacks a settle took, counted once each (a letter stored again is
/// not a new fallback).
fn on_fallback(m: &ConsumerMetrics, what: &Happened<'_>) {
    match *what {
        Happened::RetryCopyRefused { envelope, .. } => {
            m.fallback(envelope, fallback::RETRY_IN_PLACE);
        }
        Happened::LetterStored {
            envelope,
            first: true,
            ..
        } => m.fallback(envelope, fallback::DEAD_LETTER_TO_STORE),
        Happened::LetterTooLarge {
            envelope,
            first: true,
            ..
        } => {
            m.fallback(envelope, fallback::DEAD_LETTER_TO_STORE);
            m.fallback(envelope, fallback::DEAD_LETTER_WITHOUT_PAYLOAD);
        }
        Happened::SettleFailed { envelope, .. } => m.fallback(envelope, fallback::HOLD),
        _ => {}
    }
}
