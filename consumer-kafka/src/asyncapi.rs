//! How a Kafka source and publisher appear in the service's AsyncAPI
//! document: a channel per topic with the Kafka channel binding (0.5.0),
//! the consumer group on receive operations.

use consumer_backend::{ChannelDescription, SourceChannels};
use serde_json::json;

use crate::topics::Topics;

/// The Kafka bindings version written.
const BINDING_VERSION: &str = "0.5.0";

/// The channel of `topic`.
pub(crate) fn topic_channel(topic: &str) -> ChannelDescription {
    ChannelDescription::new("kafka", topic)
        .with_binding(json!({ "topic": topic, "bindingVersion": BINDING_VERSION }))
        .with_send_binding(json!({ "bindingVersion": BINDING_VERSION }))
}

/// The channels a source of `topics` reads as `group`: the topic and its
/// retry topic (both read), and the dead-letter topic.
pub(crate) fn source_channels(topics: &Topics, group: &str) -> SourceChannels {
    let read = |topic: &str| {
        topic_channel(topic).with_receive_binding(json!({
            "groupId": { "type": "string", "enum": [group] },
            "bindingVersion": BINDING_VERSION,
        }))
    };
    SourceChannels {
        input: read(topics.topic()),
        retry: topics.retry_topic().map(read),
        retries_return_on_input: false,
        dead_letter: Some(topic_channel(topics.dead_letter_topic())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_reads_its_topic_and_retry_topic_as_its_group_and_writes_the_dlq() {
        let topics = Topics::new("orders").expect("valid");
        let channels = source_channels(&topics, "billing");
        assert_eq!(channels.input.address, "orders");
        assert_eq!(
            channels.input.receive_binding.as_ref().expect("a group")["groupId"]["enum"][0],
            "billing"
        );
        assert_eq!(
            channels.retry.expect("a retry topic").address,
            "orders.retry"
        );
        assert_eq!(channels.dead_letter.expect("a dlq").address, "orders.dlq");
    }
}
