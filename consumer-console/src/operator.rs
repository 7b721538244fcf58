//! What the console asks of the stores and places: the [`Operator`] trait,
//! and the values it answers with.
//!
//! The console renders pages and checks requests; reading letters, running
//! replays and changing sagas is the operator tool's work (`consumer-cli`
//! implements this trait with its own readers and its replay engine), so
//! the console and the command line share one engine and cannot drift.

use std::future::Future;

use consumer_core::DeadLetter;
pub use consumer_core::store::held::HeldKey;
pub use consumer_core::store::paused::PausedHandler;
use consumer_saga::{SagaRecord, SagaStatus};
use time::OffsetDateTime;

/// The stores and places behind the console. Every read is bounded: a
/// page, a group count, one letter; none loads a whole place.
pub trait Operator: Send + Sync + 'static {
    /// Where the dead letters are read from, as a phrase for the pages
    /// ("the store's dead-letter table", "Kafka topic orders.dlq").
    fn place(&self) -> String;

    /// The dead letters counted per handler and reason (the error), the
    /// largest groups first, at most `limit` groups; and what the read left
    /// out, if anything.
    fn letter_groups(
        &self,
        limit: u32,
    ) -> impl Future<Output = Result<LetterGroups, OperatorError>> + Send;

    /// One page of letters, in the place's order, after `query.after`.
    fn letters(
        &self,
        query: &LetterQuery,
    ) -> impl Future<Output = Result<Vec<StoredLetter>, OperatorError>> + Send;

    /// The letter `handle` names ([`StoredLetter::handle`]), or `None`.
    fn letter(
        &self,
        handle: &str,
    ) -> impl Future<Output = Result<Option<StoredLetter>, OperatorError>> + Send;

    /// Replays the letters `request` selects through the replay engine
    /// (canary first, rate, journal), or only says what it would send.
    fn replay(
        &self,
        request: &ReplayRequest,
    ) -> impl Future<Output = Result<ReplayReport, OperatorError>> + Send;

    /// Sagas, oldest first.
    fn sagas(
        &self,
        query: &SagaQuery,
    ) -> impl Future<Output = Result<Vec<SagaRecord>, OperatorError>> + Send;

    /// One saga, or `None`.
    fn saga(
        &self,
        saga_type: &str,
        saga_id: &str,
    ) -> impl Future<Output = Result<Option<SagaRecord>, OperatorError>> + Send;

    /// Resumes or abandons a saga; the saga as it is afterwards.
    fn saga_action(
        &self,
        action: &SagaAction,
    ) -> impl Future<Output = Result<SagaRecord, OperatorError>> + Send;

    /// Held keys (sequenced dead letters), by handler then key, after
    /// `query.after`.
    fn held_keys(
        &self,
        query: &HeldQuery,
    ) -> impl Future<Output = Result<Vec<HeldKey>, OperatorError>> + Send;

    /// Releases a held key (its head runs again first) or, with
    /// `skip_head`, releases it without its head; `false` when the key is
    /// not held.
    fn release_key(
        &self,
        handler: &str,
        key: &str,
        skip_head: bool,
    ) -> impl Future<Output = Result<bool, OperatorError>> + Send;

    /// Every pause an operator set (a handler's, or every handler's:
    /// `*`), by handler name.
    fn paused(&self) -> impl Future<Output = Result<Vec<PausedHandler>, OperatorError>> + Send;

    /// Pauses `handler` (`*`: every handler) by `by` for `reason`; `false`
    /// when it was paused already (the first pause stays).
    fn pause(
        &self,
        handler: &str,
        by: &str,
        reason: &str,
    ) -> impl Future<Output = Result<bool, OperatorError>> + Send;

    /// Resumes `handler`; `false` when it was not paused by itself.
    fn resume(&self, handler: &str) -> impl Future<Output = Result<bool, OperatorError>> + Send;

    /// The outbox's backlog.
    fn outbox(&self) -> impl Future<Output = Result<OutboxBacklog, OperatorError>> + Send;

    /// Writes an entry to the audit log; an action whose entry cannot be
    /// written is not run.
    fn audit(&self, entry: &AuditEntry) -> impl Future<Output = Result<(), OperatorError>> + Send;

    /// The latest audit entries, newest first.
    fn audit_log(
        &self,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<AuditEntry>, OperatorError>> + Send;
}

/// Which page of held keys.
#[derive(Debug, Clone, Default)]
pub struct HeldQuery {
    /// Only this handler's.
    pub handler: Option<String>,
    /// Only keys after this `(handler, key)` (keyset pagination).
    pub after: Option<(String, String)>,
    /// At most this many.
    pub limit: u32,
}

/// The dead letters' groups, and what the read left out.
#[derive(Debug, Clone, Default)]
pub struct LetterGroups {
    /// The groups, the largest first.
    pub groups: Vec<LetterGroup>,
    /// What the read of the place left out, as a sentence (messages that
    /// are not letters the framework wrote, offsets that yielded no
    /// record), so that a missing letter is never silent.
    pub left_out: Option<String>,
}

/// Letters of one handler that failed with one error.
#[derive(Debug, Clone)]
pub struct LetterGroup {
    /// The handler that gave up.
    pub handler: String,
    /// The error it gave up with.
    pub error: String,
    /// How many letters.
    pub count: i64,
    /// The oldest letter's last failure.
    pub first: OffsetDateTime,
    /// The newest letter's last failure.
    pub last: OffsetDateTime,
}

