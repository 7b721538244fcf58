//! The saga cases of the conformance suite: what a saga promises on every
//! broker and both stores. The example's order saga (`examples/saga_shop`)
//! runs whole on each broker; `tally`, a small saga below, shows each
//! promise on its own.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::Duration;

use consumer::outbox::ScheduleToken;
use consumer::saga::{NotFound, SagaBuilder, SagaHandler, SagaRecord, SagaStatus, SagaStore, Step};
use consumer::{
    Consumer, DeadLetterKind, Message, Outbox, OutboxRelay, Outgoing, Publisher, RetryPolicy,
    Router, Saga, retry::RetryMode,
};
use serde::{Deserialize, Serialize};

use super::cases::{SuiteStore, run_routes_until_drained};
use crate::conformance::broker::BrokerHarness;
use crate::conformance::support::{self, Harness};
use crate::{SuiteHarness, SuiteTx};

#[path = "../../examples/saga_shop/mod.rs"]
pub mod saga_shop;

use saga_shop::{Destinations, Sources};

// ---------------------------------------------------------------------------
// The shop's participants on the suite's store.

saga_shop::participant_handlers!(SuiteTx, SuiteStore);

/// The harness's publisher, owned, for a relay.
#[derive(Clone)]
pub struct HarnessPublisher<B>(pub B);

impl<B: BrokerHarness> Publisher for HarnessPublisher<B> {
    fn system(&self) -> &'static str {
        self.0.publisher().system()
    }

    async fn publish(&self, batch: &[Outgoing]) -> Vec<Result<(), consumer::backend::Error>> {
        Publisher::publish(self.0.publisher(), batch).await
    }
}

fn pool(h: &SuiteHarness) -> sqlx::Pool<<SuiteHarness as Harness>::Db> {
    h.store().pool().clone()
}

// ---------------------------------------------------------------------------
// `tally`: notes what each event says; `Open` starts it (and may schedule
// `Expire`), `Add` waits for it (redelivered), `AddStrict` is dead-lettered
// without it, `AddQuiet` ignored; `Close` completes it.

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TallyEvent {
    pub saga: String,
    pub note: String,
    #[serde(default)]
    pub expire_after_ms: Option<u64>,
    #[serde(default)]
    pub hold: Option<u64>,
}

impl TallyEvent {
    pub fn new(saga: &str, note: &str) -> Self {
        Self {
            saga: saga.into(),
            note: note.into(),
            expire_after_ms: None,
            hold: None,
        }
    }

    pub fn expiring(mut self, ms: u64) -> Self {
        self.expire_after_ms = Some(ms);
        self
    }

    /// The message of type `kind`, keyed by its saga.
    pub fn message(&self, kind: &str) -> Message {
        Message::json(kind, self)
            .expect("a TallyEvent serialises")
            .with_key(self.saga.clone())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Expire {
    pub saga: String,
}

#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    pub notes: Vec<String>,
    pub timeout: Option<ScheduleToken>,
}

#[derive(Debug, thiserror::Error)]
#[error("never")]
pub struct Never;

pub struct TallySaga {
    /// Where its commands go (nobody reads them).
    pub sink: String,
}

impl Saga for TallySaga {
    type State = Tally;
    type Error = Never;

    fn name(&self) -> &'static str {
        "tally"
    }
}

/// Transitions held at their first run until the test releases them: the
/// sending side of `entered`, the receiving side of the release.
type HoldGate = (tokio::sync::mpsc::UnboundedSender<()>, mpsc::Receiver<()>);

fn holds() -> &'static Mutex<HashMap<u64, HoldGate>> {
    static HOLDS: OnceLock<Mutex<HashMap<u64, HoldGate>>> = OnceLock::new();
    HOLDS.get_or_init(Mutex::default)
}

