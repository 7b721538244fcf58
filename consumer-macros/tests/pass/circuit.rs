//! `circuit = ..`: a handler's own circuit, in each of its three forms;
//! left out, the handler follows the consumer's.

use std::time::Duration;

use consumer::runtime::CircuitPolicy;
use consumer::{Handler, handler};

#[derive(serde::Deserialize)]
struct Charge {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("gateway down")]
struct GatewayDown;

#[handler(circuit = breaker(opens_after = 3, open_for = "2s", max_open_for = "30s"))]
async fn charge(c: Charge) -> Result<(), GatewayDown> {
    let _ = c.id;
    Ok(())
}

#[handler(circuit = breaker(opens_after = 7))]
async fn refund(c: Charge) -> Result<(), GatewayDown> {
    let _ = c.id;
    Ok(())
}

#[handler(circuit = off)]
async fn audit(c: Charge) -> Result<(), GatewayDown> {
    let _ = c.id;
    Ok(())
}

#[handler(circuit = CircuitPolicy::new(2, Duration::from_secs(1), Duration::from_secs(4)))]
async fn notify(c: Charge) -> Result<(), GatewayDown> {
    let _ = c.id;
    Ok(())
}

#[handler]
async fn plain(c: Charge) -> Result<(), GatewayDown> {
    let _ = c.id;
    Ok(())
}

fn policy<H: Handler<consumer::SqliteStore>>(h: &H) -> Option<CircuitPolicy> {
    h.circuit_policy()
}

pub fn main() {
    assert_eq!(
        policy(&charge),
        Some(CircuitPolicy::new(
            3,
            Duration::from_secs(2),
            Duration::from_secs(30)
        ))
    );
    // Left-out arguments are the default policy's.
    assert_eq!(
        policy(&refund),
        Some(CircuitPolicy::new(
            7,
            Duration::from_secs(5),
            Duration::from_secs(60)
        ))
    );
    assert_eq!(policy(&audit), Some(CircuitPolicy::off()));
    assert_eq!(
        policy(&notify),
        Some(CircuitPolicy::new(
            2,
            Duration::from_secs(1),
            Duration::from_secs(4)
        ))
    );
    assert_eq!(policy(&plain), None);
}
