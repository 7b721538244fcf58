//! Where a replayed letter goes, and the message it goes as.
//!
//! **RabbitMQ**: the work queue the letter was consumed from (its origin's
//! destination), through the default exchange, with a publisher confirm
//! and `mandatory` (a work queue that no longer exists is an error, not a
//! silent drop). Only the consumers of that queue see the copy; on a queue
//! routed to several handlers by event type, the router hands it to the
//! handler of its type, and any other handler's dedup row absorbs it.
//!
//! Kafka dead-letter topics are not replayed by this version: a topic is
//! shared by consumer groups, and the per-group route is still to build.

use consumer_amqp::AmqpPublisher;
use consumer_core::Message;
use consumer_core::envelope::{format_time, names};
use time::OffsetDateTime;

use crate::args::Services;
use crate::error::{Error, Result, redact};
use crate::letter::Letter;

/// The header a replayed copy carries: the id of the letter it replays.
pub const REPLAY_OF: &str = "x-replay-of";
/// When the copy was sent, RFC 3339.
pub const REPLAYED_AT: &str = "x-replayed-at";

/// The message a replay sends for `letter`: the original headers, key and
/// payload, the attempt count reset ([`consumer_core::DeadLetter::replay`]),
/// the original id pinned in `ce_id` (a message that had none got an id
/// hashed from its content and headers, which the replay headers would
/// change), and [`REPLAY_OF`] / [`REPLAYED_AT`].
pub fn replay_message(letter: &Letter) -> Message {
    let mut message = letter.letter.replay();
    if message.headers.get_bytes(names::ID).is_none() {
        message
            .headers
            .insert(names::ID, letter.letter.message_id.as_str());
    }
    message.headers.insert(REPLAY_OF, letter.id.as_str());
    message
        .headers
        .insert(REPLAYED_AT, format_time(OffsetDateTime::now_utc()));
    message
}

/// Sends replayed letters to the handlers' work queues on RabbitMQ.
#[derive(Debug)]
pub struct Route {
    url: String,
    publisher: AmqpPublisher,
}

impl Route {
    /// A route on the RabbitMQ the flags name (connected on first send).
    pub fn new(services: &Services) -> Self {
        Self {
            url: services.amqp_url.clone(),
            publisher: AmqpPublisher::new(services.amqp_url.clone())
                .with_connection_name("consumer-cli-replay"),
        }
    }

    /// Where `letter` goes, for messages and the journal.
    pub fn of(letter: &Letter) -> String {
        format!("queue {}", letter.letter.origin.destination)
    }

    /// Publishes the replay of `letter` and waits for its confirm.
    pub async fn send(&self, letter: &Letter) -> Result<()> {
        let queue = &letter.letter.origin.destination;
        consumer_amqp::validate_name("work queue", queue).map_err(|e| {
            Error::Other(format!(
                "letter {} cannot be replayed: its origin is not a RabbitMQ queue ({e})",
                letter.id
            ))
        })?;
        self.publisher
            .publish_to("", queue, &replay_message(letter), None)
            .await
            .map_err(|e| match e {
                consumer_amqp::Error::Amqp {
                    context: "connection",
                    source,
                } => crate::places::rabbitmq::unreachable(&self.url, &source),
                consumer_amqp::Error::Unroutable { .. } => Error::Broker(format!(
                    "work queue {queue} does not exist on {}: is the consumer of handler {} deployed there?",
                    redact(&self.url),
                    letter.letter.handler
                )),
                other => Error::Broker(format!("replaying {} to {queue}: {other}", letter.id)),
            })
    }

    /// Closes the connection.
    pub async fn close(&self) {
        self.publisher.close().await;
    }
}
