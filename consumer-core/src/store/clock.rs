//! The clock the stores write and compare their times by: the wall clock,
//! and with the `testing` feature the wall clock as Tokio's clock moves.
//!
//! With `testing`, "now" is the wall time when it was first asked plus
//! how far [`tokio::time::Instant`] has moved since: the same as the wall
//! clock while Tokio's time runs, and frozen or advanced with it when a
//! test pauses it (`tokio::time::pause`, `advance`). That is what lets the
//! test kit fire a scheduled event or a saga timeout due in 30 minutes by
//! advancing a virtual clock: the outbox's due times on SQLite, the dedup
//! store's retry records and a saga's timeouts all read this clock.
//! PostgreSQL compares due times by its own `now()`, which no test moves.

use time::OffsetDateTime;

/// The current time, by the stores' clock.
#[cfg(not(feature = "testing"))]
pub(crate) fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

/// The current time, by the stores' clock: Tokio's clock anchored to the
/// wall clock (see the module).
#[cfg(feature = "testing")]
pub(crate) fn now() -> OffsetDateTime {
    use std::sync::OnceLock;
    static ANCHOR: OnceLock<(OffsetDateTime, std::time::Instant)> = OnceLock::new();
    let (wall, at) = *ANCHOR.get_or_init(|| (OffsetDateTime::now_utc(), std::time::Instant::now()));
    let moved = tokio::time::Instant::now()
        .into_std()
        .saturating_duration_since(at);
    wall.checked_add(time::Duration::try_from(moved).unwrap_or(time::Duration::MAX))
        .unwrap_or(wall)
}
