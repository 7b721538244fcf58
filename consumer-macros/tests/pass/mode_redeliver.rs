//! `mode = redeliver` sends retries back through the broker.

use consumer::{Handler, RetryMode, SqliteTx, handler};

#[derive(serde::Deserialize)]
struct Shipment {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("carrier unavailable")]
struct CarrierDown;

#[handler(retry = exponential(mode = redeliver))]
async fn ship(shipment: Shipment, _tx: &mut SqliteTx) -> Result<(), CarrierDown> {
    let _ = shipment.id;
    Err(CarrierDown)
}

fn assert_handler<H: Handler<consumer::SqliteStore>>(_: H) {}

pub fn main() {
    assert_handler(ship);
    assert!(matches!(ship.retry_policy().mode(), RetryMode::Redeliver));
}
