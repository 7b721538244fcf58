//! Per-handler limits under the full runtime (no services: the memory
//! broker and store, on tokio's paused clock, so the rate is measured in
//! virtual time, exactly): at most N attempts of a handler at once, at most
//! R started per period, and a limit that names no handler refused.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use consumer::runtime::HandlerLimit;
use consumer::{Consumer, MemoryBroker, MemoryStore, Message, MessageContext, handler};
use tokio::time::Instant;

#[derive(serde::Deserialize, serde::Serialize)]
struct Job {
    n: u32,
}

static RUNNING: AtomicUsize = AtomicUsize::new(0);
static MOST: AtomicUsize = AtomicUsize::new(0);

/// Holds each attempt 50 ms (virtual) and keeps the most at once.
#[handler(idempotency_key = job.n)]
async fn slow(job: Job, ctx: &MessageContext) -> Result<(), std::io::Error> {
    let _ = (job.n, ctx);
    let now = RUNNING.fetch_add(1, Ordering::SeqCst) + 1;
    MOST.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(50)).await;
    RUNNING.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

static STARTS: Mutex<Vec<Instant>> = Mutex::new(Vec::new());

#[handler(idempotency_key = job.n)]
async fn paced(job: Job, ctx: &MessageContext) -> Result<(), std::io::Error> {
    let _ = (job.n, ctx);
    STARTS.lock().expect("starts").push(Instant::now());
    Ok(())
}

/// `n` jobs, each on a key of its own (nothing orders them).
async fn broker_with(topic: &str, n: u32) -> MemoryBroker {
    let broker = MemoryBroker::new(4);
    for i in 0..n {
        let m = Message::json("Job", &Job { n: i })
            .expect("json")
            .with_key(format!("k{i}"));
        broker.publish(topic, m).await.expect("publish");
    }
    broker
}

#[tokio::test(start_paused = true)]
async fn a_concurrency_limit_bounds_a_handlers_attempts_at_once() {
    let broker = broker_with("c", 12).await;
    let drained = broker.clone();
    let consumer = Consumer::new(broker.source("c"), MemoryStore::new(), slow)
        .with_max_in_flight(64)
        .with_handler_limit("slow", HandlerLimit::default().with_concurrency(3));
    let stats = consumer.stats();
    consumer
        .run_until(async move { drained.wait_drained("c").await })
        .await
        .expect("consumer");
    assert_eq!(stats.snapshot().processed, 12);
    assert_eq!(MOST.load(Ordering::SeqCst), 3, "three at once, never more");
}

#[tokio::test(start_paused = true)]
async fn a_rate_limit_spaces_a_handlers_attempts() {
    let broker = broker_with("r", 10).await;
    let drained = broker.clone();
    // 5 a second, 2 at once after an idle spell: two start at once, then
    // one every 200 ms.
    let limit = HandlerLimit::default()
        .with_rate(5, Duration::from_secs(1))
        .with_burst(2);
    Consumer::new(broker.source("r"), MemoryStore::new(), paced)
        .with_max_in_flight(64)
        .with_handler_limit("paced", limit)
        .run_until(async move { drained.wait_drained("r").await })
        .await
        .expect("consumer");
    let mut starts = STARTS.lock().expect("starts").clone();
    starts.sort();
    assert_eq!(starts.len(), 10);
    let since: Vec<u128> = starts
        .iter()
        .map(|s| s.duration_since(starts[0]).as_millis())
        .collect();
    assert_eq!(since, [0, 0, 200, 400, 600, 800, 1000, 1200, 1400, 1600]);
}

#[tokio::test]
async fn a_limit_on_a_handler_the_consumer_does_not_run_is_refused() {
    let broker = MemoryBroker::new(1);
    let refused = Consumer::new(broker.source("x"), MemoryStore::new(), paced)
        .with_handler_limit("pacde", HandlerLimit::default().with_concurrency(1))
        .run_until(async {})
        .await
        .expect_err("refused");
    assert!(refused.to_string().contains("`pacde`"), "{refused}");
}
