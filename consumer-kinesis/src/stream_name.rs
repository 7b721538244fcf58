//! [`StreamName`]: a stream name Kinesis takes, checked before any call.

use crate::error::{Error, Result};

/// A Kinesis stream name: 1 to 128 characters of `A-Z a-z 0-9 _ . -`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StreamName(String);

impl StreamName {
    /// `name`, if Kinesis takes it as a stream name.
    pub fn parse(name: impl Into<String>) -> Result<Self> {
        let name = name.into();
        let reason = if name.is_empty() || name.len() > 128 {
            Some("a stream name has 1 to 128 characters")
        } else if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        {
            Some("a stream name has only the characters A-Z, a-z, 0-9, `_`, `.` and `-`")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(Error::InvalidStream { name, reason }),
            None => Ok(Self(name)),
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for StreamName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_kinesis_refuses_are_refused_before_any_call() {
        assert!(StreamName::parse("orders-v1.events_2").is_ok());
        for bad in ["", "orders/v1", "ordres stream", &"s".repeat(129)] {
            assert!(
                matches!(StreamName::parse(bad), Err(Error::InvalidStream { .. })),
                "{bad:?}"
            );
        }
    }
}
