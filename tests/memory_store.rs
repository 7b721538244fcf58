//! The in-memory dedup store under the full runtime: a handler without a
//! transaction runs on any store, and duplicates are still skipped.

use std::sync::atomic::{AtomicUsize, Ordering};

use consumer::{Consumer, MemoryBroker, MemoryStore, Message, MessageContext, handler};

static CALLS: AtomicUsize = AtomicUsize::new(0);

#[derive(serde::Deserialize, serde::Serialize)]
struct Ping {
    n: u32,
}

#[handler(idempotency_key = ping.n)]
async fn count(ping: Ping, ctx: &MessageContext) -> Result<(), std::io::Error> {
    let _ = (ping.n, ctx.idempotency_key());
    CALLS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_are_skipped_in_memory_too() {
    let broker = MemoryBroker::new(2);
    for n in [1, 2, 1, 3, 2] {
        let m = Message::json("Ping", &Ping { n })
            .expect("json")
            .with_key(n.to_string());
        broker.publish("p", m).await.expect("publish");
    }
    let store = MemoryStore::new();
    let consumer = Consumer::new(broker.source("p"), store.clone(), count);
    let stats = consumer.stats();
    let drained = broker.clone();
    consumer
        .run_until(async move { drained.wait_drained("p").await })
        .await
        .expect("consumer");
    assert_eq!(CALLS.load(Ordering::SeqCst), 3);
    assert_eq!(stats.snapshot().duplicates, 2);
    assert_eq!(store.len(), 3);
}
