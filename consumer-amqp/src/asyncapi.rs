//! How an AMQP source and publisher appear in the service's AsyncAPI
//! document (AMQP bindings 0.3.0): the work queue a source reads, its delay
//! queues (one channel, the bucket as the `delay` parameter), the
//! dead-letter exchange and its routing key, and each publisher
//! destination.

use consumer_backend::{ChannelDescription, SourceChannels};
use serde_json::{Value, json};

use crate::headers::AttributePrefix;
use crate::topology::{PartitionedTopology, Topology};

/// The AMQP bindings version written.
const BINDING_VERSION: &str = "0.3.0";

fn queue_binding(queue: &str) -> Value {
    json!({
        "is": "queue",
        "queue": { "name": queue, "durable": true, "exclusive": false, "autoDelete": false },
        "bindingVersion": BINDING_VERSION,
    })
}

fn routing_key_binding(exchange: &str, kind: Option<&str>) -> Value {
    let mut ex = json!({ "name": exchange, "durable": true, "autoDelete": false });
    if let Some(kind) = kind {
        ex["type"] = Value::String(kind.to_owned());
    }
    json!({ "is": "routingKey", "exchange": ex, "bindingVersion": BINDING_VERSION })
}

/// Publishes are persistent and mandatory, with confirms.
fn send_binding() -> Value {
    json!({ "deliveryMode": 2, "mandatory": true, "bindingVersion": BINDING_VERSION })
}

fn queue_channel(queue: &str, prefix: AttributePrefix) -> ChannelDescription {
    ChannelDescription::new("amqp", queue)
        .with_attribute_prefix(prefix.as_str())
        .with_binding(queue_binding(queue))
        .with_send_binding(send_binding())
}

/// The channels of a source over `topology`. Retry copies wait in a delay
/// queue (published through the default exchange, or, for a partitioned
/// topology's shared ones, through the bucket's `fanout` exchange with the
/// partition queue as routing key) and come back on the work queue; dead
/// letters go to the dead-letter exchange with the work queue's name as
/// routing key.
pub(crate) fn source_channels(topology: &Topology, prefix: AttributePrefix) -> SourceChannels {
    let input = queue_channel(topology.queue(), prefix)
        .with_receive_binding(json!({ "ack": true, "bindingVersion": BINDING_VERSION }));
    let delays = topology.delays();
    let retry_address = format!("{}.{{delay}}", delays.prefix());
    let binding = if delays.shared() {
        routing_key_binding(&retry_address, Some("fanout"))
    } else {
        queue_binding(&retry_address)
    };
    let mut delay = json!({
        "description": "The delay bucket: the smallest that holds the retry's delay. The copy returns to the work queue when it expires. There are as many as the longest delay of the consumer's handlers needs.",
    });
    let buckets: Vec<String> = topology
        .delay_queues()
        .iter()
        .map(|(bucket, _)| format!("{}ms", bucket.as_millis()))
        .collect();
    // Handlers that all retry in place need no delay queue: none is
    // declared, none described.
    let retry = (!buckets.is_empty()).then(|| {
        delay["enum"] = json!(buckets);
        ChannelDescription::new("amqp", retry_address)
            .with_attribute_prefix(prefix.as_str())
            .with_binding(binding)
            .with_send_binding(send_binding())
            .with_parameter("delay", delay)
    });
    let dead_letter = ChannelDescription::new("amqp", topology.queue())
        .with_attribute_prefix(prefix.as_str())
        .with_binding(routing_key_binding(
            topology.dead_letter_exchange(),
            Some("direct"),
        ))
        .with_send_binding(send_binding());
    SourceChannels {
        input,
        retry,
        retries_return_on_input: true,
        dead_letter: Some(dead_letter),
    }
}

/// The channels of a source over a partitioned topology: partition 0's,
/// with the partition number as the `partition` parameter in the work
/// queue's and the dead letters' addresses (`orders.p{partition}`; dead
/// letters go to the shared exchange with the partition queue as routing
/// key); the retry copies' channel is the shared delay exchanges'.
pub(crate) fn partitioned_source_channels(
    topology: &PartitionedTopology,
    prefix: AttributePrefix,
) -> SourceChannels {
    let mut channels = source_channels(&topology.partition(0), prefix);
    let first = topology.partition_queue(0);
    let template = format!("{}.p{{partition}}", topology.name());
    debug_assert!(channels.retries_return_on_input);
    let n = topology.partitions();
    for c in std::iter::once(&mut channels.input).chain(channels.dead_letter.as_mut()) {
        templated(c, &first, &template, n);
    }
    channels
}

