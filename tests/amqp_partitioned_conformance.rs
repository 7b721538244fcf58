//! The conformance suite on a partitioned RabbitMQ queue (needs RabbitMQ:
//! `AMQP_URL`, and PostgreSQL: `DATABASE_URL`): retries, dead letters and
//! the settle fallbacks keep their semantics per partition.

mod conformance;
mod suite;

type SuiteHarness = crate::conformance::support::PgHarness;
type SuiteTx = consumer::PgTx;

crate::declare!(crate::conformance::amqp_partitioned::AmqpPartitionedBroker);
