//! How an SQS source and publisher appear in the service's AsyncAPI
//! document (SQS bindings 0.3.0): the queue a source reads, with its
//! redrive policy, and the dead-letter queue it sends letters to. Retries
//! stay on the queue (visibility), so there is no retry channel.

use consumer_backend::{ChannelDescription, SourceChannels};
use serde_json::{Value, json};

use crate::topology::Resolved;

const BINDING_VERSION: &str = "0.3.0";

fn queue_binding(name: &str, fifo: bool, redrive: Option<(&str, u32)>) -> Value {
    let mut queue = json!({ "name": name, "fifoQueue": fifo });
    if let Some((dlq, max)) = redrive {
        queue["redrivePolicy"] =
            json!({ "deadLetterQueue": { "name": dlq }, "maxReceiveCount": max });
    }
    json!({ "queue": queue, "bindingVersion": BINDING_VERSION })
}

/// A queue as a channel.
pub(crate) fn queue_channel(queue: &str, fifo: bool) -> ChannelDescription {
    ChannelDescription::new("sqs", queue).with_binding(queue_binding(queue, fifo, None))
}

/// The channels of a source over `queues`.
pub(crate) fn source_channels(q: &Resolved) -> SourceChannels {
    let input = ChannelDescription::new("sqs", q.queue.name()).with_binding(queue_binding(
        q.queue.name(),
        q.fifo,
        Some((q.dead_letter.name(), q.max_receive_count)),
    ));
    SourceChannels {
        input,
        retry: None,
        retries_return_on_input: true,
        dead_letter: Some(queue_channel(q.dead_letter.name(), q.dead_letter.is_fifo())),
    }
}
