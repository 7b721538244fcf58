//! `retry = <expr>`: any expression of type `RetryPolicy`, here a shared const.

use std::time::Duration;

use consumer::{RetryMode, RetryPolicy, handler};

const PATIENT: RetryPolicy =
    RetryPolicy::exponential(Duration::from_millis(10), Duration::from_secs(60), 12)
        .with_mode(RetryMode::Redeliver);

#[derive(serde::Deserialize)]
struct Invoice {
    number: u32,
}

#[derive(Debug, thiserror::Error)]
#[error("invoice {0} is not ready")]
struct NotReady(u32);

#[handler(retry = PATIENT, idempotency_key = invoice.number)]
async fn send_invoice(invoice: Invoice) -> Result<(), NotReady> {
    Err(NotReady(invoice.number))
}

fn assert_handler<H: consumer::Handler<consumer::SqliteStore>>(_: H) {}

pub fn main() {
    assert_handler(send_invoice);
}
