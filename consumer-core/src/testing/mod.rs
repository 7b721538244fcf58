//! Test and benchmark support (feature `testing`): the application test
//! kit, fault injection over any backend, a fresh PostgreSQL schema per
//! test, spans exported to memory.
//!
//! An application tests its handlers, routers and sagas with [`TestKit`]
//! (with `sqlite`): on the memory broker and an in-memory SQLite store, on
//! a virtual clock, each message's [`Delivery`] heard from the runtime's
//! own events, what the outbox relay [`Published`], what was
//! dead-lettered. The rest of this module is the framework's own test
//! support, which an application may use too:
//!
//! One set of fault-injecting wrappers, written once: [`FaultySource`] and its
//! [`FaultyAcker`] wrap any [`Source`](crate::source::Source) and its acker;
//! [`FaultyPublisher`] wraps any [`Publisher`](crate::Publisher). They share
//! one [`Faults`] handle, through which a test arms what goes wrong next:
//!
//! * [`Faults::duplicate_next_publishes`]: the publisher sends the next
//!   messages twice, as a producer retry after a lost confirm does;
//! * [`Faults::lose_next_acks`]: the consumer process "dies" between its
//!   database commit and its ack: the delivery is never settled (no
//!   destructor runs, as in a real crash), and once the deliveries the
//!   source still held have settled, the source is closed and a new one is
//!   started, as a restarted process would be; the broker delivers the
//!   lost one again;
//! * [`Faults::fail_next_publishes`]: the next dead-letter, retry-copy and
//!   publisher sends fail with an error that can heal;
//! * [`Faults::refuse_dead_letters`] and [`Faults::refuse_retries`]: the
//!   broker refuses every dead letter or retry copy for good, for a given
//!   reason, until cleared.
//!
//! Real refusals (a dead-letter topic that does not exist, a producer size
//! limit, a queue deleted under the consumer) are arranged by each
//! backend's tests where the broker can produce them; these wrappers are
//! for what cannot be arranged from outside (exactly N failures, then
//! recovery).
//!
//! The network between a client and its broker is [`LinkProxy`]'s: a TCP
//! proxy whose link a test cuts, takes down, stalls, slows and restores;
//! what the framework logged meanwhile is [`captured_logs`]'.

mod acker;
mod faults;
mod link;
mod logs;
pub mod metrics;
mod publisher;
mod source;

pub use acker::FaultyAcker;
pub use faults::Faults;
pub use link::LinkProxy;
pub use logs::{CapturedLogs, LineWriter, captured_logs};
pub use metrics::MetricsRecorder;
pub use publisher::FaultyPublisher;
pub use source::{FaultySource, Restart};

#[cfg(feature = "postgres")]
mod postgres;
mod spans;
mod subscriber;

#[cfg(feature = "postgres")]
pub use postgres::{FreshSchema, ServiceUnavailable, database_url};
pub use spans::{in_memory_spans, trace_id_of};

#[cfg(feature = "sqlite")]
mod kit;
#[cfg(feature = "sqlite")]
pub use kit::{Delivery, KitError, Outcome, Published, Sent, TestKit, TestKitBuilder};
