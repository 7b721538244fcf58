//! `batch` is a flag: the batch size belongs to `Batched`.

use consumer::batch::Batch;
use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

#[handler(batch = 50)]
async fn record(orders: &mut Batch<Order>) -> Result<(), Declined> {
    let _ = orders.len();
    Ok(())
}

fn main() {}
