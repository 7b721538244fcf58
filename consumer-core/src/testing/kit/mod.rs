//! The application test kit: [`TestKit`] and what it reports. Its parts:
//! the virtual clock (`clock`), the listener on the runtime's observer
//! (`track`), the relay's recording publisher (`published`), the cascade's
//! settling (`settle`), a message's outcome (`delivery`), the errors
//! (`error`), its set-up (`builder`).

mod builder;
mod clock;
mod delivery;
mod error;
mod published;
mod settle;
mod track;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::de::DeserializeOwned;
use sqlx::SqlitePool;
use tokio::sync::watch;
use tokio::task::JoinSet;

pub use builder::TestKitBuilder;
pub use delivery::{Delivery, Outcome};
pub use error::KitError;
pub use published::Published;

use crate::dead_letter::DeadLetter;
use crate::envelope::Message;
use crate::router::{OneHandler, Routes};
use crate::testing::{Faults, FaultyPublisher};
use crate::{Consumer, Handler, MemoryBroker, Outbox, OutboxRelay, SqliteStore};
use clock::{Ticker, WallDeadline};
use published::Recording;
use track::{Place, Tracker};

/// The application test kit (feature `testing`, with `sqlite`): the
/// handlers, routers and sagas a service runs, on the memory broker and an
/// in-memory SQLite store, on a virtual clock, with what happened to each
/// message, what was published and what was dead-lettered there to assert
/// on. A tracked session in Wolverine's sense: send, then wait until the
/// whole cascade has settled.
///
/// The `consumer` crate's guide shows it at work on its page "Testing your
/// service"; in short:
///
/// ```
/// use consumer_core::testing::TestKit;
/// use consumer_core::{Message, Router, SqliteStore};
/// # async fn demo(router: Router<SqliteStore>) -> Result<(), Box<dyn std::error::Error>> {
/// let mut kit = TestKit::new().await?;
/// kit.router("orders", router);
/// let order = serde_json::json!({ "order_id": "o-1" });
/// kit.deliver("orders", Message::json("OrderPlaced", &order)?.with_key("o-1"))
///     .await?
///     .assert_processed();
/// kit.settle().await?; // what it published, relayed and consumed in turn
/// # Ok(())
/// # }
/// ```
///
/// **The clock.** The kit pauses Tokio's clock (so it needs the
/// current-thread runtime `#[tokio::test]` gives): a handler's retry
/// backoff, a retry copy's delay, a scheduled event and a saga's timeout
/// all wait on it, and take no wall time. The stores read the same clock
/// (`testing` makes their "now" follow Tokio's), so [`TestKit::settle`]
/// and [`TestKit::advance`] fire scheduled events and saga timeouts by
/// moving it. While SQLite's thread answers a query the clock moves on
/// in steps of 10 ms, as if the database were a little slow (a clock that
/// jumped there could fire a pool's timeout mid-query). Every wait is bounded by a wall-clock timeout
/// ([`TestKitBuilder::with_timeout`], 10 s by default) whose error names
/// what is still in flight.
///
/// **Outcomes** come from the runtime's own events: the kit installs a
/// listener on each consumer's observer (a field that exists only with
/// `testing`, and costs one untaken branch per event when no kit is
/// installed).
pub struct TestKit {
    broker: MemoryBroker,
    pool: SqlitePool,
    store: SqliteStore,
    tracker: Arc<Tracker>,
    recording: Recording,
    /// The faults of the relays' publisher ([`TestKit::relay_faults`]).
    relay_faults: Faults,
    /// The faults of the test's own dependencies ([`TestKit::faults`]).
    faults: Faults,
    relays: Vec<(Outbox, OutboxRelay<sqlx::Sqlite, Recording>)>,
    topics: Vec<String>,
    consumers: JoinSet<()>,
    stop: watch::Sender<bool>,
    timeout: Duration,
    /// What the last settle pass saw of the outboxes, for a timeout's report.
    outbox_seen: Mutex<Vec<String>>,
    _ticker: Ticker,
}

/// A message the kit sent: where the broker stored it, to wait for its
/// outcome with [`TestKit::outcome`].
#[derive(Debug, Clone)]
pub struct Sent {
    place: Place,
    /// Its id (`ce_id`), when it has one.
    pub id: Option<String>,
}

