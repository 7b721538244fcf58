//! What a relay knows of the scheduled events: when it last looked for
//! the ones that fell due, and when the next one falls due.

use std::time::Duration;

use std::time::Instant;

/// How often, at most, a busy relay looks for scheduled events that fell
/// due (one statement before a claim) when the last look found none due
/// before then: a wake-up goes straight to its claim, and a scheduled
/// event is released at most this late (the schedule promises a second).
pub(super) const RELEASE_LOOK_EVERY: Duration = Duration::from_millis(25);

/// What a relay's last look for due scheduled events found.
#[derive(Default)]
pub(super) struct ScheduleSeen {
    /// When the last look succeeded; `None`: look before the next claim.
    pub(super) looked: Option<Instant>,
    /// When the earliest scheduled event falls due, as of that look.
    pub(super) next_due: Option<Instant>,
}

impl ScheduleSeen {
    /// Whether to look again before the next claim.
    pub(super) fn look_now(&self, now: Instant) -> bool {
        self.looked
            .is_none_or(|at| now.saturating_duration_since(at) >= RELEASE_LOOK_EVERY)
            || self.next_due.is_some_and(|due| due <= now)
    }
}
