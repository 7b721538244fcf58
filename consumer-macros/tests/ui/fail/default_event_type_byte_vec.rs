use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("failed")]
struct Failed;

#[handler]
async fn record(order: Vec<u8>) -> Result<(), Failed> {
    let _ = order;
    Ok(())
}

fn main() {}
