//! `on_dead_letter` takes `hold_key` or `move_on`.

use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

#[handler(on_dead_letter = park)]
async fn record(order: Order) -> Result<(), Declined> {
    let _ = order.id;
    Ok(())
}

fn main() {}
