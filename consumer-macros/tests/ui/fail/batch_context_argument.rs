//! With `batch`, each message has its own context: there is no context
//! argument.

use consumer::batch::Batch;
use consumer::{MessageContext, handler};

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

#[handler(batch)]
async fn record(orders: &mut Batch<Order>, ctx: &MessageContext) -> Result<(), Declined> {
    let _ = (orders.len(), ctx.message_id());
    Ok(())
}

fn main() {}
