//! The [`Stats`] counters as a listener: which event counts what.

use super::Happened;
use crate::dead_letter::DeadLetterKind;
use crate::runtime::circuit::Transition;
use crate::stats::{Counter, Stats};

pub(super) fn on(s: &Stats, what: &Happened<'_>) {
    match *what {
        Happened::Running => s.set_running(),
        Happened::Draining => s.set_draining(),
        Happened::Received(_) => {
            s.incr(Counter::Received);
            s.enter();
        }
        Happened::Left { took, .. } => s.leave(took),
        Happened::Ignored(_) => s.incr(Counter::UnknownTypesIgnored),
        Happened::Circuit {
            handler,
            transition,
            ..
        } => match transition {
            Transition::Opened { reopened, .. } => {
                s.incr(Counter::CircuitsOpened);
                if !reopened {
                    s.circuit_open(handler, true);
                }
            }
            Transition::Closed { .. } => s.circuit_open(handler, false),
        },
        Happened::Paused { handler, .. } => s.set_paused(handler, true),
        Happened::Resumed { handler, .. } => s.set_paused(handler, false),
        Happened::Processed => s.incr(Counter::Processed),
        Happened::Duplicate { .. } => s.incr(Counter::Duplicates),
        Happened::Retrying { .. } => s.incr(Counter::Retries),
        Happened::RetryCopyRefused { .. } => s.incr(Counter::RetryFallbacks),
        Happened::DeadLettered { kind, .. } => s.incr(match kind {
            DeadLetterKind::Poison => Counter::DeadPoison,
            DeadLetterKind::Terminal => Counter::DeadTerminal,
            DeadLetterKind::Exhausted => Counter::DeadExhausted,
        }),
        Happened::LetterStored { first: true, .. } => s.incr(Counter::StoredDeadLetters),
        Happened::LetterTooLarge { first: true, .. } => {
            s.incr(Counter::StoredDeadLetters);
            s.incr(Counter::PayloadOmitted);
        }
        Happened::SettleFailed { .. } => s.incr(Counter::SettleFailures),
        Happened::Parked { .. } => s.incr(Counter::Parked),
        Happened::KeyHeld { .. } => s.incr(Counter::KeysHeld),
        Happened::KeyDrained { .. } => s.incr(Counter::KeysDrained),
        Happened::Released(_) => s.incr(Counter::Released),
        Happened::AckFailed { .. } | Happened::SettleStepFailed { .. } => {
            s.incr(Counter::SettleErrors);
        }
        Happened::ShutdownTimedOut { .. }
        | Happened::PausesUnread { .. }
        | Happened::PausesRead
        | Happened::HeldCounted { .. }
        | Happened::SourceFailed { .. }
        | Happened::FailureNotRecorded { .. }
        | Happened::FailuresNotCleared { .. }
        | Happened::Attempted { .. }
        | Happened::Retried { .. }
        | Happened::DeadLettering { .. }
        | Happened::AlreadyDeadLettered { .. }
        | Happened::MarkFailed { .. }
        | Happened::LetterStored { first: false, .. }
        | Happened::LetterTooLarge { first: false, .. }
        | Happened::LetterWithoutPayloadRefused { .. }
        | Happened::ReleaseFailed { .. }
        | Happened::SettleOperation { .. } => {}
    }
}
