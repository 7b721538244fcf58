//! The id of an AMQP message that carries none of its own.

use lapin::types::{AMQPValue, FieldTable, ShortString};

use consumer_backend::names;

use crate::headers::Received;

/// The id of a message its producer gave none: a hash of everything its
/// publisher set, and of nothing RabbitMQ adds or changes when it delivers
/// it again, requeues or dead-letters it.
///
/// Covered: the exchange and routing key it was published with, every
/// basic property but the headers (`content-type`, `correlation-id`,
/// `timestamp`, `app-id`, ...), every header with its AMQP type (`1` the
/// integer and `"1"` the string differ, tables and arrays are covered to
/// the leaf), and the payload. Left out: the delivery tag and the
/// `redelivered` flag, which change on every delivery, the headers
/// RabbitMQ writes (`x-death`, `x-first-death-*`, `x-last-death-*`,
/// `x-delivery-count`) and the framework's attempt headers
/// (`x-consumer-attempt`, `x-consumer-first-failure`, `x-consumer-due`),
/// which say how often a message was tried, not which message it is. A
/// dead-lettered copy is hashed with what it had before its first
/// dead-lettering (`x-first-death-exchange`, the routing keys and
/// `original-expiration` of that `x-death` entry), so it keeps its id.
///
/// Two messages with the same content and no id therefore count as one for
/// dedup; producers that can send the same content twice on purpose must
/// set an id (`ce_id` or `message-id`).
pub(crate) fn content_id(delivery: &Received<'_>, payload: &[u8]) -> String {
    let props = delivery.properties;
    let headers = props.headers().as_ref();
    let first_death = headers.and_then(FirstDeath::of);

    let mut h = Fnv128::new();
    // A version tag: a change to what is hashed must not make old and new
    // ids of different messages meet.
    h.field(b"amqp-content-id/2");
    match &first_death {
        Some(d) => {
            h.field(d.exchange.as_bytes());
            h.optional(b'k', d.routing_key.as_deref().map(str::as_bytes));
        }
        None => {
            h.field(delivery.exchange.as_bytes());
            h.optional(b'k', Some(delivery.routing_key.as_bytes()));
        }
    }
    let expiration = match &first_death {
        Some(d) if props.expiration().is_none() => d.original_expiration.as_ref(),
        _ => props.expiration().as_ref(),
    };
    for (tag, property) in [
        (b'c', props.content_type().as_ref()),
        (b'e', props.content_encoding().as_ref()),
        (b'r', props.correlation_id().as_ref()),
        (b'y', props.reply_to().as_ref()),
        (b'x', expiration),
        (b'm', props.message_id().as_ref()),
        (b'K', props.kind().as_ref()),
        (b'u', props.user_id().as_ref()),
        (b'a', props.app_id().as_ref()),
        (b'l', props.cluster_id().as_ref()),
    ] {
        h.optional(tag, property.map(|s| s.as_str().as_bytes()));
    }
    h.optional(
        b'd',
        props.delivery_mode().map(|n| [n]).as_ref().map(|b| &b[..]),
    );
    h.optional(b'p', props.priority().map(|n| [n]).as_ref().map(|b| &b[..]));
    h.optional(
        b't',
        props
            .timestamp()
            .map(u64::to_le_bytes)
            .as_ref()
            .map(|b| &b[..]),
    );
    match headers {
        None => h.field(b"no headers"),
        Some(table) => {
            let kept: Vec<_> = table
                .into_iter()
                .filter(|(name, _)| !set_on_delivery(name.as_str()))
                .collect();
            h.field(&(kept.len() as u64).to_le_bytes());
            for (name, value) in kept {
                h.field(name.as_str().as_bytes());
                h.value(value);
            }
        }
    }
    h.field(payload);
    format!("amqp-{:032x}", h.0)
}

/// Headers RabbitMQ adds or rewrites when it dead-letters a message (`x-death`,
/// `x-first-death-*`, `x-last-death-*`) or, on quorum queues, hands it out
/// again (`x-delivery-count`), and the attempt headers the framework's retry
/// copies carry.
fn set_on_delivery(name: &str) -> bool {
    matches!(
        name,
        "x-death" | "x-delivery-count" | names::ATTEMPT | names::FIRST_FAILURE | names::DUE
    ) || name.starts_with("x-first-death-")
        || name.starts_with("x-last-death-")
}

