//! A handler takes the message as its first argument.

use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

#[handler]
async fn record() -> Result<(), Declined> {
    Ok(())
}

fn main() {}
