//! Publishing with broker confirmation: what the outbox relay and the
//! backends' publishers implement.

use std::future::Future;

use crate::envelope::Message;
use crate::error::Error;

/// One message bound for one destination (topic, exchange/routing key, ...).
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// Where it goes; each backend documents how it reads this.
    pub destination: String,
    /// The message; its key is the partition key.
    pub message: Message,
}

/// Publishes with broker confirmation.
///
/// `publish` returns one result per message, in order, and only once the
/// broker has confirmed (or refused) every one of them: `Ok` means the
/// broker has taken responsibility for the message. Backends pipeline the
/// batch (many unconfirmed messages in flight) but keep the order of
/// messages with the same key and destination. An error says, through
/// [`Error::is_retriable`], whether publishing the same message again may
/// succeed (a broker that is down) or not (a message too large, no route).
pub trait Publisher: Send + Sync + 'static {
    /// `messaging.system` for spans and metrics: `kafka`, `rabbitmq`,
    /// `memory`, ...
    fn system(&self) -> &'static str;

    /// The channel messages for `destination` go to, for the service's
    /// AsyncAPI document. `None` (the default here) refuses the document
    /// with an error naming the relay and the destination.
    fn channel(&self, destination: &str) -> Option<crate::describe::ChannelDescription> {
        let _ = destination;
        None
    }

    /// Publishes `batch` and waits for every confirmation.
    fn publish(&self, batch: &[Outgoing]) -> impl Future<Output = Vec<Result<(), Error>>> + Send;
}