/// What a dead-lettered message was published with before RabbitMQ first
/// dead-lettered it (RabbitMQ replaces the exchange, may replace the routing
/// key and removes `expiration`, keeping the originals in `x-death`).
struct FirstDeath {
    exchange: String,
    /// The first of its `routing-keys` (the others are its `CC` keys).
    routing_key: Option<String>,
    original_expiration: Option<ShortString>,
}

impl FirstDeath {
    fn of(headers: &FieldTable) -> Option<Self> {
        let text = |table: &FieldTable, name: &str| match table.inner().get(name)? {
            AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
            AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
            _ => None,
        };
        let exchange = text(headers, "x-first-death-exchange")?;
        let queue = text(headers, "x-first-death-queue");
        let reason = text(headers, "x-first-death-reason");
        // One `x-death` entry per (queue, reason); the first death's entry
        // holds the routing keys the publisher used.
        let entry = match headers.inner().get("x-death") {
            Some(AMQPValue::FieldArray(deaths)) => deaths.as_slice().iter().find_map(|d| match d {
                AMQPValue::FieldTable(t)
                    if text(t, "queue") == queue && text(t, "reason") == reason =>
                {
                    Some(t)
                }
                _ => None,
            }),
            _ => None,
        };
        let routing_key = match entry.and_then(|t| t.inner().get("routing-keys")) {
            Some(AMQPValue::FieldArray(keys)) => keys.as_slice().first().and_then(|k| match k {
                AMQPValue::LongString(s) => {
                    Some(String::from_utf8_lossy(s.as_bytes()).into_owned())
                }
                AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
                _ => None,
            }),
            _ => None,
        };
        let original_expiration = entry
            .and_then(|t| text(t, "original-expiration"))
            .and_then(|s| ShortString::try_new(s).ok());
        Some(Self {
            exchange,
            routing_key,
            original_expiration,
        })
    }
}

/// FNV-1a, 128 bits: stable across builds and platforms, unlike std's hasher.
struct Fnv128(u128);

impl Fnv128 {
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013B;
    const OFFSET: u128 = 0x6C62_272E_07BB_0142_62B8_2175_6295_C58D;

    fn new() -> Self {
        Self(Self::OFFSET)
    }

    fn byte(&mut self, b: u8) {
        self.0 ^= u128::from(b);
        self.0 = self.0.wrapping_mul(Self::PRIME);
    }

    /// Length-prefixed, so ("ab", "c") and ("a", "bc") differ.
    fn field(&mut self, bytes: &[u8]) {
        for b in (bytes.len() as u64).to_le_bytes().iter().chain(bytes) {
            self.byte(*b);
        }
    }

    /// Absent and empty differ.
    fn optional(&mut self, tag: u8, bytes: Option<&[u8]>) {
        self.byte(tag);
        match bytes {
            None => self.byte(0),
            Some(b) => {
                self.byte(1);
                self.field(b);
            }
        }
    }

    /// A header value with its AMQP type, so `1` and `"1"` differ, and
    /// tables and arrays to the leaf.
    fn value(&mut self, value: &AMQPValue) {
        match value {
            AMQPValue::Boolean(b) => self.tagged(b't', &[u8::from(*b)]),
            AMQPValue::ShortShortInt(n) => self.tagged(b'b', &n.to_le_bytes()),
            AMQPValue::ShortShortUInt(n) => self.tagged(b'B', &n.to_le_bytes()),
            AMQPValue::ShortInt(n) => self.tagged(b'U', &n.to_le_bytes()),
            AMQPValue::ShortUInt(n) => self.tagged(b'u', &n.to_le_bytes()),
            AMQPValue::LongInt(n) => self.tagged(b'I', &n.to_le_bytes()),
            AMQPValue::LongUInt(n) => self.tagged(b'i', &n.to_le_bytes()),
            AMQPValue::LongLongInt(n) => self.tagged(b'l', &n.to_le_bytes()),
            AMQPValue::Float(n) => self.tagged(b'f', &n.to_bits().to_le_bytes()),
            AMQPValue::Double(n) => self.tagged(b'd', &n.to_bits().to_le_bytes()),
            AMQPValue::DecimalValue(d) => {
                let mut b = [0; 5];
                b[0] = d.scale;
                b[1..].copy_from_slice(&d.value.to_le_bytes());
                self.tagged(b'D', &b);
            }
            AMQPValue::ShortString(s) => self.tagged(b's', s.as_str().as_bytes()),
            AMQPValue::LongString(s) => self.tagged(b'S', s.as_bytes()),
            AMQPValue::ByteArray(b) => self.tagged(b'x', b.as_slice()),
            AMQPValue::Timestamp(n) => self.tagged(b'T', &n.to_le_bytes()),
            AMQPValue::Void => self.tagged(b'V', &[]),
            AMQPValue::FieldArray(items) => {
                let items = items.as_slice();
                self.tagged(b'A', &(items.len() as u64).to_le_bytes());
                for item in items {
                    self.value(item);
                }
            }
            AMQPValue::FieldTable(table) => {
                let entries = table.inner();
                self.tagged(b'F', &(entries.len() as u64).to_le_bytes());
                // A BTreeMap: the same entries in any wire order hash alike.
                for (name, item) in entries {
                    self.field(name.as_str().as_bytes());
                    self.value(item);
                }
            }
        }
    }

