//! `crate = path`: the expansion names the framework only through the path,
//! so a re-exported (or renamed) dependency works.

mod deps {
    pub use ::consumer as framework;
}

use deps::framework::{SqliteTx, handler};

#[derive(serde::Deserialize)]
struct Tick {
    n: u64,
}

#[derive(Debug, thiserror::Error)]
#[error("tick {0} out of order")]
struct OutOfOrder(u64);

#[handler(crate = self::deps::framework, idempotency_key = tick.n, retry = none)]
async fn on_tick(tick: Tick, _tx: &mut SqliteTx) -> Result<(), OutOfOrder> {
    Err(OutOfOrder(tick.n))
}

fn assert_handler<H: deps::framework::Handler<deps::framework::SqliteStore>>(_: H) {}

pub fn main() {
    assert_handler(on_tick);
}
