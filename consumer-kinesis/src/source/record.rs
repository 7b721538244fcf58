//! A record read from a shard, as the runtime's [`Envelope`].

use consumer_backend::{Channel, Envelope, Headers, Origin, Position};

use crate::client::ReadRecord;
use crate::envelope;

/// The position a record's envelope carries in its origin (and a dead
/// letter in `x-dlq-position`): `shard/sequence number`, such as
/// `shardId-000000000000/49590338271490256608559692538361571095921575989136588898`.
pub fn position_of(shard: &str, sequence_number: &str) -> String {
    format!("{shard}/{sequence_number}")
}

/// The shard and sequence number of a position this source wrote
/// ([`position_of`]); `None` for any other broker's position (a Kafka
/// `partition/offset`, an SQS message id, a delivery tag). Tools read it
/// to tell that a dead letter came from a Kinesis stream, wherever the
/// letter was sent.
pub fn shard_and_sequence(position: &str) -> Option<(&str, &str)> {
    let (shard, sequence) = position.split_once('/')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let shard_number = shard.strip_prefix("shardId-")?;
    (digits(shard_number) && digits(sequence)).then_some((shard, sequence))
}

/// The envelope of `record`, read from `shard` of the stream `channel`:
/// an enveloped record's headers, key and payload; a plain producer's
/// bytes keyed by the record's `PartitionKey`. An envelope that cannot be
/// read is a defect (poison, dead-lettered on its first attempt), never a
/// panic. A record without a `ce_id` gets `stream/shard/sequence number`,
/// the same on every read of it. A structured-mode CloudEvent over
/// `max_body` bytes is not parsed (the runtime dead-letters it as too
/// large).
pub(crate) fn envelope_of(
    channel: &Channel,
    shard: &str,
    record: &ReadRecord,
    max_body: usize,
) -> Envelope {
    let position = position_of(shard, &record.sequence_number);
    let origin = Origin {
        channel: channel.clone(),
        position: Position::from(position.clone()),
        ..Origin::default()
    };
    let fallback_id = || format!("{}/{position}", channel.as_str());
    match envelope::decode(&record.data, &record.partition_key) {
        Ok(message) => Envelope::from_parts_within(
            max_body,
            message.payload,
            message.headers,
            message.key,
            origin,
            fallback_id,
        ),
        Err(defect) => {
            let mut envelope = Envelope::from_parts_within(
                max_body,
                record.data.clone(),
                Headers::default(),
                Some(record.partition_key.clone()),
                origin,
                fallback_id,
            );
            envelope.defects.push(defect.into());
            envelope
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use consumer_backend::{Message, names};

    use super::*;

    #[test]
    fn a_kinesis_position_is_told_from_other_brokers_positions() {
        let p = position_of("shardId-000000000003", "4959033827149025660855969");
        assert_eq!(
            shard_and_sequence(&p),
            Some(("shardId-000000000003", "4959033827149025660855969"))
        );
        for other in [
            "0/42",
            "17",
            "3f2a-11",
            "shardId-x/12",
            "shardId-000000000001/",
            "",
        ] {
            assert_eq!(shard_and_sequence(other), None, "{other:?}");
        }
    }

    fn record(data: Vec<u8>) -> ReadRecord {
        ReadRecord {
            sequence_number: "4959".to_owned(),
            partition_key: "order-7".to_owned(),
            data: Bytes::from(data),
            arrival: None,
        }
    }

    #[test]
    fn a_plain_record_is_keyed_by_its_partition_key_with_a_stable_id() {
        let channel = Channel::from("orders");
        let e = envelope_of(
            &channel,
            "shardId-0",
            &record(b"{\"total\":3}".to_vec()),
            usize::MAX,
        );
        assert_eq!(e.key.as_deref(), Some("order-7"));
        assert_eq!(e.id, "orders/shardId-0/4959");
        assert!(e.defects.is_empty());
        assert_eq!(&e.payload[..], b"{\"total\":3}");
    }

    #[test]
    fn an_enveloped_record_keeps_its_headers_and_a_broken_one_is_poison() {
        let channel = Channel::from("orders");
        let message = Message::raw(&b"x"[..])
            .with_key("order-7")
            .with_header(names::ID, "e-1");
        let data = envelope::encode(&message).expect("fits");
        let e = envelope_of(&channel, "shardId-0", &record(data.clone()), usize::MAX);
        assert_eq!((e.id.as_str(), e.key.as_deref()), ("e-1", Some("order-7")));
        let broken = envelope_of(
            &channel,
            "shardId-0",
            &record(data[..7].to_vec()),
            usize::MAX,
        );
        assert_eq!(broken.defects.len(), 1, "{:?}", broken.defects);
        assert_eq!(broken.key.as_deref(), Some("order-7"));
    }
}
