//! What a saga's row holds besides its state: its pending timeouts, its
//! compensation log and its step retries, each a JSON column (its history
//! has rows of its own: `history.rs`);
//! and [`SagaRecord`], the whole row as operators and tests read it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::status::SagaStatus;
use consumer_core::outbox::ScheduleToken;

/// Unix milliseconds as a time (clamped to what `OffsetDateTime` holds).
pub(super) fn time_of(ms: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

/// A timeout the saga waits for: a scheduled outbox event whose token
/// (its CloudEvents `id`) is kept on the saga's row. A timeout that arrives
/// with a token not in this list (cancelled, or replaced) is stale: acked,
/// counted, never applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingTimeout {
    token: ScheduleToken,
    event_type: String,
    due_ms: i64,
}

impl PendingTimeout {
    pub(super) fn new(token: ScheduleToken, event_type: String, due_ms: i64) -> Self {
        Self {
            token,
            event_type,
            due_ms,
        }
    }

    /// Its token: what [`Step::cancel_timeout`](super::Step::cancel_timeout)
    /// takes, and the id of the message it arrives as.
    pub fn token(&self) -> ScheduleToken {
        self.token
    }

    /// The CloudEvents type it arrives as.
    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// When it falls due (by this process's clock when it was scheduled).
    pub fn due_at(&self) -> OffsetDateTime {
        time_of(self.due_ms)
    }
}

/// Where an undo step is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UndoStatus {
    /// Recorded as the saga went; not sent.
    Recorded,
    /// Sent; the saga waits for its outcome ([`Step::undone`](super::Step::undone)
    /// or [`Step::undo_failed`](super::Step::undo_failed)).
    Sent,
    /// Undone (or sent, for a step that awaits no reply).
    Done,
    /// Failed for good: the compensation went on with the steps before it,
    /// and ends in `compensation_failed`.
    Failed,
    /// Withdrawn before it was sent ([`Step::withdraw_undo`](super::Step::withdraw_undo)):
    /// never sent. It keeps its place in the log, so the ids of the steps
    /// after it do not move.
    Withdrawn,
}

impl UndoStatus {
    /// `recorded`, `sent`, `done`, `failed`, `withdrawn`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Recorded => "recorded",
            Self::Sent => "sent",
            Self::Done => "done",
            Self::Failed => "failed",
            Self::Withdrawn => "withdrawn",
        }
    }
}

impl std::fmt::Display for UndoStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One step of the compensation log: what undoes a step the saga took,
/// recorded as it went ([`Step::record_undo`](super::Step::record_undo)),
/// sent in reverse order when it compensates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UndoStep {
    pub(super) name: String,
    pub(super) destination: String,
    pub(super) event_type: String,
    pub(super) payload: serde_json::Value,
    pub(super) awaits_reply: bool,
    pub(super) status: UndoStatus,
    /// How many times it was sent: its command's id changes with it, so a
    /// resend after a failure is not taken for a duplicate.
    pub(super) round: u32,
    pub(super) error: Option<String>,
    /// The version of the transition that recorded it.
    pub(super) recorded_at_version: i64,
}

impl UndoStep {
    /// The step's name (`refund-payment`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where its undo command goes.
    pub fn destination(&self) -> &str {
        &self.destination
    }

    /// Its undo command's CloudEvents type.
    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// Its undo command's payload.
    pub fn payload(&self) -> &serde_json::Value {
        &self.payload
    }

    /// Whether the compensation waits for its outcome before the step
    /// before it.
    pub fn awaits_reply(&self) -> bool {
        self.awaits_reply
    }

    /// Where it is.
    pub fn status(&self) -> UndoStatus {
        self.status
    }

    /// How many times it was sent (0: not yet).
    pub fn round(&self) -> u32 {
        self.round
    }

    /// Why it failed, when it did.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }
}

/// One transition, as the saga's history keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    pub(super) version: i64,
    pub(super) event_type: String,
    pub(super) message_id: String,
    pub(super) status: SagaStatus,
    pub(super) at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) note: Option<String>,
}