impl std::fmt::Display for Sent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.id {
            Some(id) => write!(f, "message `{id}` on `{}`", self.place.topic),
            None => write!(
                f,
                "the message at {}/{} of `{}`",
                self.place.partition, self.place.offset, self.place.topic
            ),
        }
    }
}

impl TestKit {
    /// A kit with the defaults: see [`TestKitBuilder::start`].
    ///
    /// # Panics
    ///
    /// Outside a current-thread Tokio runtime (use `#[tokio::test]`).
    pub async fn new() -> Result<Self, KitError> {
        TestKitBuilder::default().start().await
    }

    /// A kit to set up first (store extensions, timeout).
    pub fn builder() -> TestKitBuilder {
        TestKitBuilder::default()
    }

    /// The database (one connection): create the application's tables
    /// here, read what handlers wrote.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// The store the consumers run on.
    pub fn store(&self) -> &SqliteStore {
        &self.store
    }

    /// The memory broker.
    pub fn broker(&self) -> &MemoryBroker {
        &self.broker
    }

    /// Runs `handler` on `topic`, as `Consumer::new` would.
    pub fn handler<H: Handler<SqliteStore>>(&mut self, topic: &str, handler: H) -> &mut Self {
        self.consume(topic, OneHandler(handler))
    }

    /// Runs a router (or any [`Routes`]) on `topic`, as `Consumer::router`
    /// would: a saga is a route of a router.
    pub fn router<R: Routes<SqliteStore>>(&mut self, topic: &str, routes: R) -> &mut Self {
        self.consume(topic, routes)
    }

    fn consume<R: Routes<SqliteStore>>(&mut self, topic: &str, routes: R) -> &mut Self {
        let tracker = Arc::clone(&self.tracker);
        let consumer = Consumer::routed(self.broker.source(topic), self.store.clone(), routes)
            .with_tap(Arc::clone(&tracker) as _);
        let mut stop = self.stop.subscribe();
        let name = topic.to_owned();
        self.consumers.spawn(async move {
            let stopping = async move {
                let _ = stop.wait_for(|stopped| *stopped).await;
            };
            if let Err(e) = consumer.run_until(stopping).await {
                tracker.consumer_stopped(&name, e.to_string());
            }
        });
        self.topics.push(topic.to_owned());
        self
    }

    /// Relays `outbox` to the memory broker while the kit settles,
    /// recording what it publishes (see [`TestKit::published`]); creates
    /// its tables when its name is not the default one.
    pub async fn relay(&mut self, outbox: Outbox) -> Result<&mut Self, KitError> {
        outbox.create_tables(&self.pool).await?;
        let relay = OutboxRelay::new(self.pool.clone(), outbox.clone(), self.recording.clone())
            .with_source("test-kit");
        self.relays.push((outbox, relay));
        Ok(self)
    }

    /// The faults of the relays' publisher, to arm: publish the next
    /// events twice ([`Faults::duplicate_next_publishes`], as after a lost
    /// confirm) or fail them ([`Faults::fail_next_publishes`], a broker
    /// that is down for a while; the relay retries them on the virtual
    /// clock). A handler's own dependencies take the fault kit's wrappers
    /// the same way, where the test builds them.
    pub fn relay_faults(&self) -> &Faults {
        &self.relay_faults
    }

    /// The fault kit for the handlers' own dependencies, a handle apart
    /// from [`TestKit::relay_faults`]: wrap a dependency in the fault
    /// kit's wrappers with it (a publisher in
    /// [`FaultyPublisher::new(dependency, kit.faults().clone())`](FaultyPublisher::new),
    /// or take [`TestKit::publisher`]), then arm what goes wrong next:
    /// [`Faults::fail_next_publishes`] (a dependency down for a while: the
    /// handler fails, and its retry policy runs on the virtual clock),
    /// [`Faults::refuse_next_publishes`] (a refusal for good),
    /// [`Faults::duplicate_next_publishes`] (sent twice).
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// A publisher to the kit's memory broker behind [`TestKit::faults`]:
    /// the dependency to give a handler that publishes directly rather
    /// than through the outbox (a notification, a call to another
    /// system). What it sends lands on the kit's broker, where a consumer
    /// of the kit takes it and [`TestKit::settle`] waits for it; it is not
    /// in [`TestKit::published`], which is the relays'.
    pub fn publisher(&self) -> FaultyPublisher<MemoryBroker> {
        FaultyPublisher::new(self.broker.clone(), self.faults.clone())
    }

