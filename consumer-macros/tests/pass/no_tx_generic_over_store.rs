//! Without a transaction the handler runs on either store.

use consumer::{MessageContext, handler};

#[derive(serde::Deserialize)]
struct Ping {
    seq: u64,
}

#[derive(Debug, thiserror::Error)]
#[error("ping {0} lost")]
struct PingError(u64);

#[handler]
async fn answer_ping(ping: Ping, ctx: &MessageContext) -> Result<(), PingError> {
    if ctx.attempt() > 3 {
        return Err(PingError(ping.seq));
    }
    Ok(())
}

fn assert_sqlite<H: consumer::Handler<consumer::SqliteStore>>(_: H) {}
fn assert_postgres<H: consumer::Handler<consumer::PgStore>>(_: H) {}
fn assert_memory<H: consumer::Handler<consumer::MemoryStore>>(_: H) {}

pub fn main() {
    assert_sqlite(answer_ping);
    assert_postgres(answer_ping);
    assert_memory(answer_ping);
}