impl HistoryEntry {
    /// The version the transition wrote.
    pub fn version(&self) -> i64 {
        self.version
    }

    /// The event that triggered it (`operator` for `consumer sagas resume`
    /// and `abandon`).
    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// That event's id.
    pub fn message_id(&self) -> &str {
        &self.message_id
    }

    /// The status it left the saga in.
    pub fn status(&self) -> SagaStatus {
        self.status
    }

    /// When it committed (by the consuming process's clock).
    pub fn at(&self) -> OffsetDateTime {
        time_of(self.at_ms)
    }

    /// What else happened: `timed out`, `compensating: <reason>`, ...
    pub fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }
}

/// A step sent again before compensating ([`Step::retry_step`](super::Step::retry_step)).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct StepRetry {
    pub(super) attempts: u32,
    /// The scheduled resend, cancelled if the saga finishes first.
    pub(super) scheduled: Option<ScheduleToken>,
}

/// What the framework keeps on the row besides the state.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Meta {
    pub(super) status: SagaStatus,
    pub(super) reason: Option<String>,
    pub(super) timeouts: Vec<PendingTimeout>,
    pub(super) compensation: Vec<UndoStep>,
    pub(super) retries: BTreeMap<String, StepRetry>,
}

impl Meta {
    /// A saga not yet started.
    pub(super) fn new() -> Self {
        Self {
            status: SagaStatus::Running,
            reason: None,
            timeouts: Vec::new(),
            compensation: Vec::new(),
            retries: BTreeMap::new(),
        }
    }
}

/// A saga's row as [`SagaStore`](super::SagaStore) reads it: for
/// `consumer sagas list|show`, tests and dashboards.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SagaRecord {
    /// The saga type ([`Saga::name`](super::Saga::name)).
    pub saga_type: String,
    /// Its id.
    pub saga_id: String,
    /// The version its last transition wrote (1 after the first).
    pub version: i64,
    /// Where it is.
    pub status: SagaStatus,
    /// Why it compensates, failed, or was abandoned.
    pub reason: Option<String>,
    /// Its state, as JSON.
    pub state: serde_json::Value,
    /// The timeouts it waits for.
    pub timeouts: Vec<PendingTimeout>,
    /// Its compensation log, in the order the steps were recorded.
    pub compensation: Vec<UndoStep>,
    /// How many times each named step was sent again.
    pub step_attempts: BTreeMap<String, u32>,
    /// Its transitions, oldest first (the last
    /// [`SagaBuilder::with_history_limit`](super::SagaBuilder::with_history_limit)).
    pub history: Vec<HistoryEntry>,
    /// When its first transition committed.
    pub started_at: OffsetDateTime,
    /// When its last one did.
    pub updated_at: OffsetDateTime,
    /// When it finished, for a tombstone.
    pub finished_at: Option<OffsetDateTime>,
}

/// The columns of one row, as both databases return them (JSON as text,
/// times as Unix milliseconds).
#[derive(Debug, Clone)]
#[doc(hidden)]
pub struct SagaRow {
    pub saga_type: String,
    pub saga_id: String,
    pub version: i64,
    pub status: String,
    pub reason: Option<String>,
    pub state: String,
    pub timeouts: String,
    pub compensation: String,
    pub retries: String,
    pub started_ms: i64,
    pub updated_ms: i64,
    pub finished_ms: Option<i64>,
}

/// A column that does not read as what the framework wrote.
#[derive(Debug, thiserror::Error)]
#[error("saga {saga_type} {saga_id}: column `{column}` cannot be read: {reason}")]
pub struct UnreadableRow {
    saga_type: String,
    saga_id: String,
    column: &'static str,
    reason: String,
}

impl SagaRow {
    fn unreadable(&self, column: &'static str, reason: impl ToString) -> UnreadableRow {
        UnreadableRow {
            saga_type: self.saga_type.clone(),
            saga_id: self.saga_id.clone(),
            column,
            reason: reason.to_string(),
        }
    }

