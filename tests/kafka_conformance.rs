//! The conformance suite on Kafka, on librdkafka's in-process mock cluster
//! (one cluster per test, no install), with the PostgreSQL store (needs
//! PostgreSQL: `DATABASE_URL`).

mod conformance;

crate::suite!(
    crate::conformance::support::PgHarness,
    consumer::PgTx,
    crate::conformance::kafka::MockKafka
);
