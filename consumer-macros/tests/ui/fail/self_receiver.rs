//! A handler is a free function, not a method.

use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

struct Service;

impl Service {
    #[handler]
    async fn record(&self, order: Order) -> Result<(), Declined> {
        let _ = order.id;
        Ok(())
    }
}

fn main() {}
