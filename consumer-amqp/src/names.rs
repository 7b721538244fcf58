//! Queue and exchange names as AMQP 0-9-1 carries them, checked.

use lapin::types::{AMQPValue, LongString, ShortString};

use crate::error::{Error, Result};

/// Checks a queue or exchange name: 1 to 255 bytes of `[A-Za-z0-9._:-]`,
/// not starting with the reserved `amq.` prefix.
pub fn validate_name(what: &'static str, name: &str) -> Result<()> {
    let refuse = |reason| {
        Err(Error::InvalidName {
            what,
            name: name.to_owned(),
            reason,
        })
    };
    if name.is_empty() {
        return refuse("it is empty");
    }
    if name.len() > 255 {
        return refuse("it is longer than 255 bytes");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
    {
        return refuse("only letters, digits and `.`, `_`, `:`, `-` are allowed");
    }
    if name.starts_with("amq.") {
        return refuse("the `amq.` prefix is reserved by RabbitMQ");
    }
    Ok(())
}

/// A name already checked to be short, as the client library wants it.
pub(crate) fn short(s: &str) -> Result<ShortString> {
    ShortString::try_new(s).map_err(|_| Error::InvalidName {
        what: "AMQP short string",
        name: s.chars().take(64).collect(),
        reason: "it is longer than 255 bytes",
    })
}

pub(crate) fn long(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s.as_bytes().to_vec()))
}
