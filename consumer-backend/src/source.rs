//! What a backend implements: a [`Source`] of deliveries and, for each
//! delivery, an [`Acker`] that settles it.
//!
//! The runtime decides every outcome and builds what goes back to the
//! broker (the retry copy, the dead letter: see [`RetryCopy`]); a
//! backend only routes and publishes what it is given, and says through
//! [`Error::is_retriable`] and [`Error::broker_kind`] whether a failure can
//! heal. Two rules hold for every backend: nothing is acked before its
//! replacement (retry copy, dead letter) is confirmed by the broker, and a
//! delivery dropped without being settled goes back to the broker (it is
//! redelivered, never lost).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::envelope::{Envelope, Message};
use crate::error::Error;
use crate::gauges::SourceGauges;
use crate::retry::{RetryMode, RetryPolicy};
use crate::retry_copy::RetryCopy;

/// A stream of deliveries from one backend.
///
/// `recv` must be cancel-safe: if its future is dropped before it
/// completes, no delivery is taken (the runtime drops it at shutdown).
pub trait Source: Send + 'static {
    /// Settles one delivery.
    type Acker: Acker;

    /// `messaging.system` for spans: `kafka`, `rabbitmq`, `memory`, ...
    fn system(&self) -> &'static str;

    /// `messaging.consumer.group.name`: the consumer group this source
    /// reads as (Kafka), for spans and metrics. `None` where the system
    /// has no groups.
    fn consumer_group(&self) -> Option<&str> {
        None
    }

    /// `server.address` and `server.port` of the broker this source was
    /// configured with, for spans and metrics.
    fn server(&self) -> Option<(&str, u16)> {
        None
    }

    /// What this source reports at each metrics collection (lag per
    /// partition, queue depths, rebalances): see
    /// [`gauges`](crate::gauges).
    fn gauges(&self) -> Option<Arc<dyn SourceGauges>> {
        None
    }

    /// Whether this source can send retries back through the broker
    /// ([`RetryMode::Redeliver`]) with delays
    /// up to `longest_delay`. `Err` says what is missing and how to fix it,
    /// in one sentence; the consumer then refuses to start, before it takes
    /// a delivery, instead of failing each retry at run time.
    ///
    /// The default refuses: a source that implements
    /// [`Acker::publish_retry`] says so by overriding this.
    fn check_redelivery(&self, longest_delay: Duration) -> Result<(), String> {
        let _ = longest_delay;
        Err(format!(
            "the {} source cannot send retries back through the broker: use retry mode `in_place`",
            self.system()
        ))
    }

    /// Told, before the first delivery, the retry policy of each handler
    /// this source feeds (when the consumer is built, and again when it
    /// starts: telling it twice must change nothing more than once). `Err`
    /// says in one sentence what this source cannot serve and how to fix
    /// it; the consumer then refuses to start, before it takes a delivery.
    ///
    /// The default asks [`check_redelivery`](Self::check_redelivery) about
    /// every policy that retries through the broker. A source overrides
    /// this when it must know more than the longest delay (SQS: a redrive
    /// policy that counts receives must let every attempt happen) or when
    /// it serves a mode in a way of its own (SQS hands out one message per
    /// group while a handler retries by visibility).
    fn accept_retry_policy(&mut self, policy: &RetryPolicy) -> Result<(), String> {
        if policy.mode() == RetryMode::Redeliver && policy.max_attempts() > 1 {
            self.check_redelivery(policy.longest_delay())
        } else {
            Ok(())
        }
    }

    /// Told, before the first delivery, the largest body its consumer
    /// takes. A source that reads attributes out of bodies (structured-mode
    /// CloudEvents) reads none out of a larger one
    /// ([`Envelope::from_parts_within`](crate::envelope::Envelope::from_parts_within)):
    /// the runtime dead-letters it as too large without parsing it. The
    /// default ignores it; a source wrapping another passes it on.
    fn limit_body(&mut self, max_bytes: usize) {
        let _ = max_bytes;
    }

    /// The channels this source reads and settles to, for the service's
    /// AsyncAPI document. `None` (the default here) refuses the document
    /// with an error naming the consumer.
    fn channels(&self) -> Option<crate::describe::SourceChannels> {
        None
    }

    /// The next delivery; `Ok(None)` when the source is closed for good.
    ///
    /// The envelope comes shared, as the runtime holds it (the handler, a
    /// retry copy and a dead letter all read the one envelope): a source
    /// wraps it once where it builds it, rather than hand over some
    /// hundreds of bytes by value through every future on the way.
    #[allow(
        clippy::type_complexity,
        reason = "the signature says what a source hands over; an alias would hide it"
    )]
    fn recv(
        &mut self,
    ) -> impl Future<Output = Result<Option<(Arc<Envelope>, Self::Acker)>, Error>> + Send;

    /// Called once after the runtime has settled or released everything:
    /// commit what is done, leave the group, close channels.
    fn close(self) -> impl Future<Output = ()> + Send
    where
        Self: Sized,
    {
        async {}
    }
}

/// Settles one delivery. Each method says what the broker must have
/// confirmed when it returns `Ok`; an `Err` says through
/// [`Error::is_retriable`] whether trying again may succeed, and through
/// [`Error::broker_kind`] why the broker refused (the runtime sends a
/// dead letter refused for its size again without its payload, and writes
/// one refused for good to the store's dead-letter table).
pub trait Acker: Send + 'static {
    /// The delivery is done: commit/ack it.
    fn ack(self) -> impl Future<Output = Result<(), Error>> + Send;

    /// Give the delivery back unsettled so it is delivered again (shutdown,
    /// or a settle step that could not complete).
    fn release(self) -> impl Future<Output = Result<(), Error>> + Send;

    /// Publishes `letter` (built by the runtime: see
    /// [`DeadLetter`](crate::DeadLetter)) to this delivery's dead-letter
    /// destination and waits for the broker's confirmation. Does not ack:
    /// the runtime acks afterwards.
    fn publish_dead_letter(
        &mut self,
        letter: &Message,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// Publishes `copy` for redelivery after `copy.delay` and waits for the
    /// broker's confirmation. Does not ack: the runtime acks afterwards.
    fn publish_retry(&mut self, copy: &RetryCopy)
    -> impl Future<Output = Result<(), Error>> + Send;
}
