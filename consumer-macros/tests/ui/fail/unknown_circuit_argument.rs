//! An unknown `breaker` argument names the ones there are.

use consumer::handler;

#[derive(serde::Deserialize)]
struct Charge {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("gateway down")]
struct GatewayDown;

#[handler(circuit = breaker(threshold = 5))]
async fn charge(c: Charge) -> Result<(), GatewayDown> {
    let _ = c.id;
    Ok(())
}

fn main() {}
