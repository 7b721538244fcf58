//! A codec name that is not one of the formats.

use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

#[handler(codec = xml)]
async fn record(order: Order) -> Result<(), Declined> {
    let _ = order.id;
    Ok(())
}

fn main() {}
