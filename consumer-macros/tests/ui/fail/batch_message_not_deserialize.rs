//! With `batch` too, the message type of the batch must implement
//! `serde::Deserialize`: one error, at the type, naming the fix.

use consumer::batch::Batch;
use consumer::{SqliteTx, handler};

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

struct Untyped {
    id: String,
}

#[handler(batch)]
async fn record(orders: &mut Batch<Untyped>, tx: &mut SqliteTx) -> Result<(), Declined> {
    let _ = (orders.len(), tx);
    Ok(())
}

fn main() {}