/// A gate for `TallyEvent::hold`: the receiver says when a transition is
/// held in it, the sender releases it.
fn hold_gate(id: u64) -> (tokio::sync::mpsc::UnboundedReceiver<()>, mpsc::Sender<()>) {
    let (entered_tx, entered_rx) = tokio::sync::mpsc::unbounded_channel();
    let (release_tx, release_rx) = mpsc::channel();
    holds()
        .lock()
        .expect("holds")
        .insert(id, (entered_tx, release_rx));
    (entered_rx, release_tx)
}

impl TallySaga {
    fn note(&self, tally: &mut Tally, e: &TallyEvent, step: &mut Step<'_>, command: &str) {
        tally.notes.push(e.note.clone());
        step.send(&self.sink, command, e);
    }

    fn open(&self, tally: &mut Tally, e: TallyEvent, step: &mut Step<'_>) -> Result<(), Never> {
        self.note(tally, &e, step, "Opened");
        if let Some(ms) = e.expire_after_ms {
            let expire = Expire {
                saga: e.saga.clone(),
            };
            tally.timeout =
                Some(step.schedule_timeout("Expire", &expire, Duration::from_millis(ms)));
        }
        Ok(())
    }

    fn add(&self, tally: &mut Tally, e: TallyEvent, step: &mut Step<'_>) -> Result<(), Never> {
        // Held at its first run only: the run after a conflict goes through.
        let gate = e
            .hold
            .and_then(|id| holds().lock().expect("holds").remove(&id));
        if let Some((entered, unblocked)) = gate {
            let _ = entered.send(());
            tokio::task::block_in_place(|| {
                unblocked
                    .recv_timeout(Duration::from_secs(60))
                    .expect("the test releases a held transition")
            });
        }
        self.note(tally, &e, step, "Added");
        Ok(())
    }

    fn renew(&self, tally: &mut Tally, e: TallyEvent, step: &mut Step<'_>) -> Result<(), Never> {
        if let Some(old) = tally.timeout.take() {
            step.cancel_timeout(old);
        }
        let expire = Expire {
            saga: e.saga.clone(),
        };
        tally.timeout = Some(step.schedule_timeout("Expire", &expire, Duration::from_secs(3600)));
        tally.notes.push(e.note);
        Ok(())
    }

    fn close(&self, tally: &mut Tally, e: TallyEvent, step: &mut Step<'_>) -> Result<(), Never> {
        tally.notes.push(e.note);
        step.complete();
        Ok(())
    }

    fn expire(&self, tally: &mut Tally, _e: Expire, step: &mut Step<'_>) -> Result<(), Never> {
        tally.notes.push("expired".into());
        step.fail("expired");
        Ok(())
    }
}

/// `tally` with its timeouts to `orders` (the broker's destination of the
/// topic it reads) and its commands to `sink`.
pub fn tally(timeouts_to: String, sink: String) -> SagaHandler<TallySaga> {
    let saga = |e: &TallyEvent| e.saga.clone();
    let redeliver =
        RetryPolicy::exponential(Duration::from_millis(20), Duration::from_millis(200), 8)
            .with_mode(RetryMode::Redeliver);
    SagaBuilder::new(TallySaga { sink }, Outbox::new())
        .on("Open", saga, NotFound::Start, TallySaga::open)
        .on("Add", saga, NotFound::Retry(redeliver), TallySaga::add)
        .on(
            "AddStrict",
            saga,
            NotFound::dead_letter("a strict add needs an open tally"),
            TallySaga::add,
        )
        .on("AddQuiet", saga, NotFound::Ignore, TallySaga::add)
        .on("Renew", saga, NotFound::Ignore, TallySaga::renew)
        .on("Close", saga, NotFound::Ignore, TallySaga::close)
        .on_timeout("Expire", TallySaga::expire)
        .with_timeouts_to(timeouts_to)
        .build()
        .expect("a valid saga")
}

fn tally_on<B: BrokerHarness>(broker: &B, topic: &str) -> SagaHandler<TallySaga> {
    tally(
        broker.publish_destination(topic),
        broker.publish_destination("sink"),
    )
}

