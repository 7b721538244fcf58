//! The conformance suite on SQS FIFO queues (needs an SQS emulator:
//! `scripts/services sqs` starts moto on 127.0.0.1:4566, `SQS_ENDPOINT`
//! names another) with the PostgreSQL store (needs PostgreSQL:
//! `DATABASE_URL`). Every test works on queues of its own.

mod conformance;
mod suite;

type SuiteHarness = crate::conformance::support::PgHarness;
type SuiteTx = consumer::PgTx;

crate::declare!(crate::conformance::sqs::SqsBroker);
