//! A `&mut` argument must be a store transaction.

use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

#[handler]
async fn record(order: Order, conn: &mut sqlx::SqliteConnection) -> Result<(), Declined> {
    let _ = (order.id, conn);
    Ok(())
}

fn main() {}
