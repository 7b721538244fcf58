//! The crate's error type, and the kinds of broker failure the
//! framework's settle loop reads from it.

use consumer_backend::BrokerErrorKind;
use lapin::ErrorKind;
use lapin::protocol::{AMQPErrorKind, AMQPSoftError};

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
    /// The message is larger than the publisher's limit (which mirrors the
    /// broker's `max_message_size`): RabbitMQ would close the channel on it.
    #[error(
        "message of {size} bytes for routing key `{routing_key}` is over the limit of {limit} bytes"
    )]
    TooLarge {
        /// Its size: payload and headers.
        size: usize,
        /// The limit.
        limit: usize,
        /// Its routing key.
        routing_key: String,
    },
    /// The broker holds a partitioned queue with another number of
    /// partitions than this process was given: starting would send keys to
    /// other partitions than the running instances and break their order.
    #[error(
        "the partitioned queue `{queue}` has {found} partition queues on the broker ({queue}.p0 .. {queue}.p{last}), \
         but this process is configured with {configured}: keys would move to other partitions and lose their order. \
         Configure {found}, or change the count as the README's \"Changing the partition count\" says",
        last = found.saturating_sub(1)
    )]
    PartitionCount {
        /// The logical queue.
        queue: String,
        /// The count this process was given.
        configured: u32,
        /// The partition queues found on the broker.
        found: u32,
    },
    /// RabbitMQ did not answer a step of a source's start (the connection,
    /// a channel, a declare) within the topology's deadline
    /// ([`Topology::with_declare_timeout`](crate::Topology::with_declare_timeout)):
    /// the broker is overloaded or stuck. A start fails with it instead of
    /// hanging; a reconnect tries again.
    #[error(
        "RabbitMQ did not answer {what} `{name}` within {after:?}: the broker is overloaded or stuck \
         (`rabbitmqctl list_queues` says which queues are unresponsive)"
    )]
    NoAnswer {
        /// What was asked: "the declare of queue", "the connection to", ...
        what: &'static str,
        /// Its name.
        name: String,
        /// The deadline.
        after: std::time::Duration,
    },
    /// The delivery's channel closed before it could be settled; RabbitMQ
    /// delivers it again.
    #[error("the channel of this delivery is closed; RabbitMQ redelivers it")]
    ChannelClosed,
    /// RabbitMQ holds the queue with another type (`x-queue-type`) than this
    /// process declares, and answered the declare with `PRECONDITION_FAILED`.
    /// RabbitMQ cannot change a queue's type, and the framework converts
    /// nothing silently: the process refuses to start.
    #[error(
        "queue `{queue}` exists on the broker as a {found} queue, but this process declares it as a {declared} queue, \
         and RabbitMQ cannot change a queue's type. Either configure {found} queues again (`with_queue_type`), \
         or migrate: (1) stop the publishers (the outbox keeps what is written meanwhile); (2) let the consumers \
         drain {queues} (`consumer.queue.depth` at 0); (3) stop the consumers; (4) read or replay the dead letters, \
         then delete those queues (`rabbitmqctl delete_queue NAME`); (5) start consumers and publishers with \
         {declared} queues (https://docs.rs/consumer/latest/consumer/guide/rabbitmq_partitions/, \"Moving partition queues to quorum\")"
    )]
    QueueTypeMismatch {
        /// The queue RabbitMQ refused to declare again.
        queue: String,
        /// The type this process declares (`classic`, `quorum`).
        declared: &'static str,
        /// The type the broker holds, as its refusal says.
        found: String,
        /// The queues the migration must drain and delete, in words.
        queues: String,
    },
    /// RabbitMQ reports the queue's process gone and not restarted
    /// (`NOT_FOUND - queue '…' has crashed and failed to restart`, or
    /// `… process is stopped by supervisor`): the queue exists, but nothing
    /// can be consumed from or published to it until an operator restarts
    /// its node or deletes it. The sources report it (an ERROR log line and
    /// the `consumer.queue.crashed` gauge) and try again with backoff.
    #[error("RabbitMQ reports queue `{queue}` crashed: {reply}")]
    QueueCrashed {
        /// The queue.
        queue: String,
        /// RabbitMQ's reply.
        reply: String,
    },
    /// RabbitMQ refused the login (`403 ACCESS_REFUSED`): the user name or
    /// password is wrong, or the user may not use the virtual host.
    #[error(
        "RabbitMQ at {server} refused user `{user}`: a wrong user name or password, or no access to the virtual host ({reason})"
    )]
    AccessRefused {
        /// `host:port`.
        server: String,
        /// The user that tried.
        user: String,
        /// RabbitMQ's reply (it names no password).
        reason: String,
    },
    /// The TLS handshake with RabbitMQ failed: a certificate one side does
    /// not trust, or a port that does not speak TLS.
    #[error("RabbitMQ at {server}: the TLS handshake failed: {cause} ({reason})")]
    Tls {
        /// `host:port`.
        server: String,
        /// The cause, as a sentence.
        cause: &'static str,
        /// The TLS library's words.
        reason: String,
    },
    /// RabbitMQ closed the connection while a client certificate was being
    /// shown to it: what a broker that refuses the certificate does under
    /// TLS 1.3, where the client's side of the handshake is over before
    /// the broker checks the certificate. Retriable, as a connection reset
    /// for another reason is, but a start fails with it.
    #[error(
        "RabbitMQ at {server} closed the connection during the TLS handshake: it most likely refuses this client's certificate (not signed by a CA it trusts) ({reason})"
    )]
    TlsClosed {
        /// `host:port`.
        server: String,
        /// The I/O error.
        reason: String,
    },
    /// A TLS file of [`AmqpTls`](crate::AmqpTls) cannot be used.
    #[error("RabbitMQ: the {what} file {path} cannot be used: {reason}")]
    TlsFile {
        /// `CA certificate`, `client certificate`, `client key`.
        what: &'static str,
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The URI does not parse, or does not fit the settings given with it.
    #[error("RabbitMQ URI {uri} cannot be used: {reason}")]
    InvalidUri {
        /// The URI, without its password.
        uri: String,
        /// Why.
        reason: String,
    },
    /// An `amqps://` URI in a build without TLS.
    #[error(
        "RabbitMQ: {uri} is an amqps:// URI, and this build has no TLS: enable the `tls` feature of `consumer` (or of `consumer-amqp`)"
    )]
    NeedsTls {
        /// The URI, without its password.
        uri: String,
    },
}

