//! A batch mixes keys: it cannot hold one key's later messages.

use consumer::batch::Batch;
use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

#[handler(batch, on_dead_letter = hold_key)]
async fn record(orders: &mut Batch<Order>) -> Result<(), Declined> {
    let _ = orders.len();
    Ok(())
}

fn main() {}
