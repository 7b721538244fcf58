//! With `batch` too, a `&mut` argument must be a store transaction: one
//! error, at the type, naming the transaction types.

use consumer::batch::Batch;
use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

#[handler(batch)]
async fn record(
    orders: &mut Batch<Order>,
    conn: &mut sqlx::SqliteConnection,
) -> Result<(), Declined> {
    let _ = (orders.len(), conn);
    Ok(())
}

fn main() {}
