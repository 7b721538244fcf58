//! The conformance suite on RabbitMQ (needs RabbitMQ: `AMQP_URL`, default
//! amqp://guest:guest@127.0.0.1:5672/%2f) with the PostgreSQL store (needs
//! PostgreSQL: `DATABASE_URL`). Every test works on queues of its own.

mod conformance;

crate::suite!(
    crate::conformance::support::PgHarness,
    consumer::PgTx,
    crate::conformance::amqp::AmqpBroker
);
