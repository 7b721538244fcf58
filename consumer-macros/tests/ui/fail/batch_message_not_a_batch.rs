//! With `batch`, the first argument is the batch, lent as `&mut Batch<M>`.

use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

#[handler(batch)]
async fn record(orders: Vec<Order>) -> Result<(), Declined> {
    let _ = orders.len();
    Ok(())
}

fn main() {}
