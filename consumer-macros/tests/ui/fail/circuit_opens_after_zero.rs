//! `opens_after = 0` opens nothing.

use consumer::handler;

#[derive(serde::Deserialize)]
struct Charge {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("gateway down")]
struct GatewayDown;

#[handler(circuit = breaker(opens_after = 0))]
async fn charge(c: Charge) -> Result<(), GatewayDown> {
    let _ = c.id;
    Ok(())
}

fn main() {}
