//! `#[handler]` turns the function's name into a unit struct, so an argument
//! of the same name would be a pattern matching that struct.

use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

#[handler(idempotency_key = order.id)]
async fn order(order: Order) -> Result<(), Declined> {
    let _ = order.id;
    Ok(())
}

fn main() {}
