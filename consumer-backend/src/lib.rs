//! What a broker backend of the `consumer` framework implements and uses,
//! and nothing else: `consumer-kafka`, `consumer-amqp` and `consumer-sqs`
//! depend on this crate and not on the runtime (`consumer-core`), and a new
//! backend is written against it alone (a test of the workspace reads
//! `cargo metadata` to keep it so). The runtime depends on it and
//! re-exports, at the paths applications use (`consumer::Envelope`,
//! `consumer::envelope::Origin`, ...), what applications need.
//!
//! # What a backend implements
//!
//! * a [`Source`] of deliveries, each an [`Envelope`] (shared in an `Arc`
//!   from where the source builds it) with an [`Acker`];
//! * the [`Acker`]: ack, release, and publishing what the runtime built for
//!   it (a [`RetryCopy`], a dead letter as a [`Message`]);
//! * usually a [`Publisher`], for the outbox relay and for applications;
//! * optionally [`Source::accept_retry_policy`], to refuse or adapt to a
//!   handler's [`RetryPolicy`] before the first delivery;
//! * a [`SourceObserver`], through which it emits what happens at its
//!   source ([`Happened`]: received, acked, released, a lease extended, a
//!   rebalance, a failed commit, ...) once, where it happens; its counters
//!   and log lines listen;
//! * optionally [`SourceGauges`] (queue depth, lag) and
//!   [`SourceChannels`] / [`ChannelDescription`] (what the service's
//!   AsyncAPI document says of its channels).
//!
//! # What settling a delivery means
//!
//! The runtime decides every outcome and builds, once for every backend,
//! what goes back to the broker; the backend only routes and publishes it.
//!
//! * **Ack**: the delivery is done (processed, or a duplicate).
//! * **Retry copy** ([`RetryCopy`]): a transient failure retried through
//!   the broker. The copy keeps the delivery's id (even one the backend
//!   derived from a position or a content hash), its key, payload and
//!   headers, and carries the attempt number, the first failure and the
//!   due time ([`names::DUE`], read back with [`due_in`]), so no backend
//!   can drop one of them.
//! * **Dead letter** ([`DeadLetter`]): the original with its structured
//!   context, or, when the dead-letter destination refuses it for its
//!   size, the context without the payload.
//!
//! Two rules hold for every backend: nothing is acked before its
//! replacement (retry copy, dead letter) is confirmed by the broker, and a
//! delivery dropped without being settled goes back to the broker
//! (redelivered, never lost). A backend says through its errors whether a
//! failure can heal ([`Error::broker`] with a [`BrokerErrorKind`]); the
//! runtime retries a settle step only while it can, and otherwise takes the
//! fallback: a dead letter without its payload, then the store's
//! dead-letter table, then a release for redelivery.
//!
//! # Conventions every backend keeps
//!
//! * Attribute names follow the CloudEvents Kafka binding ([`names`]);
//!   a protocol with a native field for one (AMQP's `message-id`) maps it
//!   when it builds the [`Envelope`], and [`complete_cloudevent`] fills in
//!   what a publisher must send.
//! * A key goes to partition [`partition_for`]`(key, n)`: Kafka's
//!   murmur2 partitioner, so every backend places a key alike.
//! * Sends are traced with [`Sends`]: one `send` span per message, a child
//!   of the caller's context, its `traceparent` injected.

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod dead_letter;
pub mod describe;
pub mod envelope;
pub mod error;
pub mod gauges;
pub mod observe;
pub mod partition;
pub mod publish;
pub mod retry;
mod retry_copy;
pub mod secret;
pub mod source;
pub mod trace;

pub use dead_letter::{DeadLetter, DeadLetterKind};
pub use describe::{ChannelDescription, SourceChannels};
pub use envelope::cloudevent::{DEFAULT_SOURCE, complete as complete_cloudevent, needs_completion};
pub use envelope::{
    Channel, Envelope, HeaderError, Headers, Message, Origin, Placement, Position, format_time,
    names,
};
pub use error::{BoxError, BrokerError, BrokerErrorKind, Error, Result};
pub use gauges::{QueueRole, SourceGauges, SourceReadings};
pub use observe::{Broker, Happened, SourceObserver};
pub use partition::partition_for;
pub use publish::{Outgoing, Publisher};
pub use retry::{RetryMode, RetryPolicy};
pub use retry_copy::{RetryCopy, due_in};
pub use secret::{Secret, SecretError};
pub use source::{Acker, Source};
pub use trace::{SendTarget, Sends};
