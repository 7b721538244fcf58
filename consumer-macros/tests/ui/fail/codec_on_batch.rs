//! A batch decodes JSON only: it cannot name a codec.

use consumer::batch::Batch;
use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

#[handler(batch, codec = avro)]
async fn record(orders: &mut Batch<Order>) -> Result<(), Declined> {
    let _ = orders.len();
    Ok(())
}

fn main() {}
