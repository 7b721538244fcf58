//! The message type must be one the handler's codec produces.

use consumer::codec::{Codec, Decode};
use consumer::handler;

/// Reads payloads as UTF-8 text, and nothing else.
pub struct Text;

impl Codec for Text {
    const NAME: &'static str = "text";
}

impl Decode<String> for Text {
    async fn decode(&self, payload: &[u8]) -> consumer::codec::Result<String> {
        Ok(String::from_utf8_lossy(payload).into_owned())
    }
}

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

#[derive(Debug, thiserror::Error)]
#[error("declined")]
struct Declined;

#[handler(codec = Text)]
async fn record(order: Order) -> Result<(), Declined> {
    let _ = order.id;
    Ok(())
}

fn main() {}
