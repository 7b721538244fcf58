//! Consumers that never lose a message and never process one twice.
//!
//! Annotate a plain `async fn` with [`#[handler]`](macro@handler); run it on a
//! broker with a store; the framework does the rest: decoding (a payload
//! that does not decode is a poison pill), the dedup row inserted in the
//! handler's own transaction, W3C trace context extraction into a child
//! span, classification of errors (poison / terminal / transient), retries
//! with exponential backoff and full jitter, dead letters with structured
//! context, per-key ordering with parallelism across keys, a transactional
//! outbox, and graceful shutdown.
//!
//! ```
//! use consumer::{handler, Consumer, MemoryBroker, Message, MessageContext, SqliteStore, SqliteTx};
//!
//! #[derive(serde::Deserialize, serde::Serialize)]
//! struct OrderPlaced { order_id: String, cents: i64 }
//!
//! #[derive(Debug, thiserror::Error)]
//! enum OrderError {
//!     #[error("database: {0}")]
//!     Db(#[from] sqlx::Error),
//!     #[error("amount must be positive")]
//!     InvalidAmount,
//! }
//!
//! #[handler(
//!     idempotency_key = order.order_id,
//!     retry = exponential(base = "50ms", max_delay = "2s", attempts = 5),
//!     terminal = OrderError::InvalidAmount,
//! )]
//! async fn record_order(order: OrderPlaced, tx: &mut SqliteTx, ctx: &MessageContext) -> Result<(), OrderError> {
//!     if order.cents <= 0 {
//!         return Err(OrderError::InvalidAmount);
//!     }
//!     sqlx::query("INSERT INTO orders (id, cents) VALUES (?1, ?2)")
//!         .bind(&order.order_id)
//!         .bind(order.cents)
//!         .execute(&mut **tx)
//!         .await?;
//!     Ok(())
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
//! sqlx::query("CREATE TABLE orders (id TEXT PRIMARY KEY, cents INTEGER)").execute(&pool).await?;
//! let store = SqliteStore::new(pool.clone());
//! store.migrate().await?;
//!
//! let broker = MemoryBroker::new(4);
//! let order = OrderPlaced { order_id: "o-1".into(), cents: 1200 };
//! let message = Message::json("OrderPlaced", &order)?.with_key("o-1");
//! broker.publish("orders", message.clone()).await?;
//! broker.publish("orders", message).await?; // a duplicate: processed once
//!
//! let drained = broker.clone();
//! Consumer::new(broker.source("orders"), store, record_order)
//!     .run_until(async move { drained.wait_drained("orders").await })
//!     .await?;
//! let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM orders").fetch_one(&pool).await?;
//! assert_eq!(n, 1);
//! # Ok(())
//! # }
//! ```
//!
//! # The guide
//!
//! The [`guide`] explains the framework topic by topic, every example
//! compiled: [getting started](guide::getting_started) (dependencies,
//! features, the stores), [handlers](guide::handlers),
//! [delivery semantics](guide::semantics),
//! [router and service](guide::router_and_service), the
//! [transactional outbox](guide::outbox), [batches](guide::batches),
//! [sagas](guide::sagas), [scale-out](guide::scale_out), [contracts](guide::contracts),
//! [testing your service](guide::testing),
//! [observability](guide::observability), [operations](guide::operations)
//! (the `consumer` command-line tool),
//! [connecting securely](guide::secure_connections) (TLS, SASL, secrets),
//! and one page per backend:
//! [memory broker](guide::memory_broker), [RabbitMQ](guide::rabbitmq),
//! [partitioned RabbitMQ queues](guide::rabbitmq_partitions),
//! [Kafka](guide::kafka), [SQS](guide::sqs), [Kinesis](guide::kinesis).
//!
//! # Where things are
//!
//! The crate's root holds what an application uses: [`Consumer`],
//! [`#[handler]`](macro@handler), [`Router`], [`Service`], [`Outbox`] and
//! [`OutboxRelay`], the stores ([`PgStore`], [`SqliteStore`],
//! [`MemoryStore`]), [`RetryPolicy`], [`DeadLetter`], [`MemoryBroker`],
//! [`Message`] and [`Error`]. Its modules hold the rest of each part
//! ([`router`], [`service`], [`outbox`], [`batch`], [`store`], [`stats`],
//! ...); [`backend`] is what broker backends are written against; the
//! backends and the contract tooling are behind [features](#features).
//!
//! # Features
//!
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use consumer_core::*;

