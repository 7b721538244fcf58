//! When a record of the retry topic is due: what its due header says, but
//! never later than the longest delay the source's handlers can give a retry
//! copy, counted from when the record was written.
//!
//! A due header far in the future (a hand-edited or foreign record, a
//! producer whose clock was years off) would otherwise pause its partition
//! until then. Counting from the record's timestamp rather than from now
//! keeps the bound where the copy's writer put it: a restart does not start
//! the wait again, and the writer's clock, which set both the timestamp and
//! the header, cancels out.

use std::time::Duration;

/// Clocks may disagree this much (a topic with `LogAppendTime` timestamps
/// the broker's clock, not the writer's) before a due time counts as later
/// than the bound.
const TOLERANCE: Duration = Duration::from_secs(1);

/// How long a retry record waits before it is delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wait {
    /// As its due header says.
    AsSaid(Duration),
    /// Its header says later than the longest delay allows: due at that
    /// delay from when it was written.
    Bounded {
        /// What the header said.
        said: Duration,
        /// What it waits instead.
        wait: Duration,
    },
}

impl Wait {
    /// The wait to honour.
    pub(super) fn duration(self) -> Duration {
        match self {
            Self::AsSaid(wait) | Self::Bounded { wait, .. } => wait,
        }
    }
}

/// The wait of a retry record whose header says it is due in `said`, written
/// at `written_ms` (Unix milliseconds), at `now_ms`, when no retry copy is
/// given more than `longest`. A record written "later than now" (a clock
/// ahead) counts as written now.
pub(super) fn wait(said: Duration, written_ms: i64, now_ms: i64, longest: Duration) -> Wait {
    let age = u64::try_from(now_ms.saturating_sub(written_ms))
        .map_or(Duration::ZERO, Duration::from_millis);
    let latest = longest.saturating_sub(age);
    if said <= latest.saturating_add(TOLERANCE) {
        Wait::AsSaid(said)
    } else {
        Wait::Bounded { said, wait: latest }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000_000;
    const MINUTE: Duration = Duration::from_secs(60);
    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn a_copy_due_within_the_longest_delay_waits_as_its_header_says() {
        assert_eq!(wait(MINUTE, NOW, NOW, HOUR), Wait::AsSaid(MINUTE));
        // Written 59 minutes ago, due in one: the whole hour, as written.
        assert_eq!(
            wait(MINUTE, NOW - 59 * 60_000, NOW, HOUR),
            Wait::AsSaid(MINUTE)
        );
        // Timestamps in milliseconds, due times finer: a hair over is fine.
        assert_eq!(
            wait(HOUR + Duration::from_millis(1), NOW, NOW, HOUR),
            Wait::AsSaid(HOUR + Duration::from_millis(1))
        );
    }

    /// Year 9999 (about 8 000 years from now) would have paused the
    /// partition until then.
    #[test]
    fn a_copy_due_in_year_9999_is_due_at_the_longest_delay_from_when_it_was_written() {
        let said = Duration::from_secs(8_000 * 365 * 24 * 3600);
        assert_eq!(
            wait(said, NOW, NOW, HOUR),
            Wait::Bounded { said, wait: HOUR }
        );
        let written_20_minutes_ago = NOW - 20 * 60_000;
        assert_eq!(
            wait(said, written_20_minutes_ago, NOW, HOUR).duration(),
            40 * MINUTE
        );
        // Written longer ago than the longest delay: due now.
        assert_eq!(
            wait(said, NOW - 2 * 3_600_000, NOW, HOUR).duration(),
            Duration::ZERO
        );
    }

    #[test]
    fn a_timestamp_ahead_of_the_clock_counts_as_now() {
        let said = 2 * HOUR;
        assert_eq!(
            wait(said, NOW + 3_600_000, NOW, HOUR),
            Wait::Bounded { said, wait: HOUR }
        );
    }

    /// No redelivering handler announced a longest delay: nothing this
    /// consumer writes goes to the retry topic, so what is there is due now.
    #[test]
    fn without_a_longest_delay_a_copy_due_later_is_due_now() {
        assert_eq!(
            wait(MINUTE, NOW, NOW, Duration::ZERO).duration(),
            Duration::ZERO
        );
        assert_eq!(
            wait(Duration::from_millis(500), NOW, NOW, Duration::ZERO),
            Wait::AsSaid(Duration::from_millis(500))
        );
    }
}
