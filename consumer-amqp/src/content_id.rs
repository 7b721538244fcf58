//! The id of an AMQP message that carries none of its own.

use crate::headers::{Received, value_bytes};

/// The id of a message its producer gave none: a hash of what does not
/// change when RabbitMQ delivers it again (exchange, routing key, headers,
/// payload). The delivery tag changes on every delivery and cannot serve.
/// Two messages with the same body and headers and no id therefore count
/// as one for dedup; producers that can send the same content twice on
/// purpose must set an id (`ce_id` or `message-id`).
pub(crate) fn content_id(delivery: &Received<'_>, payload: &[u8]) -> String {
    let mut h = Fnv128::new();
    h.field(delivery.exchange.as_bytes());
    h.field(delivery.routing_key.as_bytes());
    if let Some(table) = delivery.properties.headers() {
        // Added by the broker, not part of the message itself: on
        // dead-lettering (`x-death`, `x-first-death-*`) and, on quorum
        // queues, on every redelivery (`x-delivery-count`), which would
        // otherwise give a redelivered message another id.
        for (name, value) in table {
            let name_str = name.as_str();
            if name_str == "x-death"
                || name_str == "x-delivery-count"
                || name_str.starts_with("x-first-death")
            {
                continue;
            }
            h.field(name.as_str().as_bytes());
            h.field(&value_bytes(value).unwrap_or_default());
        }
    }
    h.field(payload);
    format!("amqp-{:032x}", h.0)
}

/// FNV-1a, 128 bits: stable across builds and platforms, unlike std's hasher.
struct Fnv128(u128);

impl Fnv128 {
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013B;
    const OFFSET: u128 = 0x6C62_272E_07BB_0142_62B8_2175_6295_C58D;

    fn new() -> Self {
        Self(Self::OFFSET)
    }

    /// Length-prefixed, so ("ab", "c") and ("a", "bc") differ.
    fn field(&mut self, bytes: &[u8]) {
        for b in (bytes.len() as u64).to_le_bytes().iter().chain(bytes) {
            self.0 ^= u128::from(*b);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }
}
