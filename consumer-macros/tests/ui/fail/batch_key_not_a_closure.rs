//! With `batch`, the key names the message in a closure: the batch
//! argument is not a message.

use consumer::batch::Batch;
use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

#[handler(batch, idempotency_key = orders.id)]
async fn record(orders: &mut Batch<Order>) -> Result<(), Declined> {
    let _ = orders.len();
    Ok(())
}

fn main() {}
