//! What SQS accepts as a queue name, a message group id and a
//! deduplication id, checked before anything reaches SQS.
//!
//! * A queue name is 1 to 80 characters of `[A-Za-z0-9_-]`, and a FIFO
//!   queue's ends in `.fifo` (the suffix counts toward the 80). A queue may
//!   also be given by its URL (`https://sqs.<region>.amazonaws.com/<account>/<name>`,
//!   or an emulator's `http://127.0.0.1:4566/<account>/<name>`): its last
//!   path segment is the name, checked the same way.
//! * A group id and a deduplication id are 1 to 128 characters of
//!   alphanumerics and ASCII punctuation. A key or an id outside that (a
//!   space, a letter with an accent, 129 characters) is replaced by
//!   `h-` and the SHA-256 of its UTF-8 bytes in hex: the same key always
//!   maps to the same group, so its order is kept, and the message carries
//!   the key itself as `ce_partitionkey` for the consumer.

use crate::error::Error;

/// The longest queue name SQS accepts.
pub const MAX_QUEUE_NAME: usize = 80;

/// The longest group or deduplication id SQS accepts.
pub const MAX_GROUP_ID: usize = 128;

/// A queue, named and checked: whether it is FIFO follows from its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QueueName {
    name: String,
    url: Option<String>,
}

impl QueueName {
    /// `queue`, a name or a URL, checked.
    pub fn parse(queue: &str) -> Result<Self, Error> {
        if let Some((_, rest)) = queue.split_once("://") {
            let name = rest.rsplit('/').next().unwrap_or_default();
            check_queue_name(name)?;
            let path_segments = rest.split('/').count();
            if path_segments < 3 {
                return Err(Error::InvalidQueue {
                    name: queue.to_owned(),
                    reason: "a queue URL is <endpoint>/<account id>/<queue name>".to_owned(),
                });
            }
            return Ok(Self {
                name: name.to_owned(),
                url: Some(queue.to_owned()),
            });
        }
        check_queue_name(queue)?;
        Ok(Self {
            name: queue.to_owned(),
            url: None,
        })
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The URL it was given by, if it was.
    pub fn url(&self) -> Option<&str> {
        self.url.as_deref()
    }

    /// Whether it is a FIFO queue (its name ends in `.fifo`).
    pub fn is_fifo(&self) -> bool {
        self.name.ends_with(".fifo")
    }

    /// The name of its default dead-letter queue: `<name>-dlq`, or
    /// `<base>-dlq.fifo` for a FIFO queue.
    pub fn default_dead_letter(&self) -> Result<Self, Error> {
        let name = match self.name.strip_suffix(".fifo") {
            Some(base) => format!("{base}-dlq.fifo"),
            None => format!("{}-dlq", self.name),
        };
        Self::parse(&name).map_err(|_| Error::InvalidQueue {
            name: name.clone(),
            reason: format!(
                "the default dead-letter queue of `{}` would be longer than {MAX_QUEUE_NAME} characters: name one with Topology::with_dead_letter_queue",
                self.name
            ),
        })
    }
}

impl std::fmt::Display for QueueName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

/// Checks a queue name; the sentence says what SQS accepts.
pub fn check_queue_name(name: &str) -> Result<(), Error> {
    let bad = |reason: &str| {
        Err(Error::InvalidQueue {
            name: name.to_owned(),
            reason: reason.to_owned(),
        })
    };
    if name.is_empty() || name.len() > MAX_QUEUE_NAME {
        return bad("use 1 to 80 characters, `.fifo` included for a FIFO queue");
    }
    let base = name.strip_suffix(".fifo").unwrap_or(name);
    if base.is_empty()
        || !base
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return bad("use only A-Z, a-z, 0-9, `-` and `_` (a FIFO queue's name ends in `.fifo`)");
    }
    Ok(())
}

/// Whether SQS takes `id` as a `MessageGroupId` or `MessageDeduplicationId`.
pub fn is_valid_group_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_GROUP_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b.is_ascii_punctuation())
}

/// `id` when SQS takes it as a group or deduplication id, else `h-` and its
/// SHA-256 in hex (stable: the same input gives the same id).
pub fn group_id(id: &str) -> std::borrow::Cow<'_, str> {
    if is_valid_group_id(id) {
        std::borrow::Cow::Borrowed(id)
    } else {
        std::borrow::Cow::Owned(format!("h-{}", sha256_hex(id.as_bytes())))
    }
}

/// SHA-256 of `bytes`, lowercase hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        out.push(char::from(b"0123456789abcdef"[usize::from(b & 0xf)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names_follow_what_sqs_accepts() {
        for ok in ["orders", "orders.fifo", "a-b_C9", &"x".repeat(80)] {
            assert!(QueueName::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".fifo",
            "orders.dlq",
            "ord ers",
            "ordérs",
            &"x".repeat(81),
        ] {
            assert!(QueueName::parse(bad).is_err(), "{bad}");
        }
        let url = QueueName::parse("http://127.0.0.1:4566/000000000000/orders.fifo")
            .expect("a queue URL");
        assert_eq!((url.name(), url.is_fifo()), ("orders.fifo", true));
        assert!(QueueName::parse("https://sqs.example/orders").is_err());
    }

    #[test]
    fn a_fifo_queue_gets_a_fifo_dead_letter_queue() {
        let q = QueueName::parse("orders.fifo").expect("valid");
        assert_eq!(
            q.default_dead_letter().expect("fits").name(),
            "orders-dlq.fifo"
        );
        let q = QueueName::parse("orders").expect("valid");
        assert_eq!(q.default_dead_letter().expect("fits").name(), "orders-dlq");
        let long = QueueName::parse(&"x".repeat(80)).expect("valid");
        let err = long.default_dead_letter().expect_err("too long");
        assert!(err.to_string().contains("with_dead_letter_queue"), "{err}");
    }

    #[test]
    fn keys_sqs_refuses_map_to_a_stable_hash() {
        assert_eq!(group_id("order-7"), "order-7");
        let accented = group_id("commande é");
        assert!(accented.starts_with("h-") && accented.len() == 66);
        assert_eq!(accented, group_id("commande é"));
        assert!(is_valid_group_id(&group_id(&"k".repeat(200))));
    }
}
