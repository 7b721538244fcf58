//! Without a `Result` a failure cannot be retried or dead-lettered.

use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

#[handler]
async fn record(order: Order) {
    let _ = order.id;
}

fn main() {}
