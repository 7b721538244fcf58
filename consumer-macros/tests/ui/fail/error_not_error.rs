//! The error type must be a `std::error::Error + Send + Sync`.

use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

#[derive(Debug)]
struct NotAnError;

#[handler]
async fn record(order: Order) -> Result<(), NotAnError> {
    let _ = order.id;
    Ok(())
}

fn main() {}