impl Error {
    /// What kind of failure this is: the settle loop retries only
    /// [`BrokerErrorKind::Unavailable`] (the broker is down or restarting, a
    /// channel closed, a `basic.nack`), and takes its fallback for the rest
    /// (a message over the size limit, a route to nowhere, a refusal the
    /// broker gave when it closed the channel).
    pub fn kind(&self) -> BrokerErrorKind {
        match self {
            Self::Amqp { source, .. } => kind_of(source),
            Self::Nacked { .. }
            | Self::ChannelClosed
            | Self::QueueCrashed { .. }
            | Self::NoAnswer { .. }
            | Self::TlsClosed { .. } => BrokerErrorKind::Unavailable,
            Self::TooLarge { .. } => BrokerErrorKind::TooLarge,
            Self::Unroutable { .. } => BrokerErrorKind::NoDestination,
            Self::Unencodable(_) => BrokerErrorKind::Rejected,
            Self::InvalidName { .. }
            | Self::Topology { .. }
            | Self::PartitionCount { .. }
            | Self::QueueTypeMismatch { .. }
            | Self::Tls { .. }
            | Self::TlsFile { .. }
            | Self::InvalidUri { .. }
            | Self::NeedsTls { .. } => BrokerErrorKind::Fatal,
            Self::AccessRefused { .. } => BrokerErrorKind::NotAuthorized,
        }
    }

    /// Whether the same operation may succeed later: the broker is down or
    /// restarting, a channel closed, the broker refused the message for now.
    /// Not retriable: bad names, topology conflicts, unroutable, unencodable
    /// or oversize messages, refusals the broker closed the channel with.
    pub fn is_retriable(&self) -> bool {
        self.kind().is_retriable()
    }

    pub(crate) fn amqp(context: &'static str) -> impl FnOnce(lapin::Error) -> Self {
        move |source| Self::Amqp { context, source }
    }

    /// A declare of `what` `name` that failed: a [`Topology`](Self::Topology)
    /// conflict if RabbitMQ refused it (a channel-level error: the queue
    /// exists with other arguments, the user may not declare it); the
    /// connection's trouble otherwise (reset, heartbeat missed, closed
    /// while asking), which a reconnect heals: nothing was refused.
    pub(crate) fn declare(what: &'static str, name: &str) -> impl FnOnce(lapin::Error) -> Self {
        let name = name.to_owned();
        move |source| match source.kind() {
            ErrorKind::ProtocolError(amqp) if matches!(amqp.kind(), AMQPErrorKind::Soft(_)) => {
                Self::Topology { what, name, source }
            }
            _ => Self::Amqp {
                context: "topology declare",
                source,
            },
        }
    }
}

