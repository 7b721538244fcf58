//! The runtime of the `consumer` framework: consumers that never lose a
//! message and never process one twice.
//!
//! Applications use the `consumer` facade crate, its `#[handler]`
//! attribute and its guide; this crate is what the facade re-exports, with
//! three doors, one per audience:
//!
//! * **the root**, for applications: [`Consumer`], [`Router`], [`Service`],
//!   [`Outbox`] and [`OutboxRelay`], the stores, [`RetryPolicy`],
//!   [`DeadLetter`], [`MemoryBroker`], and the modules they open onto
//!   (sagas are a crate of their own, `consumer-saga`, on the hooks this
//!   one offers: [`store::StoreExtension`], the metric catalogue's
//!   [`MetricSpec`](metrics::MetricSpec), [`Handler`]);
//! * **[`backend`]**, for broker backends (`consumer-kafka`,
//!   `consumer-amqp`, and any other): the [`Source`](backend::Source) and
//!   [`Acker`](backend::Acker) to implement, the envelope, the retry copy,
//!   the dead letter, the errors a backend returns, its gauges and its
//!   channel descriptions, and nothing else;
//! * **`__private`**, hidden, for what `#[handler]` expands to.

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod batch;
pub mod describe;
pub mod error;
pub mod handler;
pub mod memory;
pub mod metrics;
pub mod outbox;
pub mod router;
pub mod runtime;
pub mod service;
pub mod sql;
pub mod stats;
pub mod store;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
pub mod trace;

/// What a broker backend implements and uses: the `consumer-backend`
/// crate, which the backends depend on instead of this one.
pub use consumer_backend as backend;
pub use consumer_backend::{dead_letter, envelope, partition, publish, retry, secret, source};

pub use dead_letter::{DeadLetter, DeadLetterKind};
pub use envelope::{Envelope, Headers, Message};
pub use error::{BoxError, Error, Result};
pub use handler::{Handler, MessageContext};
pub use memory::MemoryBroker;
pub use outbox::{NewEvent, Outbox, OutboxRelay};
pub use publish::{Outgoing, Publisher};
pub use retry::{RetryMode, RetryPolicy};
pub use router::Router;
pub use runtime::Consumer;
pub use secret::Secret;
pub use service::{Service, shutdown_signal};
pub use stats::Stats;
pub use store::{DedupStore, MemoryStore, MemoryTx, Store};
#[cfg(feature = "postgres")]
pub use store::{PgStore, PgTx};
#[cfg(feature = "sqlite")]
pub use store::{SqliteStore, SqliteTx};

/// What `#[handler]` expansions call. Not a public API: it changes without notice.
#[doc(hidden)]
pub mod __private {
    pub use sqlx;
    pub use tracing;

    use std::fmt::Display;

    use crate::store::Tx;

    /// Maps the handler's transaction type to its store.
    #[diagnostic::on_unimplemented(
        message = "`{Self}` is not a handler transaction",
        label = "expected `consumer::PgTx`, `consumer::SqliteTx` or `consumer::MemoryTx` behind `&mut`",
        note = "the transaction argument of a `#[handler]` is `tx: &mut PgTx` (PostgreSQL), \
                `tx: &mut SqliteTx` (SQLite) or `tx: &mut MemoryTx` (in memory)"
    )]
    pub trait TxStore {
        /// The store, whose transaction is `Self`: a bound on the handler's
        /// impl, so the store's `Tx` is the argument's type wherever the
        /// expansion uses it, and a wrong type is this trait's error only.
        type Store: crate::DedupStore<Tx = Self>;
    }

    impl<DB: crate::store::StoreDatabase> TxStore for Tx<DB> {
        type Store = crate::Store<DB>;
    }

    impl TxStore for crate::MemoryTx {
        type Store = crate::MemoryStore;
    }

    /// The idempotency key as the store keeps it.
    #[diagnostic::on_unimplemented(
        message = "`{Self}` cannot be an idempotency key",
        label = "must implement `Display`",
        note = "`idempotency_key = <expr>` takes any expression whose value implements \
                `std::fmt::Display` (a string, a number, a UUID)"
    )]
    pub trait IdempotencyKey {
        /// Renders the key.
        fn to_key(&self) -> String;
    }

    impl<T: Display + ?Sized> IdempotencyKey for T {
        fn to_key(&self) -> String {
            self.to_string()
        }
    }

    /// The message type: the expansion decodes through this trait, spanned
    /// on the argument's type, and a batch's `Message` is bound by it, so a
    /// type that is not `Deserialize` is reported once, with this sentence,
    /// before any of the runtime's own bounds. `DeserializeOwned` is behind
    /// the blanket impl, not a supertrait: rustc reports a failing
    /// supertrait in its own words instead of this trait's.
    #[diagnostic::on_unimplemented(
        message = "`{Self}` cannot be decoded as a message",
        label = "the message argument must implement `serde::Deserialize`",
        note = "add `#[derive(serde::Deserialize)]` to the message type"
    )]
    pub trait DecodableMessage: Sized {
        /// Decodes the delivery's payload as JSON; a failure is a poison
        /// pill.
        fn decode<S: crate::DedupStore>(
            invocation: &crate::handler::Invocation<'_, S>,
        ) -> Result<Self, crate::handler::Outcome>;
    }

    impl<T: serde::de::DeserializeOwned> DecodableMessage for T {
        fn decode<S: crate::DedupStore>(
            invocation: &crate::handler::Invocation<'_, S>,
        ) -> Result<Self, crate::handler::Outcome> {
            invocation.decode()
        }
    }

    /// Checks the error type at the return type's span.
    #[diagnostic::on_unimplemented(
        message = "`{Self}` is not usable as a handler error",
        label = "must convert into `Box<dyn std::error::Error + Send + Sync>`",
        note = "return `Result<(), E>` where `E` implements `std::error::Error + Send + Sync + 'static` \
                (for example with `thiserror`), or use `anyhow::Error`"
    )]
    pub trait HandlerError {}
    impl<E: Into<crate::BoxError>> HandlerError for E {}

    /// Whether a `#[handler]`'s message type has a schema: see
    /// [`crate::describe::Probe`].
    pub mod probe {
        #[cfg(feature = "schemas")]
        pub use crate::describe::ViaJsonSchema;
        pub use crate::describe::{PayloadType, Probe, ViaNothing};
    }

    /// The handler SPI the expansions implement and call.
    pub use crate::handler::{Failure, FailureKind, Invocation, Outcome};

    /// Type-level assertion the expansion emits: see [`HandlerError`].
    pub const fn assert_error<E: HandlerError>() {}

    /// The retry policy the `exponential(...)` form builds.
    pub const fn exponential(
        base_nanos: u64,
        max_delay_nanos: u64,
        attempts: u32,
        redeliver: bool,
    ) -> crate::RetryPolicy {
        let p = crate::RetryPolicy::exponential(
            std::time::Duration::from_nanos(base_nanos),
            std::time::Duration::from_nanos(max_delay_nanos),
            attempts,
        );
        if redeliver {
            p.with_mode(crate::RetryMode::Redeliver)
        } else {
            p
        }
    }
}
