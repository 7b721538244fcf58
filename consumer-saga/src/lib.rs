//! Sagas: multi-step processes with durable state, as handlers.
//!
//! A saga type is plain Rust: a [`Saga`] (its name, its state, its error),
//! and a [`SagaBuilder`] that registers, for each event type it takes, how
//! the event finds its saga (`correlate`), what it does when the saga does
//! not exist ([`NotFound`]) and its transition. The result is a
//! [`SagaHandler`]: a [`Handler`](consumer_core::Handler) that a
//! [`Router`](consumer_core::Router) takes beside ordinary `#[handler]`s, in a
//! [`Service`](consumer_core::Service).
//!
//! # One event, one transaction
//!
//! Each delivery runs in one transaction: the message's dedup row is
//! claimed, the saga's row (`consumer_sagas`: state, version, status,
//! pending timeouts, compensation log) is loaded, the transition runs, the
//! row is saved at the next version with `UPDATE … WHERE version =
//! <loaded>` with the transition's entry in its history
//! (`consumer_saga_history`, a row per transition), and every command,
//! event and timeout the transition asked for is written to the outbox;
//! then it commits, or
//! nothing of it exists. A redelivered message finds its dedup row and
//! does nothing. When the save updates no row, another instance changed
//! the saga first: the transition runs again at once on the new version
//! (one wins, the other applies on top), and no attempt is counted
//! (`consumer.saga.conflicts`).
//!
//! A transition is a plain function `fn(&Saga, &mut State, Event, &mut
//! Step) -> Result<(), Error>`: it decides, and the framework writes. It
//! cannot publish anything outside the transaction: a [`Step`] records
//! commands ([`Step::send`]), timeouts ([`Step::schedule_timeout`]), undo
//! steps ([`Step::record_undo`]) and the end ([`Step::complete`],
//! [`Step::compensate`], [`Step::fail`]). Its errors are classified like a
//! handler's: [`Saga::is_terminal`] ones are dead-lettered at once, the
//! others retried under the saga's policy.
//!
//! # Order: key a saga's messages by its id
//!
//! A router's lanes are per message key: the messages of one saga are
//! handled in order only if they are keyed by the saga id. What the saga
//! sends is (the outbox keys by aggregate id, and a saga's aggregate id is
//! its id); the participants' replies must be too. An event whose key is
//! not its saga's id is dead-lettered as poison ([`KeyMismatch::Refuse`],
//! the default), or applied with a WARN ([`KeyMismatch::Accept`]).
//!
//! # Timeouts
//!
//! A timeout is a scheduled outbox event whose token (its CloudEvents id)
//! is kept on the saga's row; it arrives on the saga's input
//! ([`SagaBuilder::with_timeouts_to`]) and runs the transition registered
//! with [`SagaBuilder::on_timeout`]. One the saga no longer waits for
//! (cancelled, replaced, or its saga finished: finishing cancels them all)
//! is acked and counted, never applied. [`SagaStore::pending_timeouts`]
//! and `consumer sagas show` list them.
//!
//! # Compensation
//!
//! Undo steps are recorded as the saga goes ([`Undo`]); when a transition
//! compensates, they are sent last first, one at a time, each with an id
//! derived from the saga, the step and the round (the participant's dedup
//! absorbs a repeat). An undo that fails for good is marked failed and the
//! steps before it still run; the saga ends `compensation_failed`, written
//! to the store's dead-letter table with its context in the same
//! transaction, counted by `consumer.saga.compensation_failed` (alerted
//! on), until an operator resumes or abandons it ([`SagaStore`],
//! `consumer sagas resume|abandon`). A step may be sent again with backoff
//! before compensating ([`Step::retry_step`]).
//!
//! # Finished sagas
//!
//! A finished saga (completed, compensated, failed, compensation failed,
//! abandoned) keeps its row as a tombstone until the store's retention
//! ends ([`Store::purge`](consumer_core::Store::purge) deletes it with the dedup
//! rows of the same age): a late event is recognised, acked and counted
//! (`consumer.saga.ignored`, reason `finished`), not taken for an unknown
//! saga.
//!
//! The guide's sagas page (`consumer::guide::sagas`) shows an orchestrated
//! and a choreographed saga end to end.

mod builder;
mod compensation;
mod database;
mod error;
mod handler;
mod history;
mod ids;
mod letter;
pub mod metrics;
mod monitor;
mod not_found;
mod observe;
mod record;
mod route;
mod statements;
mod status;
mod step;
mod store;
mod tables;

pub use builder::{KeyMismatch, SagaBuilder};
pub use compensation::Undo;
pub use database::{OpenSagas, SagaDatabase, SagaFilter};
pub use error::{
    KeyMismatchError, OperatorError, SagaMisuse, SagaNotFound, TimeoutWithoutSaga,
    TooManyConflicts, UnknownSagaEvent,
};
pub use handler::SagaHandler;
pub use letter::headers;
pub use monitor::SagaMonitor;
pub use not_found::NotFound;
pub use record::{
    HistoryEntry, PendingTimeout, SagaRecord, SagaRow, SagaWrite, UndoStatus, UndoStep,
    UnreadableRow,
};
pub use status::SagaStatus;
pub use step::Step;
pub use store::SagaStore;
pub use tables::SagaTables;

/// Name of the table that records which of the sagas' migrations ran (kept
/// apart from the store's `_consumer_migrations`).
pub const MIGRATIONS_TABLE: &str = "_consumer_saga_migrations";

/// A saga type: its name, its state and the error its transitions return.
/// Its event types and transitions are registered with a [`SagaBuilder`].
///
/// ```
/// use consumer_saga::Saga;
///
/// #[derive(Default, serde::Serialize, serde::Deserialize)]
/// struct Order {
///     amount_cents: i64,
///     paid: bool,
/// }
///
/// #[derive(Debug, thiserror::Error)]
/// enum OrderError {
///     #[error("order amount {0} is not positive")]
///     BadAmount(i64),
/// }
///
/// struct Fulfilment;
///
/// impl Saga for Fulfilment {
///     type State = Order;
///     type Error = OrderError;
///     fn name(&self) -> &'static str {
///         "order-fulfilment"
///     }
///     fn is_terminal(&self, error: &OrderError) -> bool {
///         matches!(error, OrderError::BadAmount(_))
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a saga",
    label = "implement `consumer::Saga` for it",
    note = "a saga names its type (`fn name`), its `State` (serde, `Default`) and its `Error`; its events are registered with `SagaBuilder::new(saga, outbox).on(..)`"
)]
pub trait Saga: Send + Sync + 'static {
    /// The saga's state: JSON in its row, `Default` when it starts.
    type State: serde::Serialize + serde::de::DeserializeOwned + Default + Send + 'static;
    /// What its transitions return when they fail.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Stable name: the saga type. It scopes the saga's rows and its dedup
    /// rows (like a handler's name), names it in metrics and dead letters;
    /// renaming it forgets every saga of the type.
    fn name(&self) -> &'static str;

    /// Whether `error` is terminal: dead-lettered at once, never retried.
    /// The others are retried under the saga's policy
    /// ([`SagaBuilder::with_retry`]). Default: none is.
    fn is_terminal(&self, error: &Self::Error) -> bool {
        let _ = error;
        false
    }
}
