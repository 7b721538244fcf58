//! One observer of what happens to deliveries.
//!
//! Each thing that happens is emitted once, where it happens, as a
//! [`Happened`]; its listeners record it, always in this order:
//!
//! 1. the OpenTelemetry instruments ([`instruments`]);
//! 2. the [`Stats`] counters ([`counters`]);
//! 3. the log line ([`logs`]).
//!
//! The instruments come before the counters so that whoever waits on the
//! stats (a test, a health probe) then reads instruments that are up to
//! date. What a listener does with an event is in its own file: a metric
//! name, a counter or a log field changes there, and nowhere in the
//! runtime. Spans are not listeners: they are the context code runs in, and
//! the runtime opens them around the work itself.

mod counters;
mod instruments;
mod logs;
#[cfg(feature = "testing")]
pub(crate) mod tap;

use std::sync::Arc;
use std::time::Duration;

use super::circuit::Transition;
use crate::dead_letter::DeadLetterKind;
use crate::envelope::Envelope;
use crate::metrics::consumer::{ConsumerMetrics, ErrorType};
use crate::stats::Stats;

/// Something that happened to the consumer, to a delivery, or to one of
/// its settle steps.
pub(crate) enum Happened<'a> {
    /// The consumer takes deliveries.
    Running,
    /// The consumer stopped taking deliveries and drains.
    Draining,
    /// Running attempts outlived the shutdown timeout and were abandoned
    /// unsettled.
    ShutdownTimedOut { in_flight: u64 },
    /// The source failed with what can heal; it is asked again after
    /// `delay`.
    SourceFailed {
        error: &'a (dyn std::fmt::Display + Sync),
        delay: Duration,
    },
    /// The store could not record a failed attempt (the count still
    /// travels with the message).
    FailureNotRecorded {
        error: &'a (dyn std::fmt::Display + Sync),
    },
    /// The store could not clear a processed message's failure records
    /// (the purge will).
    FailuresNotCleared {
        error: &'a (dyn std::fmt::Display + Sync),
    },
    /// A handler's circuit opened or closed.
    Circuit {
        handler: &'static str,
        transition: Transition,
        /// Different messages in a row that failed (for an opening).
        opens_after: u32,
    },
    /// An operator paused the handler (or every handler): its deliveries
    /// wait, spending no attempt, until it is resumed.
    Paused {
        handler: &'static str,
        by: &'a str,
        reason: &'a str,
    },
    /// The handler is not paused: resumed (`was_paused`), or found running
    /// at the consumer's first reading of the pauses.
    Resumed {
        handler: &'static str,
        was_paused: bool,
    },
    /// The store's pauses could not be read: the last ones read stay.
    PausesUnread {
        error: &'a (dyn std::fmt::Display + Sync),
    },
    /// The store's pauses can be read again.
    PausesRead,
    /// Taken from the source and handed to its lane.
    Received(&'a Envelope),
    /// Left the runtime: settled `took` after it was received, or released
    /// (`None`).
    Left {
        envelope: &'a Envelope,
        took: Option<Duration>,
    },
    /// No handler takes its event type, and the router says to ack it.
    Ignored(&'a Envelope),
    /// One handler attempt ended, failed with `error` or not.
    Attempted {
        envelope: &'a Envelope,
        handler: &'static str,
        took: Duration,
        error: Option<ErrorType>,
    },
    /// The handler's transaction committed.
    Processed,
    /// Its key was committed before: skipped.
    Duplicate {
        envelope: &'a Envelope,
        handler: &'static str,
    },
    /// A transient failure will be retried after `delay`, as attempt
    /// `attempt + 1`.
    Retrying {
        envelope: &'a Envelope,
        handler: &'static str,
        attempt: u32,
        delay: Duration,
        error: &'a (dyn std::fmt::Display + Sync),
    },
    /// The retry is under way: `mode` is `redeliver` (the broker took the
    /// copy) or `in_place`.
    Retried {
        envelope: &'a Envelope,
        handler: &'static str,
        mode: &'static str,
    },
    /// The broker did not take the retry copy: retried in place.
    RetryCopyRefused {
        envelope: &'a Envelope,
        handler: &'a str,
        attempt: u32,
        error: &'a str,
    },
    /// The delivery is about to be dead-lettered.
    DeadLettering {
        envelope: &'a Envelope,
        handler: &'a str,
        kind: DeadLetterKind,
        attempts: u32,
        error: &'a str,
    },
    /// Its handler holds keys and its key is held: parked in the store
    /// behind the key's dead-lettered head, and acked.
    Parked {
        envelope: &'a Envelope,
        handler: &'a str,
        key: &'a str,
    },
    /// Its handler holds keys: its key is held (again) with it, just
    /// dead-lettered, at the head.
    KeyHeld {
        envelope: &'a Envelope,
        handler: &'a str,
        key: &'a str,
    },
    /// A released key's parked messages all ran: the hold ended, and the
    /// key's messages run as they come again.
    KeyDrained { handler: &'a str, key: &'a str },
    /// The store's count of a handler's held keys, read again.
    HeldCounted {
        handler: &'a str,
        count: crate::store::held::HeldCount,
    },
    /// The store says it was dead-lettered before: the redelivery is acked.
    AlreadyDeadLettered { message_id: &'a str },
    /// Its letter is on the dead-letter destination or in the store's
    /// table, for the first time.
    DeadLettered {
        envelope: &'a Envelope,
        handler: &'a str,
        kind: DeadLetterKind,
    },
    /// The letter is confirmed but the store could not mark it.
    MarkFailed { error: &'a str },
    /// The broker refused the letter: it is in the store's table (`first`:
    /// written now, not found there from before).
    LetterStored {
        envelope: &'a Envelope,
        handler: &'a str,
        message_id: &'a str,
        refusal: &'a str,
        first: bool,
    },
    /// The destination refused the letter for its size: kept whole in the
    /// store's table (`first` as above), announced without its payload.
    LetterTooLarge {
        envelope: &'a Envelope,
        message_id: &'a str,
        size: usize,
        error: &'a str,
        first: bool,
    },
    /// The letter without its payload was refused too.
    LetterWithoutPayloadRefused { message_id: &'a str, error: &'a str },
    /// Nothing took the letter: the delivery is held, its key's later
    /// messages behind it, and the letter is tried again after `again_in`.
    SettleFailed {
        envelope: &'a Envelope,
        handler: &'a str,
        message_id: &'a str,
        kind: DeadLetterKind,
        error: &'a str,
        again_in: Duration,
    },
    /// Given back to the broker unsettled.
    Released(&'a Envelope),
    /// The release itself failed (the broker redelivers anyway).
    ReleaseFailed {
        error: &'a (dyn std::fmt::Display + Sync),
    },
    /// A settle operation (`ack`, `release`, `dead_letter`, `retry`)
    /// ended, failed with `error` or not.
    SettleOperation {
        envelope: &'a Envelope,
        op: &'static str,
        took: Duration,
        error: Option<ErrorType>,
    },
    /// The ack failed: the broker redelivers and dedup skips it.
    AckFailed {
        error: &'a (dyn std::fmt::Display + Sync),
    },
    /// A settle step failed; `then` says what follows.
    SettleStepFailed {
        step: &'a str,
        error: &'a str,
        then: StepThen,
    },
}

/// What follows a failed settle step.
#[derive(Clone, Copy)]
pub(crate) enum StepThen {
    /// Refused for good: its fallback.
    RefusedForGood,
    /// Still failing at the settle timeout after `failures` tries: its
    /// fallback.
    OutOfTime { failures: u32 },
    /// Tried again after `delay`.
    TryAgain { delay: Duration },
}

/// The one handle the runtime emits through; cheap to clone.
#[derive(Clone)]
pub(crate) struct Observer {
    instruments: Arc<ConsumerMetrics>,
    counters: Arc<Stats>,
    #[cfg(feature = "testing")]
    tap: Option<Arc<dyn tap::Tap>>,
}

impl Observer {
    pub(crate) fn new(instruments: Arc<ConsumerMetrics>, counters: Arc<Stats>) -> Self {
        Self {
            instruments,
            counters,
            #[cfg(feature = "testing")]
            tap: None,
        }
    }

    /// Tells `tap` everything this observer emits, after the listeners.
    #[cfg(feature = "testing")]
    pub(crate) fn with_tap(mut self, tap: Option<Arc<dyn tap::Tap>>) -> Self {
        self.tap = tap;
        self
    }

    /// Records `what` with every listener, in the module's order.
    pub(crate) fn emit(&self, what: Happened<'_>) {
        instruments::on(&self.instruments, &what);
        counters::on(&self.counters, &what);
        logs::on(&what);
        #[cfg(feature = "testing")]
        if let Some(tap) = &self.tap {
            tap.on(&what);
        }
    }

    /// The counters as they are now.
    pub(crate) fn stats(&self) -> &Stats {
        &self.counters
    }
}
