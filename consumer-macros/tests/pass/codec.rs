//! `codec = json` (the default, said aloud) and a codec of the
//! application's own, by path; a consumer holds the codec.

use consumer::codec::{Codec, Decode};
use consumer::{Consumer, MemoryStore, handler};

/// Reads payloads as UTF-8 text.
pub struct Text;

impl Codec for Text {
    const NAME: &'static str = "text";
}

impl Decode<String> for Text {
    async fn decode(&self, payload: &[u8]) -> consumer::codec::Result<String> {
        Ok(String::from_utf8_lossy(payload).into_owned())
    }
}

mod formats {
    pub use super::Text;
}

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

#[handler(codec = json)]
async fn record(order: Order) -> Result<(), Declined> {
    let _ = order.id;
    Ok(())
}

#[handler(codec = formats::Text, idempotency_key = line.len(), event_type = "Line")]
async fn lines(line: String) -> Result<(), Declined> {
    let _ = line;
    Ok(())
}

pub fn main() {
    let broker = consumer::memory::MemoryBroker::new(1);
    let _ = Consumer::new(broker.source("orders"), MemoryStore::new(), record);
    let _ = Consumer::new(broker.source("lines"), MemoryStore::new(), lines).with_codec(Text);
}
