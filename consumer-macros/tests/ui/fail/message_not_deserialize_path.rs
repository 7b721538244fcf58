//! A message type named by a path, generic: still one error, at the type.

use consumer::handler;

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

mod orders {
    pub struct Untyped<T> {
        pub id: T,
    }
}

#[handler(event_type = "OrderPlaced")]
async fn record(order: orders::Untyped<String>) -> Result<(), Declined> {
    let _ = order.id;
    Ok(())
}

fn main() {}
