//! The seam between a handler and the format of its payloads: what
//! `#[handler(codec = ..)]` names and a consumer holds
//! (`Consumer::with_codec`).
//!
//! A codec is a value (it holds a registry client and its caches), shared
//! by every handler of a consumer that names its type; a handler names the
//! codec's type, and the message type it decodes into must be one the
//! codec can produce ([`Decode`]), which the compiler checks. What a
//! failure means for the message is the [`Error`]'s class:
//! [`Error::is_poison`] dead-letters it with the schema id and the reason,
//! [`Error::is_transient`] (the registry did not answer) holds it and
//! tries again until the registry answers, and the rest (a configuration
//! or a schema this crate cannot use yet) goes through the handler's retry
//! policy.

use std::future::Future;

use crate::error::Result;

/// A payload format a consumer decodes handlers' messages with. Its
/// [`NAME`](Codec::NAME) is what logs and start-up errors call it.
pub trait Codec: Send + Sync + 'static {
    /// The format's name: `avro`, `protobuf`, `json_schema`.
    const NAME: &'static str;
}

/// A codec that decodes payloads into `M`.
#[diagnostic::on_unimplemented(
    message = "the codec `{Self}` cannot decode a `{M}`",
    label = "the message type does not fit the handler's codec",
    note = "`codec = avro` reads types that derive `apache_avro::AvroSchema` and \
            `serde::Deserialize`; `codec = protobuf` reads `prost::Message` types; \
            `codec = json_schema` reads `serde::Deserialize` types"
)]
pub trait Decode<M>: Codec {
    /// Decodes one payload.
    ///
    /// # Errors
    ///
    /// An [`Error`](crate::Error) whose class says what becomes of the
    /// message (see the module's documentation).
    fn decode(&self, payload: &[u8]) -> impl Future<Output = Result<M>> + Send;
}
