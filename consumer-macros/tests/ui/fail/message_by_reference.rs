//! The message is decoded for the handler and given by value.

use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

#[handler]
async fn record(order: &Order) -> Result<(), Declined> {
    let _ = &order.id;
    Ok(())
}

fn main() {}
