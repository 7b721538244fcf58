//! The attribute goes on a function, not a struct.

use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

#[handler]
struct Record {
    order: Order,
}

fn main() {
    let _ = Declined;
}