    fn tagged(&mut self, tag: u8, bytes: &[u8]) {
        self.byte(tag);
        self.field(bytes);
    }
}

#[cfg(test)]
mod tests {
    use lapin::BasicProperties;
    use lapin::types::{DecimalValue, FieldArray, LongString};

    use super::*;

    fn id_of(exchange: &str, routing_key: &str, props: &BasicProperties, payload: &[u8]) -> String {
        let received = Received {
            exchange,
            routing_key,
            delivery_tag: 1,
            properties: props,
        };
        content_id(&received, payload)
    }

    fn with(headers: &[(&str, AMQPValue)]) -> BasicProperties {
        let mut t = FieldTable::default();
        for (name, value) in headers {
            t.insert((*name).into(), value.clone());
        }
        BasicProperties::default().with_headers(t)
    }

    fn text(s: &str) -> AMQPValue {
        AMQPValue::LongString(LongString::from(s))
    }

    fn table(entries: &[(&str, AMQPValue)]) -> AMQPValue {
        let mut t = FieldTable::default();
        for (name, value) in entries {
            t.insert((*name).into(), value.clone());
        }
        AMQPValue::FieldTable(t)
    }

    #[test]
    fn header_values_are_hashed_with_their_type() {
        let int = id_of("", "q", &with(&[("n", AMQPValue::LongInt(1))]), b"{}");
        let string = id_of("", "q", &with(&[("n", text("1"))]), b"{}");
        let wider = id_of("", "q", &with(&[("n", AMQPValue::LongLongInt(1))]), b"{}");
        let boolean = id_of("", "q", &with(&[("n", AMQPValue::Boolean(true))]), b"{}");
        let true_text = id_of("", "q", &with(&[("n", text("true"))]), b"{}");
        assert_ne!(int, string);
        assert_ne!(int, wider);
        assert_ne!(boolean, true_text);
    }

    #[test]
    fn tables_arrays_and_decimals_are_covered() {
        let nested = |n: i32| with(&[("t", table(&[("a", AMQPValue::LongInt(n))]))]);
        assert_ne!(
            id_of("", "q", &nested(1), b""),
            id_of("", "q", &nested(2), b"")
        );
        assert_eq!(
            id_of("", "q", &nested(1), b""),
            id_of("", "q", &nested(1), b"")
        );
        let array =
            |items: Vec<AMQPValue>| with(&[("a", AMQPValue::FieldArray(FieldArray::from(items)))]);
        assert_ne!(
            id_of("", "q", &array(vec![text("x")]), b""),
            id_of("", "q", &array(vec![text("y")]), b"")
        );
        assert_ne!(
            id_of("", "q", &array(vec![text("x"), text("y")]), b""),
            id_of("", "q", &array(vec![text("xy")]), b"")
        );
        assert_ne!(
            id_of("", "q", &array(vec![]), b""),
            id_of("", "q", &with(&[("a", table(&[]))]), b"")
        );
        let decimal = |value| {
            with(&[(
                "d",
                AMQPValue::DecimalValue(DecimalValue { scale: 2, value }),
            )])
        };
        assert_ne!(
            id_of("", "q", &decimal(1), b""),
            id_of("", "q", &decimal(2), b"")
        );
        assert_ne!(
            id_of("", "q", &with(&[("v", AMQPValue::Void)]), b""),
            id_of("", "q", &with(&[]), b"")
        );
    }

