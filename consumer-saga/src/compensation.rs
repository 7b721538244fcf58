//! Compensation: the undo steps a saga records as it goes ([`Undo`]),
//! sent in reverse order, one at a time, when it compensates. An undo that
//! fails for good is marked failed and the steps before it are still sent:
//! a failed undo is a state at the end (`compensation_failed`), never an
//! error that stops the chain.

use serde::Serialize;

use super::ids;
use super::record::{Meta, UndoStatus, UndoStep};
use super::status::SagaStatus;
use consumer_core::error::Error;
use consumer_core::outbox::NewEvent;

/// What undoes one step: a command recorded with
/// [`Step::record_undo`](super::Step::record_undo) and sent if the saga
/// compensates, with an id derived from the saga, the step and the round,
/// so the participant's dedup absorbs a repeat.
///
/// By default the compensation waits for the undo's outcome, which the
/// saga's transitions report with [`Step::undone`](super::Step::undone) or
/// [`Step::undo_failed`](super::Step::undo_failed) when the participant's
/// reply arrives, before it sends the undo of the step before.
/// [`Undo::without_reply`] counts it done once sent.
#[derive(Debug)]
pub struct Undo {
    name: String,
    destination: String,
    event_type: String,
    payload: Result<serde_json::Value, serde_json::Error>,
    awaits_reply: bool,
}

impl Undo {
    /// The undo of step `name`: a command of `event_type` to
    /// `destination` with `payload`. A payload that does not serialise
    /// fails the transition that records it (terminal: a bug).
    pub fn new<T: Serialize + ?Sized>(
        name: impl Into<String>,
        destination: impl Into<String>,
        event_type: impl Into<String>,
        payload: &T,
    ) -> Self {
        Self {
            name: name.into(),
            destination: destination.into(),
            event_type: event_type.into(),
            payload: serde_json::to_value(payload),
            awaits_reply: true,
        }
    }

    /// Counts the step done once its command is sent (the outbox delivers
    /// it and the participant's dedup runs it once; a failure there is the
    /// participant's to report): the compensation goes on at once.
    #[must_use]
    pub fn without_reply(mut self) -> Self {
        self.awaits_reply = false;
        self
    }

    /// The log entry, or why the payload cannot be kept.
    pub(super) fn into_step(self, version: i64) -> Result<UndoStep, String> {
        let payload = self.payload.map_err(|e| {
            format!(
                "the payload of undo step `{}` ({}) cannot be serialised: {e}",
                self.name, self.event_type
            )
        })?;
        Ok(UndoStep {
            name: self.name,
            destination: self.destination,
            event_type: self.event_type,
            payload,
            awaits_reply: self.awaits_reply,
            status: UndoStatus::Recorded,
            round: 0,
            error: None,
            recorded_at_version: version,
        })
    }
}

/// Moves a compensating saga on: while no undo is awaiting its outcome,
/// sends the last recorded one (pushed onto `sends`); once none is left,
/// finishes the saga `compensated`, or `compensation_failed` if any undo
/// failed. Does nothing to a saga that is not compensating.
pub(super) fn advance(
    saga_type: &str,
    saga_id: &str,
    meta: &mut Meta,
    sends: &mut Vec<NewEvent>,
) -> Result<(), Error> {
    if meta.status != SagaStatus::Compensating {
        return Ok(());
    }
    if meta
        .compensation
        .iter()
        .any(|s| s.status == UndoStatus::Sent && s.awaits_reply)
    {
        return Ok(());
    }
    while let Some(index) = meta
        .compensation
        .iter()
        .rposition(|s| s.status == UndoStatus::Recorded)
    {
        let step = &mut meta.compensation[index];
        step.round += 1;
        let event = NewEvent::new(saga_type, saga_id, &step.event_type, &step.payload)?
            .with_destination(&step.destination)
            .with_id(ids::undo(saga_type, saga_id, index, step.round));
        sends.push(event);
        if step.awaits_reply {
            step.status = UndoStatus::Sent;
            return Ok(());
        }
        step.status = UndoStatus::Done;
    }
    meta.status = if meta
        .compensation
        .iter()
        .any(|s| s.status == UndoStatus::Failed)
    {
        SagaStatus::CompensationFailed
    } else {
        SagaStatus::Compensated
    };
    Ok(())
}

/// The undo awaiting its outcome, if any.
pub(super) fn in_flight(meta: &mut Meta) -> Option<&mut UndoStep> {
    meta.compensation
        .iter_mut()
        .rev()
        .find(|s| s.status == UndoStatus::Sent)
}