pub mod guide;

// The maintainers' map of the workspace, checked by rustdoc: a name it
// links that is renamed fails the doc build (CI denies warnings). Built
// where every part it names is: with the backends and `testing`.
#[cfg(all(
    feature = "amqp",
    feature = "kafka",
    feature = "sqs",
    feature = "testing",
    feature = "postgres",
    feature = "macros"
))]
#[doc = include_str!("../ARCHITECTURE.md")]
pub mod architecture {
    #[allow(unused_imports)]
    use super::*;
}

/// Turns an `async fn` into a message handler. The guide's
/// [handlers page](guide::handlers) has every argument with examples that
/// run.
///
/// ```text
/// #[handler(
///     idempotency_key = <expr>,           // default: the message id
///     retry = exponential(base = "100ms", max_delay = "30s", attempts = 5, mode = in_place),
///     terminal = <pattern> | <pattern>,   // default: nothing is terminal
///     on_dead_letter = hold_key,          // default: move_on
///     circuit = breaker(opens_after = 5, open_for = "5s", max_open_for = "60s"),
///     codec = avro,                       // or protobuf | json_schema | <type>; default: json
///     event_type = "OrderPlaced",         // or ["A", "B"]; default: the message type's name
///     name = "charge",                    // default: the function's name
///     crate = ::consumer,                 // for renamed dependencies
/// )]
/// async fn charge(msg: M, tx: &mut PgTx, ctx: &MessageContext) -> Result<(), E>
/// ```
///
/// * The first argument is the message, decoded from JSON (or with the
///   handler's `codec`); a payload that does not decode is dead-lettered at
///   once as poison.
/// * `tx` (optional) is the transaction that already holds the dedup row
///   for the idempotency key: writes made through it commit together with
///   that row or not at all. Its type picks the store: `&mut PgTx`,
///   `&mut SqliteTx` or `&mut MemoryTx`. Without it the handler runs on any
///   store, and the key is still recorded before the side effect.
/// * `ctx` (optional) is the [`MessageContext`].
/// * `idempotency_key` is an expression over the message argument (by
///   reference) whose value implements `Display`.
/// * `retry` is `exponential(...)` (every argument optional, defaults shown
///   above; `mode = redeliver` sends retries back through the broker and
///   does not keep per-key order for them), `none`, or any expression of
///   type [`RetryPolicy`].
/// * `terminal` patterns are matched against `&E`: a match is dead-lettered
///   without retry; any other error is transient and retried.
/// * `on_dead_letter = hold_key` sets the key's later messages aside once
///   one of its messages is dead-lettered, until an operator releases or
///   skips it (sequenced dead letters; the guide's
///   [faults page](guide::faults)).
/// * `circuit` is this handler's own circuit: `breaker(...)` (every
///   argument optional, defaults shown above), `off`, or any expression of
///   type [`runtime::CircuitPolicy`]. Left out, the handler follows the
///   consumer's ([`Consumer::with_circuit`]).
/// * `codec` decodes the message from a schema registry's wire format:
///   `avro` (types deriving `apache_avro::AvroSchema` and `Deserialize`,
///   read through the registry's schema resolution), `protobuf` (`prost`
///   types), `json_schema` (`Deserialize` types), or a type of your own
///   implementing [`codec::Decode`]. The consumer holds the codec
///   ([`Consumer::with_codec`]; the named formats need the `registry`
///   feature) and refuses to start without it. A registry that does not
///   answer holds the message and tries again until it does; it is never
///   dead-lettered for that. See the guide's
///   [registry page](guide::registry).
/// * `event_type` is the CloudEvents type (`ce_type`) a [`Router`] sends
///   the handler; a consumer that runs the handler alone ignores it.
///
/// The function becomes a unit struct of the same name that implements
/// [`Handler`]; the original function is `name::call`.
///
/// # Batches
///
/// With `batch`, the function handles a [`batch::Batch`] of fresh messages
/// in one transaction, and becomes a [`batch::BatchHandler`]: run it as
/// [`batch::Batched::new(name)`](batch::Batched::new). See the guide's
/// [batches page](guide::batches).
///
/// ```text
/// #[handler(
///     batch,
///     idempotency_key = |payment| payment.id,   // a closure: the key of each message
///     retry = exponential(attempts = 5),        // each failed message's own retries
///     terminal = PaymentError::Declined,        // matched once a failure is narrowed to one message
/// )]
/// async fn record(payments: &mut Batch<Payment>, tx: &mut PgTx) -> Result<(), PaymentError>
/// ```
///
/// * The first argument is the batch, `&mut Batch<M>`; each item carries
///   its own [`MessageContext`] (`item.context()`), so there is no context
///   argument. `tx` is optional, as above.
/// * `batch.fail(i, e)` / `batch.fail_terminal(i, e)` say which message
///   failed. An `Err` the function returns without marking one fails the
///   batch: it is split in halves down to the message that fails alone,
///   where `terminal` is matched against the `E` it returned.
#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
pub use consumer_macros::handler;

