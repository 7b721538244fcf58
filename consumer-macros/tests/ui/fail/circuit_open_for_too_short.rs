//! A circuit stays open at least 10 ms: a shorter time is refused, not raised.

use consumer::handler;

#[derive(serde::Deserialize)]
struct Charge {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("gateway down")]
struct GatewayDown;

#[handler(circuit = breaker(open_for = "1ms"))]
async fn charge(c: Charge) -> Result<(), GatewayDown> {
    let _ = c.id;
    Ok(())
}

fn main() {}
