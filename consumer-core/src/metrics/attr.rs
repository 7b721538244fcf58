//! Attribute keys and the closed sets of their values.
//!
//! Keys from the OpenTelemetry semantic conventions (v1.44.0) keep their
//! names; ours start with `consumer.`. No attribute ever carries a message
//! id, a partition key or an offset: every value comes from configuration
//! (topics, queues, groups, tables), from code (handler names) or from a
//! closed set below, so the number of series does not grow with traffic.

/// `messaging.system`: `kafka`, `rabbitmq`, `memory`.
pub const MESSAGING_SYSTEM: &str = "messaging.system";
/// `messaging.operation.name`: see [`operation`].
pub const OPERATION_NAME: &str = "messaging.operation.name";
/// `messaging.operation.type`: `process`, `settle`, `send`.
pub const OPERATION_TYPE: &str = "messaging.operation.type";
/// `messaging.destination.name`: the topic or queue.
pub const DESTINATION_NAME: &str = "messaging.destination.name";
/// `messaging.destination.partition.id`: only on per-partition gauges,
/// whose series go away with the partition.
pub const PARTITION_ID: &str = "messaging.destination.partition.id";
/// `messaging.consumer.group.name`: the Kafka consumer group.
pub const CONSUMER_GROUP: &str = "messaging.consumer.group.name";
/// `error.type`, only on failure: see [`error_type`].
pub const ERROR_TYPE: &str = "error.type";
/// `server.address`: the broker the source was configured with.
pub const SERVER_ADDRESS: &str = "server.address";
/// `server.port`.
pub const SERVER_PORT: &str = "server.port";
/// `db.system.name`: `postgresql`, `sqlite`.
pub const DB_SYSTEM: &str = "db.system.name";

/// `consumer.handler`: the handler's name (from code, never from input).
pub const HANDLER: &str = "consumer.handler";
/// `consumer.dead_letter.reason`: `poison`, `terminal`, `exhausted`.
pub const DEAD_LETTER_REASON: &str = "consumer.dead_letter.reason";
/// `consumer.circuit.state`: what a handler's circuit went to, `open` or
/// `closed`.
pub const CIRCUIT_STATE: &str = "consumer.circuit.state";
/// `consumer.retry.mode`: `in_place`, `redeliver`.
pub const RETRY_MODE: &str = "consumer.retry.mode";
/// `consumer.settle.fallback`: see [`fallback`].
pub const SETTLE_FALLBACK: &str = "consumer.settle.fallback";
/// `consumer.queue.role`: `work`, `delay`.
pub const QUEUE_ROLE: &str = "consumer.queue.role";
/// `consumer.rebalance.event`: `assigned`, `revoked`, `lost`.
pub const REBALANCE_EVENT: &str = "consumer.rebalance.event";
/// `consumer.outbox.table`: the outbox table a relay reads.
pub const OUTBOX_TABLE: &str = "consumer.outbox.table";

/// Values of `messaging.operation.name`.
pub mod operation {
    /// A delivery handed to the application
    /// (`messaging.client.consumed.messages`).
    pub const RECEIVE: &str = "receive";
    /// One attempt of a handler (`messaging.process.duration`).
    pub const PROCESS: &str = "process";
    /// The delivery is done (settle).
    pub const ACK: &str = "ack";
    /// The delivery goes back unsettled, to come again (settle).
    pub const RELEASE: &str = "release";
    /// The dead letter is published, confirmed by the broker (settle).
    pub const DEAD_LETTER: &str = "dead_letter";
    /// The retry copy is published, confirmed by the broker (settle).
    pub const RETRY: &str = "retry";
    /// An outbox event is published by the relay (send).
    pub const SEND: &str = "send";
}

/// Values of `error.type`: a closed set, documented here as the
/// conventions ask.
///
/// On `messaging.process.duration` (why the attempt failed):
/// [`POISON`](error_type::POISON), [`TERMINAL`](error_type::TERMINAL),
/// [`TRANSIENT`](error_type::TRANSIENT), [`PANIC`](error_type::PANIC).
///
/// On `messaging.client.operation.duration` and
/// `messaging.client.sent.messages` (why the broker or the store refused):
/// [`UNAVAILABLE`](error_type::UNAVAILABLE),
/// [`TOO_LARGE`](error_type::TOO_LARGE),
/// [`NO_DESTINATION`](error_type::NO_DESTINATION),
/// [`NOT_AUTHORIZED`](error_type::NOT_AUTHORIZED),
/// [`REJECTED`](error_type::REJECTED), [`FATAL`](error_type::FATAL), and
/// [`OTHER`](error_type::OTHER) for an error that is not the broker's (the
/// database behind the dead-letter table, a configuration error).
pub mod error_type {
    /// The message cannot be handled as it is (undecodable, malformed
    /// headers, oversize, unknown type).
    pub const POISON: &str = "poison";
    /// The handler said retrying cannot help.
    pub const TERMINAL: &str = "terminal";
    /// The handler failed in a way a later attempt may not.
    pub const TRANSIENT: &str = "transient";
    /// The handler panicked.
    pub const PANIC: &str = "panic";
    /// The broker or its connection is down, or the send timed out.
    pub const UNAVAILABLE: &str = "unavailable";
    /// The broker refused the message for its size.
    pub const TOO_LARGE: &str = "too_large";
    /// The destination does not exist.
    pub const NO_DESTINATION: &str = "no_destination";
    /// The credentials may not write there.
    pub const NOT_AUTHORIZED: &str = "not_authorized";
    /// The broker refused the message for another reason.
    pub const REJECTED: &str = "rejected";
    /// The client cannot go on (fenced, misconfigured).
    pub const FATAL: &str = "fatal";
    /// Any other error (the conventions' fallback value).
    pub const OTHER: &str = "_OTHER";
}

/// Values of `consumer.settle.fallback`: what the runtime did instead
/// when a settle step could not succeed.
pub mod fallback {
    /// The dead letter was refused for its size and sent again without
    /// its payload.
    pub const DEAD_LETTER_WITHOUT_PAYLOAD: &str = "dead_letter_without_payload";
    /// The broker refused the dead letter; it went to the store's
    /// dead-letter table.
    pub const DEAD_LETTER_TO_STORE: &str = "dead_letter_to_store";
    /// The broker refused the retry copy; the retry ran in place.
    pub const RETRY_IN_PLACE: &str = "retry_in_place";
    /// Nothing took the dead letter; the delivery is held (its key's later
    /// messages wait behind it) and the letter tried again (logged at
    /// ERROR, once per try).
    pub const HOLD: &str = "hold";
}
