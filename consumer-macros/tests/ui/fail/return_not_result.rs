//! The return type must be a `Result`.

use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

#[handler]
async fn record(order: Order) -> Option<Declined> {
    let _ = order.id;
    None
}

fn main() {}
