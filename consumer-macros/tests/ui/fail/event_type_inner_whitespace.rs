use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("failed")]
struct Failed;

#[handler(event_type = "Order Placed")]
async fn record(order: Order) -> Result<(), Failed> {
    let _ = order;
    Ok(())
}

fn main() {}
