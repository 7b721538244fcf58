//! The message as every backend hands it to the runtime, and as publishers send it.
//!
//! Attribute names follow the CloudEvents Kafka binding (`ce_id`, `ce_type`,
//! ...), the binding the in-memory broker also uses. Backends whose protocol
//! has a native field for an attribute (AMQP's `message-id`) map it when they
//! build the [`Envelope`].

pub mod cloudevent;
mod delivery;
mod headers;
mod message;
mod origin;

pub use delivery::{Envelope, attribute};
pub use headers::{HeaderError, Headers};
pub use message::Message;
pub use origin::{Channel, Origin, Placement, Position};

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Header names the framework reads and writes.
pub mod names {
    /// CloudEvents `id`.
    pub const ID: &str = "ce_id";
    /// CloudEvents `type`.
    pub const TYPE: &str = "ce_type";
    /// CloudEvents `source`.
    pub const SOURCE: &str = "ce_source";
    /// CloudEvents `subject`.
    pub const SUBJECT: &str = "ce_subject";
    /// CloudEvents `time` (RFC 3339).
    pub const TIME: &str = "ce_time";
    /// CloudEvents `specversion`.
    pub const SPEC_VERSION: &str = "ce_specversion";
    /// CloudEvents `datacontenttype` (binary mode: the `content-type` header).
    pub const CONTENT_TYPE: &str = "content-type";
    /// The partition key when the protocol has no native key.
    pub const PARTITION_KEY: &str = "ce_partitionkey";
    /// Number of the delivery attempt this message is (1 for the first).
    pub const ATTEMPT: &str = "x-consumer-attempt";
    /// When the first attempt failed (RFC 3339), carried across redeliveries.
    pub const FIRST_FAILURE: &str = "x-consumer-first-failure";
    /// When a retry copy is due (RFC 3339): sources that cannot delay a
    /// delivery themselves (a Kafka retry topic) hold it until then.
    pub const DUE: &str = "x-consumer-due";
    /// W3C trace context.
    pub const TRACEPARENT: &str = "traceparent";
    /// W3C trace state.
    pub const TRACESTATE: &str = "tracestate";
}

/// Formats a time as RFC 3339, the form every time header uses.
pub fn format_time(t: OffsetDateTime) -> String {
    // Rfc3339 only fails for years outside 0..=9999, which `now_utc` cannot produce.
    t.format(&Rfc3339)
        .unwrap_or_else(|_| t.unix_timestamp().to_string())
}
