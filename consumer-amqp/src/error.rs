//! The crate's error type.

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong talking to RabbitMQ.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The connection or a channel failed, or RabbitMQ could not be reached.
    #[error("RabbitMQ {context} failed")]
    Amqp {
        /// What was being done.
        context: &'static str,
        /// The client library's error.
        #[source]
        source: lapin::Error,
    },
    /// A queue or exchange name that RabbitMQ would refuse or misread.
    #[error("invalid {what} name {name:?}: {reason}")]
    InvalidName {
        /// Queue, exchange, ...
        what: &'static str,
        /// The name given.
        name: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// The declared topology conflicts with what exists on the broker (a
    /// queue declared earlier with other arguments, say).
    #[error(
        "declaring {what} `{name}` failed: it exists with other settings, or the user may not declare it"
    )]
    Topology {
        /// Queue, exchange, binding.
        what: &'static str,
        /// Its name.
        name: String,
        /// The broker's refusal.
        #[source]
        source: lapin::Error,
    },
    /// The broker answered a publish with `basic.nack`: it could not take
    /// responsibility for the message (an internal error, a full queue).
    #[error(
        "RabbitMQ refused the message for exchange `{exchange}` with routing key `{routing_key}` (basic.nack)"
    )]
    Nacked {
        /// Exchange it was sent to.
        exchange: String,
        /// Its routing key.
        routing_key: String,
    },
    /// A `mandatory` publish matched no queue (`basic.return`): publishing
    /// it again will not help until the topology changes.
    #[error(
        "message for exchange `{exchange}` with routing key `{routing_key}` is unroutable: {reply}"
    )]
    Unroutable {
        /// Exchange it was sent to.
        exchange: String,
        /// Its routing key.
        routing_key: String,
        /// The broker's reply text (`NO_ROUTE`, ...).
        reply: String,
    },
    /// A header or property that AMQP 0-9-1 cannot carry (a name over 255
    /// bytes, say).
    #[error("message cannot be sent over AMQP 0-9-1: {0}")]
    Unencodable(String),
    /// The delivery's channel closed before it could be settled; RabbitMQ
    /// delivers it again.
    #[error("the channel of this delivery is closed; RabbitMQ redelivers it")]
    ChannelClosed,
}

impl Error {
    /// Whether the same operation may succeed later: the broker is down or
    /// restarting, a channel closed, the broker refused the message for now.
    /// Not retriable: bad names, topology conflicts, unroutable or
    /// unencodable messages.
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Amqp { .. } | Self::Nacked { .. } | Self::ChannelClosed => true,
            Self::InvalidName { .. }
            | Self::Topology { .. }
            | Self::Unroutable { .. }
            | Self::Unencodable(_) => false,
        }
    }

    pub(crate) fn amqp(context: &'static str) -> impl FnOnce(lapin::Error) -> Self {
        move |source| Self::Amqp { context, source }
    }
}

impl From<Error> for consumer_core::Error {
    fn from(e: Error) -> Self {
        let retriable = e.is_retriable();
        match e {
            Error::InvalidName { .. } => consumer_core::Error::Config(e.to_string()),
            e => consumer_core::Error::broker(e.to_string(), retriable, Some(Box::new(e))),
        }
    }
}