    fn json<T: serde::de::DeserializeOwned>(
        &self,
        column: &'static str,
        text: &str,
    ) -> Result<T, UnreadableRow> {
        serde_json::from_str(text).map_err(|e| self.unreadable(column, e))
    }

    /// The framework's columns.
    pub(super) fn meta(&self) -> Result<Meta, UnreadableRow> {
        let status = SagaStatus::parse(&self.status).ok_or_else(|| {
            self.unreadable("status", format!("unknown status {:?}", self.status))
        })?;
        Ok(Meta {
            status,
            reason: self.reason.clone(),
            timeouts: self.json("timeouts", &self.timeouts)?,
            compensation: self.json("compensation", &self.compensation)?,
            retries: self.json("retries", &self.retries)?,
        })
    }

    /// The state, decoded as the saga's type.
    pub(super) fn state<T: serde::de::DeserializeOwned>(&self) -> Result<T, UnreadableRow> {
        self.json("state", &self.state)
    }

    /// The whole row, with `history` (read from its own table).
    pub(super) fn record(&self, history: Vec<HistoryEntry>) -> Result<SagaRecord, UnreadableRow> {
        let meta = self.meta()?;
        Ok(SagaRecord {
            saga_type: self.saga_type.clone(),
            saga_id: self.saga_id.clone(),
            version: self.version,
            status: meta.status,
            reason: meta.reason,
            state: self.json("state", &self.state)?,
            timeouts: meta.timeouts,
            compensation: meta.compensation,
            step_attempts: meta
                .retries
                .into_iter()
                .map(|(name, r)| (name, r.attempts))
                .collect(),
            history,
            started_at: time_of(self.started_ms),
            updated_at: time_of(self.updated_ms),
            finished_at: self.finished_ms.map(time_of),
        })
    }
}

/// What a transition writes: the row (JSON serialised once) and its
/// history entry.
#[derive(Debug)]
#[doc(hidden)]
pub struct SagaWrite<'a> {
    pub saga_type: &'a str,
    pub saga_id: &'a str,
    /// The version written (1 for a new saga).
    pub version: i64,
    pub status: &'static str,
    pub reason: Option<&'a str>,
    pub state: String,
    pub timeouts: String,
    pub compensation: String,
    pub retries: String,
    pub finished: bool,
    /// The transition's history entry, appended to the saga's history.
    pub entry: &'a HistoryEntry,
    /// How many entries the saga's history keeps, this one included (the
    /// older ones are deleted with the save); `i64::MAX`: all.
    pub keep: i64,
}

impl<'a> SagaWrite<'a> {
    /// The columns of `meta` and `state` for version `entry.version`,
    /// with `entry` for the history, which keeps its last `keep`.
    pub(super) fn of(
        saga_type: &'a str,
        saga_id: &'a str,
        state: String,
        meta: &'a Meta,
        entry: &'a HistoryEntry,
        keep: i64,
    ) -> Result<Self, consumer_core::Error> {
        let json = |what: &'static str, v: &dyn erased::Json| {
            v.to_json()
                .map_err(|source| consumer_core::Error::Serialize { what, source })
        };
        Ok(Self {
            saga_type,
            saga_id,
            version: entry.version,
            status: meta.status.as_str(),
            reason: meta.reason.as_deref(),
            state,
            timeouts: json("saga timeouts", &meta.timeouts)?,
            compensation: json("saga compensation log", &meta.compensation)?,
            retries: json("saga step retries", &meta.retries)?,
            finished: !meta.status.is_active(),
            entry,
            keep,
        })
    }
}

mod erased {
    /// Serialises any of the row's columns behind one pointer type.
    pub(super) trait Json {
        fn to_json(&self) -> Result<String, serde_json::Error>;
    }

    impl<T: serde::Serialize> Json for T {
        fn to_json(&self) -> Result<String, serde_json::Error> {
            serde_json::to_string(self)
        }
    }
}
