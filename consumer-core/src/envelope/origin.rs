//! [`Origin`]: where a delivery was consumed from.

use std::fmt;

/// Where a message came from: enough to find it again on the broker.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Origin {
    /// Topic, queue or stream the message was consumed from.
    pub destination: String,
    /// Position within it (`partition/offset`, delivery tag, ...).
    pub position: String,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.destination, self.position)
    }
}