/// Whether RabbitMQ answered `405 RESOURCE_LOCKED`: another connection
/// holds the exclusive queue.
pub(crate) fn is_locked(error: &lapin::Error) -> bool {
    matches!(error.kind(), ErrorKind::ProtocolError(amqp)
        if matches!(amqp.kind(), AMQPErrorKind::Soft(AMQPSoftError::RESOURCELOCKED)))
}

/// Whether RabbitMQ answered `404 NOT_FOUND` because the queue does not
/// exist (a passive declare); a queue that exists but crashed is not
/// missing (see [`crashed_reply`]).
pub(crate) fn is_not_found(error: &lapin::Error) -> bool {
    matches!(error.kind(), ErrorKind::ProtocolError(amqp)
        if matches!(amqp.kind(), AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND)))
        && crashed_reply(error).is_none()
}

/// RabbitMQ's reply when it answered that a queue exists but its process is
/// gone and was not restarted: `NOT_FOUND - queue 'q' in vhost '/' has
/// crashed and failed to restart` (the single-active-consumer crash of
/// classic queues, rabbitmq-server#5460, ends there), or `… process is
/// stopped by supervisor`. The same reply answers a declare, a passive
/// declare and a `basic.consume`.
pub(crate) fn crashed_reply(error: &lapin::Error) -> Option<String> {
    let ErrorKind::ProtocolError(amqp) = error.kind() else {
        return None;
    };
    let text = amqp.get_message().as_str();
    let crashed = matches!(amqp.kind(), AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND))
        && (text.contains("has crashed and failed to restart")
            || text.contains("process is stopped by supervisor"));
    crashed.then(|| text.to_owned())
}

/// The queue type RabbitMQ says it holds when it refused a declare with
/// another `x-queue-type`: `PRECONDITION_FAILED - inequivalent arg
/// 'x-queue-type' for queue 'q' in vhost '/': received 'quorum' but current
/// is 'classic'` (or `… current is none`: declared without the argument,
/// which is a classic queue; or `… the value 'quorum' of type 'longstr'`).
pub(crate) fn queue_type_found(error: &lapin::Error) -> Option<String> {
    let ErrorKind::ProtocolError(amqp) = error.kind() else {
        return None;
    };
    if !matches!(
        amqp.kind(),
        AMQPErrorKind::Soft(AMQPSoftError::PRECONDITIONFAILED)
    ) {
        return None;
    }
    let text = amqp.get_message().as_str();
    if !text.contains("inequivalent arg 'x-queue-type'") {
        return None;
    }
    let current = text.rsplit_once("but current is ")?.1;
    Some(match current.split('\'').nth(1) {
        Some(kind) => kind.to_owned(),
        None => "classic (declared without x-queue-type)".to_owned(),
    })
}

/// The kind of a lapin error: the channel-closing refusals RabbitMQ gives a
/// publish (`406 PRECONDITION_FAILED` for a message over
/// `max_message_size`, `404 NOT_FOUND` for a missing exchange,
/// `403 ACCESS_REFUSED`) cannot heal; connection trouble can.
fn kind_of(error: &lapin::Error) -> BrokerErrorKind {
    let ErrorKind::ProtocolError(amqp) = error.kind() else {
        return BrokerErrorKind::Unavailable;
    };
    match amqp.kind() {
        AMQPErrorKind::Soft(AMQPSoftError::PRECONDITIONFAILED)
            if amqp.get_message().as_str().contains("larger than") =>
        {
            BrokerErrorKind::TooLarge
        }
        AMQPErrorKind::Soft(AMQPSoftError::CONTENTTOOLARGE) => BrokerErrorKind::TooLarge,
        // The queue is there and may come back (an operator restarts its
        // node or deletes and declares it again).
        AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND) if crashed_reply(error).is_some() => {
            BrokerErrorKind::Unavailable
        }
        AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND | AMQPSoftError::NOROUTE) => {
            BrokerErrorKind::NoDestination
        }
        AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED) => BrokerErrorKind::NotAuthorized,
        AMQPErrorKind::Soft(AMQPSoftError::PRECONDITIONFAILED) => BrokerErrorKind::Rejected,
        _ => BrokerErrorKind::Unavailable,
    }
}

