//! `batch` without a transaction argument: the batch handler works on any
//! store, and the claim is on each message's id.

use consumer::batch::{Batch, BatchHandler};
use consumer::handler;

#[derive(serde::Deserialize)]
struct Ping {
    n: u32,
}

#[handler(batch, retry = none)]
async fn count_pings(pings: &mut Batch<Ping>) -> anyhow::Result<()> {
    let total: u32 = pings.iter().map(|(_, item)| item.message().n).sum();
    anyhow::ensure!(total < 1_000_000, "too many pings");
    Ok(())
}

fn assert_batch_handler<H: BatchHandler<S>, S: consumer::DedupStore>(_: H) {}

pub fn main() {
    assert_batch_handler::<_, consumer::MemoryStore>(count_pings);
    assert_batch_handler::<_, consumer::SqliteStore>(count_pings);
}