    #[test]
    fn publisher_set_properties_are_covered() {
        let plain = BasicProperties::default();
        let base = id_of("", "q", &plain, b"{}");
        let variants = [
            plain.clone().with_content_type("application/json".into()),
            plain.clone().with_content_encoding("gzip".into()),
            plain.clone().with_correlation_id("c-1".into()),
            plain.clone().with_reply_to("replies".into()),
            plain.clone().with_expiration("60000".into()),
            plain.clone().with_message_id("".into()),
            plain.clone().with_type("OrderPlaced".into()),
            plain.clone().with_user_id("guest".into()),
            plain.clone().with_app_id("shop".into()),
            plain.clone().with_cluster_id("c".into()),
            plain.clone().with_delivery_mode(2),
            plain.clone().with_priority(5),
            plain.clone().with_timestamp(1_700_000_000),
            plain.clone().with_headers(FieldTable::default()),
        ];
        let mut seen = vec![base];
        for props in &variants {
            let id = id_of("", "q", props, b"{}");
            assert!(!seen.contains(&id), "{props:?} collides");
            seen.push(id);
        }
        // Same text in two properties is still two messages.
        assert_ne!(
            id_of("", "q", &plain.clone().with_app_id("x".into()), b""),
            id_of("", "q", &plain.clone().with_user_id("x".into()), b"")
        );
        assert_ne!(id_of("", "q", &plain, b"a"), id_of("", "q", &plain, b"b"));
        assert_ne!(id_of("ex", "q", &plain, b""), id_of("", "q", &plain, b""));
        assert_ne!(id_of("", "q", &plain, b""), id_of("", "r", &plain, b""));
    }

    #[test]
    fn headers_set_on_redelivery_or_by_retries_are_left_out() {
        let published = [("x-tenant", text("acme"))];
        let first = id_of("", "q", &with(&published), b"{}");
        for (name, value) in [
            ("x-delivery-count", AMQPValue::LongLongInt(3)),
            ("x-last-death-reason", text("rejected")),
            ("x-last-death-queue", text("q")),
            ("x-last-death-exchange", text("")),
            (names::ATTEMPT, text("2")),
            (names::FIRST_FAILURE, text("2026-01-01T00:00:00Z")),
            (names::DUE, text("2026-01-01T00:01:00Z")),
        ] {
            let again = id_of(
                "",
                "q",
                &with(&[published[0].clone(), (name, value)]),
                b"{}",
            );
            assert_eq!(first, again, "{name} changed the id");
        }
        // Only those: a publisher's own `x-` header is part of the message.
        let other = id_of(
            "",
            "q",
            &with(&[published[0].clone(), ("x-deathly", text("1"))]),
            b"{}",
        );
        assert_ne!(first, other);
    }

    #[test]
    fn a_dead_lettered_copy_keeps_the_id_it_was_published_with() {
        let published = BasicProperties::default()
            .with_expiration("5000".into())
            .with_headers({
                let mut t = FieldTable::default();
                t.insert("x-tenant".into(), text("acme"));
                t
            });
        let first = id_of("orders.in", "order.placed", &published, b"{}");
        // What RabbitMQ delivers from the dead-letter queue: another exchange
        // and routing key, `expiration` moved into `x-death`.
        let death = table(&[
            ("count", AMQPValue::LongLongInt(1)),
            ("exchange", text("orders.in")),
            ("queue", text("orders")),
            ("reason", text("expired")),
            (
                "routing-keys",
                AMQPValue::FieldArray(vec![text("order.placed")].into()),
            ),
            ("original-expiration", text("5000")),
        ]);
        let dead = with(&[
            ("x-tenant", text("acme")),
            ("x-death", AMQPValue::FieldArray(vec![death].into())),
            ("x-first-death-exchange", text("orders.in")),
            ("x-first-death-queue", text("orders")),
            ("x-first-death-reason", text("expired")),
            ("x-last-death-exchange", text("orders.in")),
            ("x-last-death-queue", text("orders")),
            ("x-last-death-reason", text("expired")),
        ]);
        assert_eq!(first, id_of("orders.dlx", "orders", &dead, b"{}"));
        // Another publish routing key is another message even once dead.
        let other = id_of("orders.in", "order.paid", &published, b"{}");
        assert_ne!(other, id_of("orders.dlx", "orders", &dead, b"{}"));
    }
}