impl From<Error> for consumer_backend::Error {
    fn from(e: Error) -> Self {
        // The context is this error's message; its cause chain goes on
        // from lapin's error, so nothing is said twice.
        let source: Option<consumer_backend::BoxError> = match &e {
            Error::Amqp { source, .. } | Error::Topology { source, .. } => {
                Some(Box::new(source.clone()))
            }
            _ => None,
        };
        match e {
            Error::InvalidName { .. }
            | Error::PartitionCount { .. }
            | Error::QueueTypeMismatch { .. }
            | Error::TlsFile { .. }
            | Error::InvalidUri { .. }
            | Error::NeedsTls { .. } => consumer_backend::Error::Config(e.to_string()),
            e => consumer_backend::Error::broker(e.kind(), e.to_string(), source),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_do_not_heal_and_connection_trouble_does() {
        let too_large = Error::TooLarge {
            size: 10,
            limit: 5,
            routing_key: "q".into(),
        };
        let core: consumer_backend::Error = too_large.into();
        assert!(core.is_too_large(), "{core}");
        let unroutable = Error::Unroutable {
            exchange: "x".into(),
            routing_key: "q".into(),
            reply: "NO_ROUTE".into(),
        };
        assert_eq!(unroutable.kind(), BrokerErrorKind::NoDestination);
        assert!(Error::ChannelClosed.is_retriable());
        let nacked = Error::Nacked {
            exchange: "x".into(),
            routing_key: "q".into(),
        };
        assert!(nacked.is_retriable(), "a nack is a refusal for now");
    }

    #[test]
    fn a_declare_the_link_broke_under_heals_and_a_refused_one_does_not() {
        // Found by the fault campaign (tests/campaign.rs, seed 2): a
        // consumer restarted under a stalled link stopped for good with
        // "exists with other settings".
        let reset = lapin::Error::from(ErrorKind::IOError(std::sync::Arc::new(
            std::io::Error::from(std::io::ErrorKind::ConnectionReset),
        )));
        let broke = Error::declare("queue", "orders.p3")(reset);
        assert!(matches!(broke, Error::Amqp { .. }), "{broke:?}");
        assert!(broke.is_retriable(), "{broke}");
        let refused = Error::declare("queue", "orders.p3")(refusal(
            AMQPSoftError::PRECONDITIONFAILED,
            "PRECONDITION_FAILED - inequivalent arg 'x-expires' for queue 'orders.p3'",
        ));
        assert!(matches!(refused, Error::Topology { .. }), "{refused:?}");
        assert!(!refused.is_retriable(), "{refused}");
    }

    fn refusal(code: AMQPSoftError, text: &str) -> lapin::Error {
        lapin::Error::from(ErrorKind::ProtocolError(lapin::protocol::AMQPError::new(
            AMQPErrorKind::Soft(code),
            text.into(),
        )))
    }

    #[test]
    fn a_crashed_queue_is_told_from_a_missing_one() {
        let crashed = refusal(
            AMQPSoftError::NOTFOUND,
            "NOT_FOUND - queue 'orders.p2' in vhost '/' has crashed and failed to restart",
        );
        assert!(crashed_reply(&crashed).is_some());
        assert!(!is_not_found(&crashed), "a crashed queue exists");
        assert_eq!(
            kind_of(&crashed),
            BrokerErrorKind::Unavailable,
            "it can come back"
        );
        let stopped = refusal(
            AMQPSoftError::NOTFOUND,
            "NOT_FOUND - queue 'orders.p2' in vhost '/' process is stopped by supervisor",
        );
        assert!(crashed_reply(&stopped).is_some());
        let missing = refusal(
            AMQPSoftError::NOTFOUND,
            "NOT_FOUND - no queue 'orders.p9' in vhost '/'",
        );
        assert!(crashed_reply(&missing).is_none());
        assert!(is_not_found(&missing));
        assert_eq!(kind_of(&missing), BrokerErrorKind::NoDestination);
    }

    #[test]
    fn the_queue_type_on_the_broker_is_read_from_the_refusal() {
        let found =
            |text: &str| queue_type_found(&refusal(AMQPSoftError::PRECONDITIONFAILED, text));
        // RabbitMQ 3.10.8's replies.
        assert_eq!(
            found(
                "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'q' in vhost '/': \
                 received 'quorum' but current is 'classic'"
            )
            .as_deref(),
            Some("classic")
        );
        assert_eq!(
            found(
                "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'q' in vhost '/': \
                 received none but current is the value 'quorum' of type 'longstr'"
            )
            .as_deref(),
            Some("quorum")
        );
        assert!(
            found(
                "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'q' in vhost '/': \
                 received the value 'quorum' of type 'longstr' but current is none"
            )
            .is_some_and(|t| t.starts_with("classic"))
        );
        assert_eq!(
            found(
                "PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue 'q' in vhost '/': \
                 received '10' but current is '20'"
            ),
            None,
            "another argument is another conflict"
        );
    }
}