/// Sagas: multi-step processes with durable state, commands and timeouts
/// through the outbox, compensation (the `consumer-saga` crate).
#[cfg(feature = "saga")]
#[cfg_attr(docsrs, doc(cfg(feature = "saga")))]
pub use consumer_saga as saga;

#[cfg(feature = "saga")]
#[cfg_attr(docsrs, doc(cfg(feature = "saga")))]
pub use consumer_saga::Saga;

/// Payload formats: the seam a handler's codec implements (`Codec`,
/// `Decode`), and, with the `registry` feature, Avro, Protobuf and JSON
/// Schema in the Confluent wire format against a schema registry (`Avro`,
/// `Protobuf`, `JsonSchema`, `registry::RegistryClient`; the
/// `consumer-codec` crate). See `#[handler(codec = ..)]` and
/// `Consumer::with_codec`.
pub use consumer_codec as codec;

/// Background jobs on the database: `Jobs` (enqueue in the caller's
/// transaction), `JobSource` (claims with leases, per-key order),
/// `JobPublisher`, `JobTables` (the `consumer-jobs` crate).
#[cfg(feature = "jobs")]
#[cfg_attr(docsrs, doc(cfg(feature = "jobs")))]
pub use consumer_jobs as jobs;

/// The RabbitMQ backend: `AmqpSource`, `AmqpPublisher`, declared topology.
#[cfg(feature = "amqp")]
#[cfg_attr(docsrs, doc(cfg(feature = "amqp")))]
pub use consumer_amqp as amqp;

/// The Kafka backend: `KafkaSource`, `KafkaPublisher`, `Topics`.
#[cfg(feature = "kafka")]
#[cfg_attr(docsrs, doc(cfg(feature = "kafka")))]
pub use consumer_kafka as kafka;

/// The AWS SQS backend: `SqsSource`, `SqsPublisher`, `Topology` (FIFO
/// group = key, retries by visibility, dead letters with context).
#[cfg(feature = "sqs")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqs")))]
pub use consumer_sqs as sqs;

/// The Amazon Kinesis backend: `KinesisSource` (shard leases, checkpoints
/// only past settled records, children after their parents),
/// `KinesisPublisher` (order per key across partial `PutRecords`
/// failures), the record `envelope`, the `shards` graph, `lease`s.
#[cfg(feature = "kinesis")]
#[cfg_attr(docsrs, doc(cfg(feature = "kinesis")))]
pub use consumer_kinesis as kinesis;

/// The Kinesis backend's leases and checkpoints in the store's database:
/// `SqlLeaseStore` on PostgreSQL or SQLite.
#[cfg(feature = "kinesis")]
#[cfg_attr(docsrs, doc(cfg(feature = "kinesis")))]
pub use consumer_kinesis_store as kinesis_store;

// The SQS guide's Rust blocks, compiled as doctests.
#[cfg(all(doctest, feature = "sqs"))]
#[doc = include_str!("../docs/guide/sqs.md")]
mod sqs_guide {}

/// Contracts made from the service itself: its AsyncAPI 3.1 document, its
/// payload schemas and their compatibility checks (`ServiceContracts`).
#[cfg(feature = "asyncapi")]
#[cfg_attr(docsrs, doc(cfg(feature = "asyncapi")))]
pub use consumer_contracts as contracts;

#[cfg(not(any(feature = "postgres", feature = "sqlite")))]
compile_error!(
    "the `consumer` crate needs a store: enable the `postgres` feature, the `sqlite` feature, or both"
);
