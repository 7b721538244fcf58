//! The conformance suite end to end on an out-of-process Kafka-protocol
//! broker: `KAFKA_BROKERS` (default 127.0.0.1:9092; `scripts/services kafka`
//! starts tansu there), with the PostgreSQL store (`DATABASE_URL`). Each
//! test works on topics of its own.

mod conformance;
mod suite;

type SuiteHarness = crate::conformance::support::PgHarness;
type SuiteTx = consumer::PgTx;

crate::declare!(crate::conformance::kafka::ExternalKafka);
