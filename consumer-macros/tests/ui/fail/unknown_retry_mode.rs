//! A retry mode other than `in_place` or `redeliver`.

use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

#[handler(retry = exponential(mode = later))]
async fn record(order: Order) -> Result<(), Declined> {
    let _ = order.id;
    Ok(())
}

fn main() {}
