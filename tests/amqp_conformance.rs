//! The conformance suite on RabbitMQ (needs RabbitMQ: `AMQP_URL`, default
//! amqp://guest:guest@127.0.0.1:5672/%2f) with the PostgreSQL store (needs
//! PostgreSQL: `DATABASE_URL`). Every test works on queues of its own.

mod conformance;
mod suite;

type SuiteHarness = crate::conformance::support::PgHarness;
type SuiteTx = consumer::PgTx;

crate::declare!(crate::conformance::amqp::AmqpBroker);
