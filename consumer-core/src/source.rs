//! What a backend implements: a [`Source`] of deliveries and, for each
//! delivery, an [`Acker`] that settles it.
//!
//! Settling is the only place backend glue lives. The runtime decides the
//! outcome; the backend turns it into broker operations with these rules:
//! nothing is acked before its replacement (retry copy, dead letter) is
//! confirmed by the broker, and a delivery dropped without being settled
//! goes back to the broker (it is redelivered, never lost).

use std::future::Future;
use std::time::Duration;

use time::OffsetDateTime;

use crate::dead_letter::DeadLetter;
use crate::envelope::Envelope;
use crate::error::Error;

/// A stream of deliveries from one backend.
///
/// `recv` must be cancel-safe: if its future is dropped before it
/// completes, no delivery is taken (the runtime drops it at shutdown).
pub trait Source: Send + 'static {
    /// Settles one delivery.
    type Acker: Acker;

    /// `messaging.system` for spans: `kafka`, `rabbitmq`, `memory`, ...
    fn system(&self) -> &'static str;

    /// The next delivery; `Ok(None)` when the source is closed for good.
    fn recv(
        &mut self,
    ) -> impl Future<Output = Result<Option<(Envelope, Self::Acker)>, Error>> + Send;

    /// Called once after the runtime has settled or released everything:
    /// commit what is done, leave the group, close channels.
    fn close(self) -> impl Future<Output = ()> + Send
    where
        Self: Sized,
    {
        async {}
    }
}

/// A retry sent back through the broker.
#[derive(Debug, Clone, Copy)]
pub struct Redelivery {
    /// The attempt number the copy carries (the failed one plus one).
    pub attempt: u32,
    /// How long the broker holds it before delivering it again.
    pub delay: Duration,
    /// When the first attempt failed.
    pub first_failure: OffsetDateTime,
}

/// How a dead letter reached the dead-letter destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadLettered {
    /// Published with its context and confirmed; the runtime acks the
    /// original next.
    Published,
    /// Publishing kept failing, so the backend gave the original to the
    /// broker's own dead-lettering (AMQP: `nack` without requeue into the
    /// queue's dead-letter exchange). The delivery is settled: the runtime
    /// must not ack it, and dropping the acker does nothing.
    SettledByBroker,
}

/// Settles one delivery. Each method says what the broker must have
/// confirmed when it returns `Ok`.
pub trait Acker: Send + 'static {
    /// The delivery is done: commit/ack it.
    fn ack(self) -> impl Future<Output = Result<(), Error>> + Send;

    /// Give the delivery back unsettled so it is delivered again (shutdown,
    /// or a settle step that could not complete).
    fn release(self) -> impl Future<Output = Result<(), Error>> + Send;

    /// Publish `dead_letter` to the dead-letter destination and wait for the
    /// broker's confirmation. Does not ack: the runtime acks afterwards,
    /// unless this returns [`DeadLettered::SettledByBroker`].
    fn dead_letter(
        &mut self,
        dead_letter: &DeadLetter,
    ) -> impl Future<Output = Result<DeadLettered, Error>> + Send;

    /// Publish a copy of `envelope` for delayed redelivery and wait for the
    /// broker's confirmation. Does not ack: the runtime acks afterwards.
    fn schedule_retry(
        &mut self,
        envelope: &Envelope,
        retry: &Redelivery,
    ) -> impl Future<Output = Result<(), Error>> + Send;
}
