//! With `batch`, `terminal` is matched against the boxed error, which
//! needs the error type written out.

use consumer::batch::Batch;
use consumer::handler;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

type Result<T> = std::result::Result<T, Declined>;

#[handler(batch, terminal = Declined)]
async fn record(orders: &mut Batch<Order>) -> Result<()> {
    let _ = orders.len();
    Ok(())
}

fn main() {}
