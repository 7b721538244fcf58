use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("failed")]
struct Failed;

#[handler(event_type = "")]
async fn record(order: Order) -> Result<(), Failed> {
    let _ = order.id;
    Ok(())
}

fn main() {}
