//! A handler has concrete message and error types.

use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

#[handler]
async fn record<M: serde::de::DeserializeOwned>(order: M) -> Result<(), Declined> {
    let _ = order;
    Ok(())
}

fn main() {}
