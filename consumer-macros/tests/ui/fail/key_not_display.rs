//! The idempotency key must implement `Display`.

use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

#[derive(serde::Deserialize)]
struct Keyed {
    key: Vec<u8>,
}

#[handler(idempotency_key = keyed.key)]
async fn record(keyed: Keyed) -> Result<(), Declined> {
    let _ = keyed.key;
    Ok(())
}

fn main() {}
