//! Every mistake is reported at once, each at its own token.

use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

#[handler(retry = exponential(attempts = 0))]
fn record(order: Order) -> Result<(), Declined> {
    let _ = order.id;
    Ok(())
}

fn main() {}