/// `channel` with `first` (partition 0's queue) replaced by `template` in
/// its address and bindings, and the `partition` parameter declared.
fn templated(channel: &mut ChannelDescription, first: &str, template: &str, partitions: u32) {
    fn replace(v: &mut Value, from: &str, to: &str) {
        match v {
            Value::String(s) if s.starts_with(from) => *s = s.replacen(from, to, 1),
            Value::Array(a) => a.iter_mut().for_each(|v| replace(v, from, to)),
            Value::Object(o) => o.values_mut().for_each(|v| replace(v, from, to)),
            _ => {}
        }
    }
    if channel.address.starts_with(first) {
        channel.address = channel.address.replacen(first, template, 1);
    }
    for b in [
        &mut channel.binding,
        &mut channel.receive_binding,
        &mut channel.send_binding,
    ]
    .into_iter()
    .flatten()
    {
        replace(b, first, template);
    }
    let numbers: Vec<String> = (0..partitions).map(|p| p.to_string()).collect();
    channel.parameters.push((
        "partition".to_owned(),
        json!({
            "enum": numbers,
            "description": "The partition: Kafka's murmur2 of the message key, modulo the partition count, computed by the publishers.",
        }),
    ));
}

/// The channel of a publisher destination that is a partitioned queue: its
/// partition queues, the partition as a parameter.
pub(crate) fn partitioned_destination_channel(
    topology: &PartitionedTopology,
    prefix: AttributePrefix,
) -> ChannelDescription {
    let first = topology.partition_queue(0);
    let mut channel = queue_channel(&first, prefix);
    let template = format!("{}.p{{partition}}", topology.name());
    templated(&mut channel, &first, &template, topology.partitions());
    channel
}

/// The channel of a publisher destination: `exchange` (the message's key
/// as routing key), `exchange/routing-key`, or `/queue`.
pub(crate) fn destination_channel(
    destination: &str,
    prefix: AttributePrefix,
) -> ChannelDescription {
    match destination.split_once('/') {
        Some(("", queue)) => queue_channel(queue, prefix),
        Some((exchange, routing_key)) => ChannelDescription::new("amqp", routing_key)
            .with_attribute_prefix(prefix.as_str())
            .with_binding(routing_key_binding(exchange, None))
            .with_send_binding(send_binding()),
        None => ChannelDescription::new("amqp", destination)
            .with_attribute_prefix(prefix.as_str())
            .with_binding(routing_key_binding(destination, None))
            .with_send_binding(send_binding()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_reads_its_queue_retries_through_delay_queues_and_dead_letters_to_its_exchange() {
        let topology = Topology::new("orders").expect("valid");
        let in_place = source_channels(&topology, AttributePrefix::default());
        assert!(in_place.retry.is_none(), "no delay queue, no retry channel");
        topology
            .size_delays_for(std::time::Duration::from_secs(1))
            .expect("no cap");
        let channels = source_channels(&topology, AttributePrefix::default());
        assert_eq!(channels.input.address, "orders");
        let retry = channels.retry.expect("delay queues");
        assert_eq!(retry.address, "orders.retry.{delay}");
        assert!(channels.retries_return_on_input);
        let dlq = channels.dead_letter.expect("a dlx");
        assert_eq!(
            dlq.binding.expect("a binding")["exchange"]["name"],
            "orders.dlx"
        );
    }

    #[test]
    fn destinations_are_exchanges_routing_keys_or_queues() {
        let prefix = AttributePrefix::default();
        assert_eq!(
            destination_channel("/orders", prefix).binding.expect("b")["is"],
            "queue"
        );
        let keyed = destination_channel("events/orders", prefix);
        assert_eq!(keyed.address, "orders");
        assert_eq!(keyed.binding.expect("b")["exchange"]["name"], "events");
    }

    #[test]
    fn a_partitioned_source_names_its_partition_as_a_parameter() {
        let topology = PartitionedTopology::new("orders", 3).expect("valid");
        topology
            .size_delays_for(std::time::Duration::from_secs(1))
            .expect("no cap");
        let channels = partitioned_source_channels(&topology, AttributePrefix::default());
        assert_eq!(channels.input.address, "orders.p{partition}");
        let retry = channels.retry.expect("delay queues");
        assert_eq!(
            retry.address, "orders.retry.{delay}",
            "shared by the partitions"
        );
        assert_eq!(
            retry.binding.expect("a binding")["exchange"]["type"],
            "fanout"
        );
        let names: Vec<&str> = retry.parameters.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["delay"]);
        let dl = channels.dead_letter.expect("a dlx");
        assert_eq!(dl.address, "orders.p{partition}");
        assert_eq!(
            dl.binding.expect("a binding")["exchange"]["name"],
            "orders.dlx"
        );
        let out = partitioned_destination_channel(&topology, AttributePrefix::default());
        assert_eq!(out.address, "orders.p{partition}");
        assert_eq!(out.parameters[0].1["enum"], json!(["0", "1", "2"]));
    }
}
