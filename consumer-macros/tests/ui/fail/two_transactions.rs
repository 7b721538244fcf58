//! One dedup row, one transaction.

use consumer::{SqliteTx, handler};

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

#[handler]
async fn record(order: Order, tx: &mut SqliteTx, audit: &mut SqliteTx) -> Result<(), Declined> {
    let _ = (order.id, tx, audit);
    Ok(())
}

fn main() {}
