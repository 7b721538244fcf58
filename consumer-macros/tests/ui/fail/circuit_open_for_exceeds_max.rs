//! The first open time may not exceed the longest (60 s by default).

use consumer::handler;

#[derive(serde::Deserialize)]
struct Charge {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("gateway down")]
struct GatewayDown;

#[handler(circuit = breaker(open_for = "2m"))]
async fn charge(c: Charge) -> Result<(), GatewayDown> {
    let _ = c.id;
    Ok(())
}

fn main() {}
