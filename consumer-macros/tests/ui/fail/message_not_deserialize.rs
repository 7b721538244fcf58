//! The message type must implement `serde::Deserialize`.

use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

struct Untyped {
    id: String,
}

#[handler]
async fn record(order: Untyped) -> Result<(), Declined> {
    let _ = order.id;
    Ok(())
}

fn main() {}