/// Which page of letters.
#[derive(Debug, Clone, Default)]
pub struct LetterQuery {
    /// Only this handler's.
    pub handler: Option<String>,
    /// Only letters with exactly this error.
    pub error: Option<String>,
    /// Only letters after the one with this handle (keyset pagination).
    pub after: Option<String>,
    /// At most this many.
    pub limit: u32,
}

/// A letter as a place holds it.
#[derive(Debug, Clone)]
pub struct StoredLetter {
    /// The place's handle on it (the table's row id; on a broker's place,
    /// the letter's id): what the console's addresses name.
    pub handle: String,
    /// The letter's id, as the command line shows it and replays select it.
    pub id: String,
    /// The letter and its context.
    pub letter: DeadLetter,
    /// Why the broker refused it, when the table holds it for that reason.
    pub refusal: Option<String>,
    /// When the place stored it.
    pub stored_at: Option<OffsetDateTime>,
    /// Whether a replay sent it already, where the place keeps replayed
    /// letters (a Kafka topic, a Kinesis stream: the replay journal says);
    /// `None` where a replay removes them.
    pub replayed: Option<bool>,
}

/// What a replay sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// These letters, by id.
    Letters(Vec<String>),
    /// Every letter of a handler with exactly this error.
    Group {
        /// The handler.
        handler: String,
        /// The error.
        error: String,
    },
}

/// A replay to run (or to try as a dry run).
#[derive(Debug, Clone)]
pub struct ReplayRequest {
    /// Which letters.
    pub selection: Selection,
    /// Send this many first, alone, and stop if one comes back dead.
    pub canary: usize,
    /// Letters per second at most; `None`: as fast as confirmed.
    pub rate: Option<f64>,
    /// Say what would be sent; send nothing.
    pub dry_run: bool,
}

/// What a replay did, letter by letter.
#[derive(Debug, Clone, Default)]
pub struct ReplayReport {
    /// One line per letter, in the order they were handled.
    pub letters: Vec<ReplayedLetter>,
    /// Why the run stopped early (a canary came back dead, another
    /// replay holds the lock), when it did.
    pub stopped: Option<String>,
}

/// One letter's fate in a replay.
#[derive(Debug, Clone)]
pub struct ReplayedLetter {
    /// The letter's id.
    pub id: String,
    /// Its handler.
    pub handler: String,
    /// Its message's id.
    pub message_id: String,
    /// Where it went (or would go).
    pub route: String,
    /// `sent`, `would_send`, `already_sent`, `already_processed`,
    /// `payload_omitted`.
    pub outcome: String,
}

/// Which sagas.
#[derive(Debug, Clone, Default)]
pub struct SagaQuery {
    /// Only this type.
    pub saga_type: Option<String>,
    /// Only this status.
    pub status: Option<SagaStatus>,
    /// At most this many.
    pub limit: u32,
}

/// An operator's change to a saga.
#[derive(Debug, Clone)]
pub enum SagaAction {
    /// Sends a failed compensation's undo steps again.
    Resume {
        /// The saga type.
        saga_type: String,
        /// The saga's id.
        saga_id: String,
    },
    /// Stops the saga, undoing nothing.
    Abandon {
        /// The saga type.
        saga_type: String,
        /// The saga's id.
        saga_id: String,
        /// Why, kept on the saga.
        reason: String,
    },
}

/// The outbox's backlog.
#[derive(Debug, Clone, Default)]
pub struct OutboxBacklog {
    /// Events that should go out now and have not.
    pub pending: i64,
    /// When the oldest of them was committed (or fell due).
    pub oldest: Option<OffsetDateTime>,
    /// Scheduled events not yet due.
    pub scheduled: i64,
    /// Events the relay gave up on, each blocking its aggregate.
    pub failed: Vec<FailedEvent>,
}

/// An outbox event the relay gave up on.
#[derive(Debug, Clone)]
pub struct FailedEvent {
    /// `aggregate_type/aggregate_id`.
    pub aggregate: String,
    /// The event's type.
    pub event_type: String,
    /// Its version in the aggregate.
    pub version: i64,
    /// Publish attempts.
    pub attempts: i32,
    /// The last error.
    pub last_error: Option<String>,
}

/// One line of the audit log: who did what to what, and how it ended.
#[derive(Debug, Clone)]
pub struct AuditEntry {
    /// When (set by the log when it writes the entry).
    pub at: Option<OffsetDateTime>,
    /// Who: the peer's address (and whether it held the token).
    pub actor: String,
    /// `replay`, `saga resume`, `saga abandon`, `held key release`,
    /// `held key skip`, `pause`, `resume`.
    pub action: String,
    /// What it was done to.
    pub target: String,
    /// How it ended, as a sentence.
    pub outcome: String,
}

/// Why the operator could not answer, as a sentence for the page.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct OperatorError {
    /// What kind of failure, for the status code.
    pub kind: FailureKind,
    /// What happened and what to do.
    pub message: String,
}

/// The kinds of [`OperatorError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureKind {
    /// No such letter, saga or table.
    NotFound,
    /// Refused: a saga in the wrong status, another replay running.
    Refused,
    /// A service failed or is unreachable.
    Failed,
}

impl OperatorError {
    /// An error of `kind` saying `message`.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}
