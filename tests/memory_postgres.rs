//! The conformance suite on the in-memory broker with the PostgreSQL store
//! (needs PostgreSQL: `DATABASE_URL`, default postgres://postgres@127.0.0.1:5432/test).

mod conformance;

crate::suite!(
    crate::conformance::support::PgHarness,
    consumer::PgTx
);
