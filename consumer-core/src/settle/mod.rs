//! What a settlement is: the outcomes the runtime decides and the messages
//! it builds for the broker, once, for every backend.
//!
//! * **Ack**: the delivery is done (processed, or a duplicate).
//! * **Retry copy** ([`RetryCopy`]): a transient failure retried through
//!   the broker. The copy keeps the delivery's id (even one the backend
//!   derived from a position or a content hash, which the copy would not
//!   share), its key, payload and headers, and carries the attempt number,
//!   the first failure and the due time, so no backend can drop one of
//!   them.
//! * **Dead letter** ([`DeadLetter`](crate::DeadLetter)): the original with
//!   its structured context, or, when the dead-letter destination refuses
//!   it for its size, the context without the payload (its size and
//!   SHA-256 say what was left out).
//!
//! Backends route and publish these ([`Acker`](crate::Acker)); the
//! runtime's settle loop retries a step only while the backend says the
//! failure can heal, and otherwise takes the fallback: a dead letter
//! without its payload, then the store's dead-letter table, then a release
//! for redelivery; a retry copy refused for good becomes an in-place retry.

mod retry_copy;

pub use retry_copy::{RetryCopy, due_in};