    /// Publishes `message` to `topic` (build it with [`Message::json`] and
    /// its `with_key`, `with_header`, `with_id`, `with_source`; or
    /// [`Message::raw`] for a payload that is not an event).
    pub async fn send(&self, topic: &str, message: Message) -> Result<Sent, KitError> {
        let id = message
            .headers
            .get(crate::envelope::names::ID)
            .ok()
            .flatten()
            .map(str::to_owned);
        let at = self
            .broker
            .publish(topic, message)
            .await
            .map_err(crate::Error::from)?;
        Ok(Sent {
            place: Place {
                topic: topic.to_owned(),
                partition: i32::try_from(at.partition).unwrap_or(i32::MAX),
                offset: i64::try_from(at.offset).unwrap_or(i64::MAX),
            },
            id,
        })
    }

    /// Waits for what became of `sent`: processed, a duplicate, or
    /// dead-lettered, after however many retries its handler's policy
    /// made on the virtual clock. Does not relay the outbox (see
    /// [`TestKit::settle`]). Fails at once when no consumer of the kit
    /// reads its topic.
    pub async fn outcome(&self, sent: &Sent) -> Result<Delivery, KitError> {
        let place = sent.place.clone();
        if !self.topics.contains(&place.topic) {
            return Err(KitError::NoConsumer { topic: place.topic });
        }
        let tracker = &self.tracker;
        self.bounded(format!("the outcome of {sent}"), async {
            tokio::select! {
                delivery = tracker.wait_for(|t| t.ended(&place)) => Ok(delivery),
                (topic, error) = tracker.wait_for(|t| t.stopped().into_iter().next()) => {
                    Err(KitError::ConsumerStopped { topic, error })
                }
            }
        })
        .await
    }

    /// Sends `message` to `topic` and waits for its outcome.
    pub async fn deliver(&self, topic: &str, message: Message) -> Result<Delivery, KitError> {
        let sent = self.send(topic, message).await?;
        self.outcome(&sent).await
    }

    /// Every message the consumers finished with, in the order they did.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.tracker.history()
    }

    /// Everything the kit's relays published, in order.
    pub fn published(&self) -> Vec<Published> {
        self.recording.published()
    }

    /// What the relays published to `destination`, in order.
    pub fn published_to(&self, destination: &str) -> Vec<Published> {
        let mut all = self.published();
        all.retain(|p| p.destination == destination);
        all
    }

    /// The payloads of type `event_type` the relays published, decoded as
    /// `T`, in order.
    pub fn published_of<T: DeserializeOwned>(
        &self,
        event_type: &str,
    ) -> Result<Vec<T>, serde_json::Error> {
        self.published()
            .iter()
            .filter(|p| p.event_type() == Some(event_type))
            .map(Published::payload)
            .collect()
    }

    /// The dead letters of `topic`, with their structured context.
    pub fn dead_letters(&self, topic: &str) -> Vec<DeadLetter> {
        self.broker.dead_letter_records(topic)
    }

    /// Runs `work` within the kit's wall-clock timeout; on timeout, the
    /// error names what is still pending.
    async fn bounded<T>(
        &self,
        waiting: String,
        work: impl Future<Output = Result<T, KitError>>,
    ) -> Result<T, KitError> {
        tokio::select! {
            result = work => result,
            () = WallDeadline::after(self.timeout) => Err(KitError::Timeout {
                waiting,
                timeout: self.timeout,
                pending: self.pending(),
            }),
        }
    }

    /// What is in flight now, as far as the kit can tell without a query.
    fn pending(&self) -> Vec<String> {
        let mut pending = self.tracker.in_flight();
        for topic in &self.topics {
            let depth = self.broker.depth(topic);
            if depth > 0 {
                pending.push(format!("{depth} message(s) of `{topic}` not settled"));
            }
        }
        for (topic, error) in self.tracker.stopped() {
            pending.push(format!("the consumer of `{topic}` stopped: {error}"));
        }
        pending.extend(
            self.outbox_seen
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .cloned(),
        );
        if pending.is_empty() {
            pending.push(
                "nothing the kit tracks (a message to a topic no consumer of the kit reads?)"
                    .into(),
            );
        }
        pending
    }
}

impl Drop for TestKit {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}
