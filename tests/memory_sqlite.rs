//! The conformance suite on the in-memory broker with the SQLite store.

mod conformance;

crate::suite!(
    crate::conformance::support::SqliteHarness,
    consumer::SqliteTx,
    consumer::MemoryBroker
);
