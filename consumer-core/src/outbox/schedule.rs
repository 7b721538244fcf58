//! Scheduled events: when one falls due ([`Due`]), the handle that cancels
//! it ([`ScheduleToken`]), and what is waiting ([`ScheduledEvent`]).
//!
//! A scheduled event waits in its own table (`outbox_events_scheduled`),
//! outside its aggregate's order, until it falls due. Then a relay (or
//! [`Outbox::release_due`](super::Outbox::release_due)) moves it into the
//! outbox table in one transaction that gives it the aggregate's next
//! version: from that moment on it is exactly an event enqueued then, and
//! everything [`Outbox::enqueue`](super::Outbox::enqueue) promises holds
//! for it. Until then [`Outbox::cancel`](super::Outbox::cancel) deletes it.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use time::OffsetDateTime;

/// When a scheduled event falls due: the relay publishes it then, and
/// never before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// At this instant. An instant in the past is due at once (the event
    /// still goes through the scheduled table, so it stays cancellable
    /// until a relay takes it).
    At(OffsetDateTime),
    /// This long after [`Outbox::schedule`](super::Outbox::schedule) runs,
    /// by the database's clock on PostgreSQL (so the application's clock
    /// does not matter), by this process's clock on SQLite.
    After(Duration),
}

impl Due {
    /// Due at `instant`.
    pub fn at(instant: OffsetDateTime) -> Self {
        Self::At(instant)
    }

    /// Due `delay` after scheduling.
    pub fn after(delay: Duration) -> Self {
        Self::After(delay)
    }

    /// The instant as Unix milliseconds, or the delay in milliseconds,
    /// saturating: a time the database cannot hold is its error, never a
    /// panic here.
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub(super) fn millis(self) -> DueMillis {
        let saturate =
            |ms: i128| i64::try_from(ms).unwrap_or(if ms < 0 { i64::MIN } else { i64::MAX });
        match self {
            Self::At(t) => DueMillis::At(saturate(t.unix_timestamp_nanos() / 1_000_000)),
            Self::After(d) => {
                DueMillis::After(saturate(i128::try_from(d.as_millis()).unwrap_or(i128::MAX)))
            }
        }
    }
}

impl From<Duration> for Due {
    fn from(delay: Duration) -> Self {
        Self::After(delay)
    }
}

impl From<OffsetDateTime> for Due {
    fn from(instant: OffsetDateTime) -> Self {
        Self::At(instant)
    }
}

/// [`Due`] in the milliseconds the databases store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(super) enum DueMillis {
    /// Unix milliseconds.
    At(i64),
    /// Milliseconds from now.
    After(i64),
}

/// The handle of a scheduled event, returned by
/// [`Outbox::schedule`](super::Outbox::schedule): what
/// [`Outbox::cancel`](super::Outbox::cancel) takes.
///
/// The token is the event's id, so it is also the published message's
/// CloudEvents `id` (`Envelope::id` on the consuming side): a handler that
/// keeps the token of the timeout it is waiting for (in a saga's state)
/// recognises a stale timeout by comparing the two. It serialises as the
/// UUID string, to be stored in such state; [`ScheduleToken::from`] a
/// `Uuid` turns a stored id back into a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScheduleToken(uuid::Uuid);

impl serde::Serialize for ScheduleToken {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for ScheduleToken {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl ScheduleToken {
    /// The event id: the published message's CloudEvents `id`.
    pub fn id(self) -> uuid::Uuid {
        self.0
    }
}

impl From<uuid::Uuid> for ScheduleToken {
    fn from(id: uuid::Uuid) -> Self {
        Self(id)
    }
}

impl From<ScheduleToken> for uuid::Uuid {
    fn from(token: ScheduleToken) -> Self {
        token.0
    }
}

impl fmt::Display for ScheduleToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl FromStr for ScheduleToken {
    type Err = uuid::Error;

    /// Parses the token's [`Display`](fmt::Display) form (a UUID).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        uuid::Uuid::parse_str(s).map(Self)
    }
}

/// A scheduled event that has not been released yet (not yet due, or due
/// and waiting for a relay's next round), as
/// [`Outbox::scheduled`](super::Outbox::scheduled) and
/// [`Outbox::scheduled_for`](super::Outbox::scheduled_for) list them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScheduledEvent {
    /// Its handle (and id).
    pub token: ScheduleToken,
    /// Its aggregate's type.
    pub aggregate_type: String,
    /// Its aggregate's id.
    pub aggregate_id: String,
    /// Its CloudEvents type.
    pub event_type: String,
    /// Where it will be published.
    pub destination: String,
    /// When the scheduling transaction wrote it.
    pub created_at: OffsetDateTime,
    /// When it falls due.
    pub due_at: OffsetDateTime,
}

impl ScheduledEvent {
    /// From the columns both databases return (times in Unix ms).
    pub(super) fn from_columns(
        id: &str,
        aggregate_type: String,
        aggregate_id: String,
        event_type: String,
        destination: String,
        created_ms: i64,
        due_ms: i64,
    ) -> Result<Self, crate::Error> {
        let token = id.parse::<ScheduleToken>().map_err(|e| {
            crate::Error::Database(sqlx::Error::Decode(
                format!("scheduled event id {id:?} is not a UUID: {e}").into(),
            ))
        })?;
        Ok(Self {
            token,
            aggregate_type,
            aggregate_id,
            event_type,
            destination,
            created_at: from_ms(created_ms),
            due_at: from_ms(due_ms),
        })
    }
}

/// Unix milliseconds as a time, clamped to what `OffsetDateTime` holds.
pub(super) fn from_ms(ms: i64) -> OffsetDateTime {
    crate::sql::time_from_ms(ms)
}

/// What one [`Outbox::release_due`](super::Outbox::release_due) did: the
/// events moved into the outbox table, and how long until the next
/// scheduled one falls due (`None`: nothing is scheduled; zero: some are
/// due that this release could not take yet).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Released {
    /// Events moved into the outbox table.
    pub moved: u64,
    /// Until the earliest event still scheduled falls due.
    pub next_due_in: Option<Duration>,
}

/// A due time in milliseconds from now (database clock) as the wait.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(super) fn due_in(ms: Option<i64>) -> Option<Duration> {
    ms.map(|ms| Duration::from_millis(ms.max(0).cast_unsigned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_through_text_and_serde() {
        let token = ScheduleToken::from(uuid::Uuid::now_v7());
        assert_eq!(token.to_string().parse::<ScheduleToken>(), Ok(token));
        let json = serde_json::to_string(&token).unwrap_or_default();
        assert_eq!(json, format!("\"{token}\""));
        assert_eq!(
            serde_json::from_str::<ScheduleToken>(&json).ok(),
            Some(token)
        );
        assert!("not a uuid".parse::<ScheduleToken>().is_err());
    }

    #[test]
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    fn due_times_saturate_instead_of_overflowing() {
        assert_eq!(
            Due::after(Duration::MAX).millis(),
            DueMillis::After(i64::MAX)
        );
        assert_eq!(
            Due::after(Duration::from_millis(1500)).millis(),
            DueMillis::After(1500)
        );
        let t = OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(2);
        assert_eq!(Due::at(t).millis(), DueMillis::At(2000));
        assert_eq!(from_ms(i64::MAX), time::PrimitiveDateTime::MAX.assume_utc());
        assert_eq!(from_ms(2000), t);
    }
}
