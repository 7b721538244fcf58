//! The runtime's own tests: what its checks refuse, and its clocks.
use super::*;
use crate::envelope::Message;
use crate::handler::{Invocation, Outcome};
use crate::memory::{MemoryAcker, MemoryBroker, MemorySource};
use crate::retry::RetryMode;
use crate::store::MemoryStore;

/// A source that serves no retries through the broker (the default).
struct PlainSource(MemorySource);

impl Source for PlainSource {
    type Acker = MemoryAcker;

    fn system(&self) -> &'static str {
        "plain"
    }

    async fn recv(
        &mut self,
    ) -> Result<Option<(Arc<Envelope>, MemoryAcker)>, consumer_backend::Error> {
        self.0.recv().await
    }
}

struct Redelivering;

impl Handler<MemoryStore> for Redelivering {
    fn name(&self) -> &'static str {
        "redelivering"
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::DEFAULT.with_mode(RetryMode::Redeliver)
    }

    async fn handle(&self, _: &mut Invocation<'_, MemoryStore>) -> Outcome {
        Outcome::Processed
    }
}

/// Fails every message for good, so each one is dead-lettered.
struct Refusing;

impl Handler<MemoryStore> for Refusing {
    fn name(&self) -> &'static str {
        "refusing"
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::none()
    }

    async fn handle(&self, _: &mut Invocation<'_, MemoryStore>) -> Outcome {
        Outcome::Failed(crate::handler::Failure::new(
            crate::handler::FailureKind::Terminal,
            "refused",
        ))
    }
}

/// `with_settle_timeout(Duration::MAX)` used to overflow the deadline
/// of the dead letter's settle step; it now means "no deadline".
#[tokio::test]
async fn a_settle_timeout_past_what_the_clock_counts_saturates() {
    let broker = MemoryBroker::new(1);
    broker
        .publish("t", Message::raw(&b"{}"[..]).with_id("m-1"))
        .await
        .expect("publish");
    let drained = broker.clone();
    let run = Consumer::new(broker.source("t"), MemoryStore::new(), Refusing)
        .with_settle_timeout(Duration::MAX)
        .run_until(async move { drained.wait_drained("t").await });
    // A panicking settle step leaves the delivery unsettled for good.
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the dead letter settled within 60 s")
        .expect("consumer");
    let letters = broker.dead_letter_records("t");
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0].message_id, "m-1");
}

#[tokio::test]
async fn a_retry_mode_the_source_cannot_serve_is_refused_before_a_delivery_is_taken() {
    let broker = MemoryBroker::new(1);
    broker
        .publish("t", Message::raw(&b"{}"[..]))
        .await
        .expect("publish");
    let source = PlainSource(broker.source("t"));
    let err = Consumer::new(source, MemoryStore::new(), Redelivering)
        .run_until(std::future::pending())
        .await
        .expect_err("refused");
    assert!(matches!(err, Error::RetryUnsupported { .. }), "{err}");
    assert!(err.to_string().contains("in_place"), "{err}");
    assert_eq!(broker.depth("t"), 1, "nothing was taken");
}

/// Fails every attempt transiently, each message once (no retries): what
/// is behind it is down. Its circuit is its own.
struct Down(Option<CircuitPolicy>);

impl Handler<MemoryStore> for Down {
    fn name(&self) -> &'static str {
        "down"
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::none()
    }

    fn circuit_policy(&self) -> Option<CircuitPolicy> {
        self.0
    }

    async fn handle(&self, _: &mut Invocation<'_, MemoryStore>) -> Outcome {
        Outcome::Failed(crate::handler::Failure::new(
            crate::handler::FailureKind::Transient,
            "the gateway is down",
        ))
    }
}

async fn five_messages() -> MemoryBroker {
    let broker = MemoryBroker::new(1);
    for i in 0..5 {
        broker
            .publish("t", Message::raw(&b"{}"[..]).with_id(format!("m-{i}")))
            .await
            .expect("publish");
    }
    broker
}

#[tokio::test]
async fn a_handlers_own_circuit_opens_where_the_consumer_sets_none() {
    let broker = five_messages().await;
    let own = CircuitPolicy::new(2, Duration::from_secs(60), Duration::from_secs(60));
    let consumer = Consumer::new(broker.source("t"), MemoryStore::new(), Down(Some(own)));
    let stats = consumer.stats();
    let opened = stats.clone();
    let run = consumer.run_until(async move {
        opened.wait_for(|s| s.circuits_opened >= 1).await;
    });
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the handler's circuit opened within 60 s")
        .expect("consumer");
    let s = stats.snapshot();
    // The first failure spent the message's only attempt; the second
    // opened the circuit and waits, unspent; the others wait too.
    assert_eq!(s.dead_letters(), 1, "{s:?}");
}

#[tokio::test]
async fn a_handler_whose_circuit_is_off_is_never_stopped_by_the_consumers() {
    let broker = five_messages().await;
    let consumers = CircuitPolicy::new(2, Duration::from_millis(10), Duration::from_millis(10));
    let drained = broker.clone();
    let consumer = Consumer::new(
        broker.source("t"),
        MemoryStore::new(),
        Down(Some(CircuitPolicy::off())),
    )
    .with_circuit(consumers);
    let stats = consumer.stats();
    let run = consumer.run_until(async move { drained.wait_drained("t").await });
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("drained within 60 s")
        .expect("consumer");
    let s = stats.snapshot();
    assert_eq!(s.circuits_opened, 0, "{s:?}");
    assert_eq!(s.dead_letters(), 5, "{s:?}");
}
