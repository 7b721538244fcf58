//! The conformance suite on RabbitMQ quorum queues (work, dead-letter and
//! delay queues; per-message TTL and at-least-once dead-lettering out of the
//! delay queues need RabbitMQ 3.10 or later), with the PostgreSQL store.
//! Needs RabbitMQ (`AMQP_URL`, default amqp://guest:guest@127.0.0.1:5672/%2f)
//! and PostgreSQL (`DATABASE_URL`). Every test works on queues of its own.

mod conformance;
mod suite;

type SuiteHarness = crate::conformance::support::PgHarness;
type SuiteTx = consumer::PgTx;

crate::declare!(crate::conformance::amqp::AmqpQuorumBroker);
