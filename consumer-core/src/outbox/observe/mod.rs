//! What a relay records of its rounds and events: each thing that happens
//! is emitted once, as a [`Happened`], through
//! [`OutboxRelay::emit`](super::OutboxRelay), and its listeners record it
//! in this order: the OpenTelemetry instruments ([`instruments`]), the
//! [`RelayStats`] counters ([`counters`]), the log line ([`logs`]). The
//! same shape as the consumer runtime's observer.

pub(super) mod counters;
pub(super) mod instruments;
mod logs;

use std::time::Duration;

pub use counters::{RelayStats, RelayStatsSnapshot};
pub(super) use instruments::{RelayMetrics, Waited};

use super::{Backlog, Row};

/// Something that happened to a relay, a round or an event.
pub(super) enum Happened<'a> {
    /// The table was counted for the gauges.
    BacklogRead(Backlog),
    /// The table could not be counted.
    BacklogNotRead {
        error: &'a (dyn std::fmt::Display + Sync),
    },
    /// A round ended, having claimed `claimed` rows.
    RoundEnded { claimed: usize },
    /// A round failed; `then` says what follows.
    RoundFailed {
        error: &'a (dyn std::fmt::Display + Sync),
        then: RoundThen,
    },
    /// The relay loop claims again after its backoff, a round having
    /// failed.
    ClaimingAgain {
        error: &'a (dyn std::fmt::Display + Sync),
    },
    /// An event was sent and confirmed (`error` `None`) or refused, after
    /// `took` waiting for the broker; `waited`: how long it had waited to
    /// go out.
    Sent {
        destination: &'a str,
        took: Duration,
        waited: Waited,
        error: Option<&'static str>,
    },
    /// An event did not go out and is tried again after `retry_after`.
    Retrying {
        row: &'a Row,
        attempt: u32,
        retry_after: Duration,
        error: &'a str,
    },
    /// An event failed for good: marked failed, its aggregate blocked.
    GaveUp {
        row: &'a Row,
        attempt: u32,
        error: &'a str,
    },
}

/// What follows a failed round.
#[derive(Clone, Copy)]
pub(super) enum RoundThen {
    /// The round's events were published but not marked: they go again.
    PublishAgain,
    /// Whoever ran the round is told (the caller of `run_once`, or the
    /// relay loop, which claims again).
    Told,
}

/// Records `what` with every listener, in the module's order.
pub(super) fn emit(instruments: &RelayMetrics, counters: &RelayStats, what: &Happened<'_>) {
    instruments::on(instruments, what);
    counters::on(counters, what);
    logs::on(what);
}
