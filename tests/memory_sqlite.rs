//! The conformance suite on the in-memory broker with the SQLite store.

mod conformance;
mod suite;

type SuiteHarness = crate::conformance::support::SqliteHarness;
type SuiteTx = consumer::SqliteTx;

crate::declare!(crate::conformance::broker::MemoryHarness);
