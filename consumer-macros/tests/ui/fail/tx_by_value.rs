//! The transaction is lent to the handler: it commits after the handler returns.

use consumer::{SqliteTx, handler};

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

#[handler]
async fn record(order: Order, tx: SqliteTx) -> Result<(), Declined> {
    let _ = (order.id, tx);
    Ok(())
}

fn main() {}