fn router(saga: SagaHandler<TallySaga>) -> Router<SuiteStore> {
    Router::builder("tallies")
        .route(saga)
        .build()
        .expect("a router")
}

async fn record(h: &SuiteHarness, id: &str) -> SagaRecord {
    SagaStore::new(pool(h))
        .get("tally", id)
        .await
        .expect("read the saga")
        .unwrap_or_else(|| panic!("no saga tally {id}"))
}

async fn count(h: &SuiteHarness, sql: &str, saga: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .bind(saga)
        .fetch_one(&pool(h))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Outbox rows of `saga`: `(commands and released timeouts, timeouts still scheduled)`.
async fn outbox_rows(h: &SuiteHarness, saga: &str) -> (i64, i64) {
    (
        count(h, "SELECT count(*) FROM outbox_events WHERE aggregate_type = 'tally' AND aggregate_id = $1", saga).await,
        count(h, "SELECT count(*) FROM outbox_events_scheduled WHERE aggregate_type = 'tally' AND aggregate_id = $1", saga).await,
    )
}

fn notes(r: &SagaRecord) -> Vec<String> {
    r.state["notes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|n| n.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn history(r: &SagaRecord) -> Vec<(i64, String)> {
    r.history
        .iter()
        .map(|h| (h.version(), h.event_type().to_owned()))
        .collect()
}

// ---------------------------------------------------------------------------
// The cases.

/// The example's service, whole, on this broker and store: `ada` is paid
/// and shipped, `bob` times out waiting for his payment, `cy` fails at
/// inventory and is refunded, `dee`'s refund fails for good: her saga ends
/// `compensation_failed`, dead-lettered to the store's table with its
/// context.
pub async fn the_saga_shop_completes_times_out_compensates_and_dead_letters_a_failed_compensation<
    B: BrokerHarness,
>() {
    let h = SuiteHarness::new().await;
    let broker = B::new(2).await;
    let topics = ["orders", "payments", "inventory", "shipping"];
    for t in topics {
        broker.prepare(t).await;
    }
    let to = Destinations {
        orders: broker.publish_destination("orders"),
        payments: broker.publish_destination("payments"),
        inventory: broker.publish_destination("inventory"),
        shipping: broker.publish_destination("shipping"),
    };
    let sources = Sources {
        orders: broker.source("orders").await,
        payments: broker.source("payments").await,
        inventory: broker.source("inventory").await,
        shipping: broker.source("shipping").await,
    };
    let participants = participants().expect("the participants' routers");
    let (service, _) = saga_shop::service(
        pool(&h),
        h.store(),
        HarnessPublisher(broker.clone()),
        sources,
        participants,
        to,
    )
    .expect("the shop's service");
    for order in saga_shop::orders("") {
        let message = Message::json("OrderPlaced", &order)
            .expect("json")
            .with_key(order.order_id.clone());
        BrokerHarness::publish(&broker, "orders", message)
            .await
            .expect("publish");
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(service.run_until(async move {
        let _ = stopped.await;
    }));
    let sagas = SagaStore::new(pool(&h));
    let mut running = running;
    let finished = tokio::select! {
        records = support::within(saga_shop::wait_finished(&sagas, "")) => records,
        ended = &mut running => panic!("the service stopped before the sagas finished: {ended:?}"),
    };
    let records = finished.expect("read the sagas");
    let _ = stop.send(());
    support::within(running)
        .await
        .expect("join")
        .expect("the service");

    let report = saga_shop::assert_ended_as_expected(&records);
    for r in &records {
        assert!(
            r.timeouts.is_empty(),
            "a finished saga waits for nothing: {report}"
        );
        assert_eq!(
            count(
                &h,
                "SELECT count(*) FROM outbox_events_scheduled WHERE aggregate_id = $1",
                &r.saga_id
            )
            .await,
            0,
            "{}: its timeout was cancelled or released",
            r.saga_id
        );
    }
    let letters = h.stored_dead_letters().await;
    assert_eq!(
        letters.len(),
        1,
        "only dee's saga is dead-lettered: {letters:?}"
    );
    let letter = &letters[0];
    assert_eq!(
        (letter.handler.as_str(), letter.kind.as_str()),
        ("order-fulfilment", "terminal")
    );
    assert!(
        letter.error.contains("compensation failed"),
        "{}",
        letter.error
    );
    let context: serde_json::Value =
        serde_json::from_slice(&letter.payload).expect("the saga's context");
    assert_eq!(context["saga_id"], "order-4");
    assert_eq!(context["compensation"][0]["status"], "failed");
    assert_eq!(context["state"]["customer"], "dee");
}

/// A crash between a transition's commit and its ack, at each of two
/// steps: the redelivered messages are duplicates, and the saga holds one
/// transition per message, one outbox row per command, one timeout row.
pub async fn a_saga_crash_between_commit_and_ack_leaves_one_transition_per_message<
    B: BrokerHarness,
>() {
    let h = SuiteHarness::new().await;
    let broker = B::new(2).await;
    let steps = [
        TallyEvent::new("s1", "open")
            .expiring(3_600_000)
            .message("Open"),
        TallyEvent::new("s1", "one").message("Add"),
    ];
    for step in steps {
        BrokerHarness::publish(&broker, "t", step)
            .await
            .expect("publish");
        broker.lose_next_acks(1);
        let s = run_routes_until_drained(&h, &broker, "t", router(tally_on(&broker, "t"))).await;
        assert_eq!(
            (s.processed, s.duplicates),
            (1, 1),
            "the step committed once, came back once: {s:?}"
        );
    }
    let r = record(&h, "s1").await;
    assert_eq!(history(&r), [(1, "Open".to_owned()), (2, "Add".to_owned())]);
    assert_eq!(notes(&r), ["open", "one"]);
    assert_eq!(
        outbox_rows(&h, "s1").await,
        (2, 1),
        "one row per command, one timeout row"
    );
    assert_eq!(r.timeouts.len(), 1);
}

/// Two instances take one event each for one saga at the same moment: the
/// one that saves second finds the version moved, runs again on top of it
/// at once, and no attempt is counted. On PostgreSQL the second really
/// conflicts (its transition is held until the first committed); SQLite's
/// single writer makes the second wait for the first instead.
pub async fn two_instances_on_one_saga_one_wins_and_the_other_applies_on_top<B: BrokerHarness>() {
    let h = SuiteHarness::new().await;
    let broker = B::new(2).await;
    BrokerHarness::publish(&broker, "a", TallyEvent::new("s2", "open").message("Open"))
        .await
        .expect("publish");
    run_routes_until_drained(&h, &broker, "a", router(tally_on(&broker, "a"))).await;

    static NEXT_GATE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let gate = NEXT_GATE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (mut entered, unblock) = hold_gate(gate);
    let mut held = TallyEvent::new("s2", "held");
    held.hold = Some(gate);
    BrokerHarness::publish(&broker, "a", held.message("Add"))
        .await
        .expect("publish");
    BrokerHarness::publish(&broker, "b", TallyEvent::new("s2", "quick").message("Add"))
        .await
        .expect("publish");

    let first = Consumer::router(
        broker.source("a").await,
        h.store(),
        router(tally_on(&broker, "a")),
    );
    let first_stats = first.stats();
    let drained = broker.clone();
    let first = tokio::spawn(first.run_until(async move { drained.wait_drained("a").await }));
    support::within(entered.recv())
        .await
        .expect("the held transition started");
    let real_conflict = SuiteHarness::CONCURRENT_WRITERS > 1;
    if !real_conflict {
        // The held transaction owns SQLite's write lock: let it go first.
        unblock.send(()).expect("release");
    }
    let s = run_routes_until_drained(&h, &broker, "b", router(tally_on(&broker, "b"))).await;
    assert_eq!(s.processed, 1);
    if real_conflict {
        assert_eq!(
            record(&h, "s2").await.version,
            2,
            "the quick one committed while the other was held"
        );
        unblock.send(()).expect("release");
    }
    support::within(first)
        .await
        .expect("join")
        .expect("consumer");

    let r = record(&h, "s2").await;
    assert_eq!(r.version, 3, "both applied: {:?}", history(&r));
    let expected = if real_conflict {
        ["open", "quick", "held"]
    } else {
        ["open", "held", "quick"]
    };
    assert_eq!(
        notes(&r),
        expected,
        "the second applied on top of the first"
    );
    let s = first_stats.snapshot();
    assert_eq!(
        (s.processed, s.retries, s.dead_letters()),
        (1, 0, 0),
        "a conflict is not a failed attempt"
    );
    assert_eq!(
        count(
            &h,
            "SELECT count(*) FROM consumer_attempts WHERE handler = $1",
            "tally"
        )
        .await,
        0
    );
}

/// Runs the outbox relay once: due timeouts are released and everything
/// pending is published.
async fn relay_once<B: BrokerHarness>(h: &SuiteHarness, broker: &B) {
    broker.prepare("sink").await;
    let relay = OutboxRelay::new(pool(h), Outbox::new(), HarnessPublisher(broker.clone()));
    support::within(relay.run_once())
        .await
        .expect("a relay round");
}

/// A timeout that arrives after its saga completed, and one the saga
/// replaced, are acked and do nothing.
pub async fn a_timeout_after_completion_or_replaced_does_nothing<B: BrokerHarness>() {
    let h = SuiteHarness::new().await;
    let broker = B::new(2).await;
    broker.prepare("t").await;
    let saga = || router(tally_on(&broker, "t"));
    for id in ["done", "renewed"] {
        let open = TallyEvent::new(id, "open").expiring(0);
        BrokerHarness::publish(&broker, "t", open.message("Open"))
            .await
            .expect("publish");
    }
    run_routes_until_drained(&h, &broker, "t", saga()).await;
    // Behind these on their keys, each saga's due timeout.
    BrokerHarness::publish(
        &broker,
        "t",
        TallyEvent::new("done", "close").message("Close"),
    )
    .await
    .expect("publish");
    BrokerHarness::publish(
        &broker,
        "t",
        TallyEvent::new("renewed", "renew").message("Renew"),
    )
    .await
    .expect("publish");
    relay_once(&h, &broker).await;
    let s = run_routes_until_drained(&h, &broker, "t", saga()).await;
    assert_eq!(
        s.processed, 4,
        "the close, the renew and both timeouts are acked: {s:?}"
    );

    let done = record(&h, "done").await;
    assert_eq!(done.status, SagaStatus::Completed);
    assert_eq!(
        history(&done),
        [(1, "Open".to_owned()), (2, "Close".to_owned())]
    );
    assert_eq!(notes(&done), ["open", "close"], "the timeout did nothing");
    let renewed = record(&h, "renewed").await;
    assert_eq!(renewed.status, SagaStatus::Running);
    assert_eq!(
        notes(&renewed),
        ["open", "renew"],
        "the replaced timeout did nothing"
    );
    assert_eq!(
        renewed.timeouts.len(),
        1,
        "it waits for its new timeout only"
    );
    let published = count(
        &h,
        "SELECT count(*) FROM outbox_events WHERE event_type = 'Expire' AND published_at IS NOT NULL AND aggregate_id = $1",
        "done",
    )
    .await;
    assert_eq!(published, 1, "the timeout was really delivered");
}

/// The whole input delivered twice: the second time every message is a
/// duplicate, and the state, the outbox and the timeouts are as after the
/// first.
pub async fn replaying_a_sagas_whole_input_leaves_the_same_state_and_outbox<B: BrokerHarness>() {
    let h = SuiteHarness::new().await;
    let broker = B::new(2).await;
    let input = vec![
        TallyEvent::new("s3", "open")
            .expiring(3_600_000)
            .message("Open"),
        TallyEvent::new("s3", "one").message("Add"),
        TallyEvent::new("s3", "two").message("Add"),
        TallyEvent::new("s4", "open").message("Open"),
        TallyEvent::new("s4", "close").message("Close"),
    ];
    let snapshot = || async {
        let rows: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT CAST(id AS TEXT), event_type, CAST(payload AS TEXT) FROM outbox_events ORDER BY aggregate_id, version",
        )
        .fetch_all(&pool(&h))
        .await
        .expect("outbox");
        let scheduled: Vec<(String, String)> = sqlx::query_as(
            "SELECT CAST(id AS TEXT), event_type FROM outbox_events_scheduled ORDER BY id",
        )
        .fetch_all(&pool(&h))
        .await
        .expect("scheduled");
        (
            record(&h, "s3").await,
            record(&h, "s4").await,
            rows,
            scheduled,
        )
    };
    for m in &input {
        BrokerHarness::publish(&broker, "t", m.clone())
            .await
            .expect("publish");
    }
    run_routes_until_drained(&h, &broker, "t", router(tally_on(&broker, "t"))).await;
    let first = snapshot().await;
    for m in &input {
        BrokerHarness::publish(&broker, "t", m.clone())
            .await
            .expect("publish");
    }
    let s = run_routes_until_drained(&h, &broker, "t", router(tally_on(&broker, "t"))).await;
    assert_eq!((s.processed, s.duplicates), (0, 5), "{s:?}");
    let second = snapshot().await;
    assert_eq!(first, second);
    assert_eq!(
        first.2.len(),
        4,
        "one row per command (the close sends none)"
    );
    assert_eq!(first.3.len(), 1, "one timeout row");
}

/// An event that comes before its saga exists, under each policy: `Start`
/// starts it, `Retry` waits for the start (redelivered, the start
/// overtakes it), `DeadLetter` is dead-lettered with its reason, `Ignore`
/// is acked and counted; none is dropped silently.
pub async fn an_event_before_its_saga_starts_follows_its_not_found_policy<B: BrokerHarness>() {
    let h = SuiteHarness::new().await;
    let broker = B::new(2).await;
    for (kind, saga) in [
        ("Add", "late"),
        ("Open", "late"),
        ("AddStrict", "strict"),
        ("AddQuiet", "quiet"),
        ("Open", "fresh"),
    ] {
        BrokerHarness::publish(&broker, "t", TallyEvent::new(saga, kind).message(kind))
            .await
            .expect("publish");
    }
    let s = run_routes_until_drained(&h, &broker, "t", router(tally_on(&broker, "t"))).await;
    assert!(s.retries >= 1, "the early add was retried: {s:?}");
    assert_eq!(
        notes(&record(&h, "late").await),
        ["Open", "Add"],
        "the start overtook the early add"
    );
    assert_eq!(notes(&record(&h, "fresh").await), ["Open"]);
    let sagas = SagaStore::new(pool(&h));
    for gone in ["strict", "quiet"] {
        assert!(
            sagas.get("tally", gone).await.expect("read").is_none(),
            "{gone} started nothing"
        );
    }
    let dls = BrokerHarness::dead_letter_records(&broker, "t").await;
    assert_eq!(dls.len(), 1, "only the strict add: {dls:?}");
    assert_eq!(dls[0].kind, DeadLetterKind::Terminal);
    assert!(
        dls[0].error.contains("a strict add needs an open tally"),
        "{}",
        dls[0].error
    );
    assert!(
        dls[0].error.contains("no saga `tally` `strict`"),
        "{}",
        dls[0].error
    );
    assert_eq!(
        s.processed, 4,
        "the starts, the late add and the ignored one: {s:?}"
    );
}
