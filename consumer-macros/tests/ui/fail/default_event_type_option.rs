use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("failed")]
struct Failed;

#[handler]
async fn record(order: Option<Order>) -> Result<(), Failed> {
    let _ = order;
    Ok(())
}

fn main() {}