/// Makes the failed undo steps (and the one awaiting its outcome, which
/// an operator judged lost) eligible to be sent again, in a new round.
pub(super) fn rearm(meta: &mut Meta) -> usize {
    let mut n = 0;
    for s in &mut meta.compensation {
        if matches!(s.status, UndoStatus::Failed | UndoStatus::Sent) {
            s.status = UndoStatus::Recorded;
            s.error = None;
            n += 1;
        }
    }
    n
}

/// A sentence naming each failed undo step and why.
pub(super) fn failures(meta: &Meta) -> Vec<String> {
    meta.compensation
        .iter()
        .filter(|s| s.status == UndoStatus::Failed)
        .map(|s| {
            format!(
                "undo step `{}` ({} to {}) failed: {}",
                s.name,
                s.event_type,
                s.destination,
                s.error.as_deref().unwrap_or("no reason given")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta_with(steps: &[(&str, bool)]) -> Meta {
        let mut meta = Meta::new();
        for (name, reply) in steps {
            let undo = Undo::new(
                *name,
                "payments",
                format!("Undo{name}"),
                &serde_json::json!({}),
            );
            let undo = if *reply { undo } else { undo.without_reply() };
            meta.compensation
                .push(undo.into_step(1).unwrap_or_else(|e| panic!("{e}")));
        }
        meta.status = SagaStatus::Compensating;
        meta
    }

    fn sent(sends: &[NewEvent]) -> Vec<&str> {
        sends.iter().map(NewEvent::event_type).collect()
    }

    #[test]
    fn undo_steps_go_out_last_first_one_reply_at_a_time() {
        let mut meta = meta_with(&[("a", true), ("b", false), ("c", true)]);
        let mut sends = Vec::new();
        advance("s", "1", &mut meta, &mut sends).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(sent(&sends), ["Undoc"], "waits for c's reply");
        advance("s", "1", &mut meta, &mut sends).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(sent(&sends), ["Undoc"], "still waiting");
        if let Some(s) = in_flight(&mut meta) {
            s.status = UndoStatus::Done;
        }
        advance("s", "1", &mut meta, &mut sends).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            sent(&sends),
            ["Undoc", "Undob", "Undoa"],
            "b needs no reply"
        );
        assert_eq!(meta.status, SagaStatus::Compensating);
        if let Some(s) = in_flight(&mut meta) {
            s.status = UndoStatus::Done;
        }
        advance("s", "1", &mut meta, &mut sends).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(meta.status, SagaStatus::Compensated);
        let ids: std::collections::HashSet<_> = sends.iter().filter_map(NewEvent::id).collect();
        assert_eq!(ids.len(), 3, "each undo has its own id");
    }

    #[test]
    fn a_failed_undo_does_not_stop_the_chain_and_ends_in_compensation_failed() {
        let mut meta = meta_with(&[("a", true), ("b", true)]);
        let mut sends = Vec::new();
        advance("s", "1", &mut meta, &mut sends).unwrap_or_else(|e| panic!("{e}"));
        if let Some(s) = in_flight(&mut meta) {
            s.status = UndoStatus::Failed;
            s.error = Some("card closed".into());
        }
        advance("s", "1", &mut meta, &mut sends).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(sent(&sends), ["Undob", "Undoa"], "a is still undone");
        if let Some(s) = in_flight(&mut meta) {
            s.status = UndoStatus::Done;
        }
        advance("s", "1", &mut meta, &mut sends).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(meta.status, SagaStatus::CompensationFailed);
        assert_eq!(failures(&meta).len(), 1);
        assert!(failures(&meta)[0].contains("card closed"));

        // Resumed: b goes again, in a new round, with a new id.
        meta.status = SagaStatus::Compensating;
        assert_eq!(rearm(&mut meta), 1);
        let mut again = Vec::new();
        advance("s", "1", &mut meta, &mut again).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(sent(&again), ["Undob"]);
        assert_ne!(again[0].id(), sends[0].id());
    }

    #[test]
    fn nothing_to_undo_is_compensated_at_once() {
        let mut meta = meta_with(&[]);
        let mut sends = Vec::new();
        advance("s", "1", &mut meta, &mut sends).unwrap_or_else(|e| panic!("{e}"));
        assert!(sends.is_empty());
        assert_eq!(meta.status, SagaStatus::Compensated);
    }
}
