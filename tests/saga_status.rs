//! Which status a saga's transitions run in, and undo steps withdrawn (no
//! services: the test kit). A forward step's
//! reply that arrives while its saga compensates is acked without its
//! transition; a reply to an undo that arrives while the saga runs forward
//! is too; an undo withdrawn before the saga compensates is never sent.

use consumer::saga::{
    NotFound, SagaBuilder, SagaRecord, SagaStatus, SagaStore, Step, Undo, UndoStatus,
};
use consumer::testing::TestKit;
use consumer::{Message, Outbox, Saga};

#[derive(serde::Serialize, serde::Deserialize)]
struct Ev {
    order: String,
}

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct Order {
    /// Every transition that ran, by event type, in order.
    ran: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

struct Orders;

impl Saga for Orders {
    type State = Order;
    type Error = Never;
    fn name(&self) -> &'static str {
        "orders"
    }
}

type Transition = fn(&Orders, &mut Order, Ev, &mut Step<'_>) -> Result<(), Never>;

/// A transition that notes it ran, then does `then`.
macro_rules! transition {
    ($name:literal, |$step:ident| $then:expr) => {{
        let f: Transition = |_, order, _, $step| {
            order.ran.push($name.to_owned());
            $then;
            Ok(())
        };
        f
    }};
}

fn order(e: &Ev) -> String {
    e.order.clone()
}

/// Places an order that records two undo steps (`payment`, then `stock`);
/// `PaymentVoided` withdraws the payment's; `Cancel` compensates; the
/// replies to the stock's and the payment's undos report them done.
fn saga(outbox: Outbox) -> consumer::saga::SagaHandler<Orders> {
    SagaBuilder::new(Orders, outbox)
        .on(
            "Placed",
            order,
            NotFound::Start,
            transition!("Placed", |step| {
                step.record_undo(Undo::new("payment", "payments", "Refund", &"o-1"));
                step.record_undo(Undo::new("stock", "inventory", "Release", &"o-1"));
            }),
        )
        .on(
            "Reserved",
            order,
            NotFound::Ignore,
            transition!("Reserved", |step| { step.send("shipping", "Ship", &"o-1") }),
        )
        .on(
            "PaymentVoided",
            order,
            NotFound::Ignore,
            transition!("PaymentVoided", |step| {
                assert!(
                    step.withdraw_undo("payment"),
                    "the payment's undo was waiting"
                );
                assert!(!step.withdraw_undo("payment"), "withdrawn once");
            }),
        )
        .on(
            "Cancel",
            order,
            NotFound::Ignore,
            transition!("Cancel", |step| { step.compensate("cancelled") }),
        )
        .on_compensating(
            "Released",
            order,
            NotFound::Ignore,
            transition!("Released", |step| { step.undone() }),
        )
        .on_compensating(
            "Refunded",
            order,
            NotFound::Ignore,
            transition!("Refunded", |step| { step.undone() }),
        )
        .build()
        .expect("saga")
}

/// Runs `events` of order `o-1`, in order, through the saga on the test
/// kit, relays what it sent, and returns the saga's record.
async fn run(events: &[&str]) -> (SagaRecord, TestKit) {
    let mut kit = TestKit::builder()
        .with_store(|store| store.with_extension(consumer::saga::SagaTables))
        .start()
        .await
        .expect("the test kit");
    kit.handler("orders", saga(Outbox::new()));
    kit.relay(Outbox::new()).await.expect("the relay");
    for kind in events {
        let m = Message::json(
            kind,
            &Ev {
                order: "o-1".into(),
            },
        )
        .expect("json")
        .with_key("o-1");
        kit.send("orders", m).await.expect("send");
    }
    kit.settle().await.expect("settled");
    let record = SagaStore::new(kit.pool().clone())
        .get("orders", "o-1")
        .await
        .expect("saga store")
        .expect("the saga");
    (record, kit)
}

fn ran(record: &SagaRecord) -> Vec<String> {
    serde_json::from_value::<Order>(record.state.clone())
        .expect("state")
        .ran
}

#[tokio::test]
async fn a_forward_reply_while_compensating_is_acked_without_its_transition() {
    // The stock reservation's reply overtakes nothing: it arrives after
    // the order was cancelled and the undo of the stock went out.
    let (record, kit) = run(&["Placed", "Cancel", "Reserved", "Released"]).await;
    assert_eq!(
        ran(&record),
        ["Placed", "Cancel", "Released"],
        "`Reserved` did not run while the saga compensated"
    );
    assert_eq!(
        kit.published_to("shipping").len(),
        0,
        "nothing shipped mid-compensation"
    );
    assert!(kit.dead_letters("orders").is_empty());
    assert_eq!(
        record.status,
        SagaStatus::Compensating,
        "the payment's refund is awaited"
    );
    assert_eq!(kit.published_to("inventory").len(), 1);
    assert_eq!(kit.published_to("payments").len(), 1);
}

#[tokio::test]
async fn an_undo_reply_while_running_is_acked_without_its_transition() {
    // Run, its `undone` would be a misuse (no undo is under way), and the
    // reply a dead letter.
    let (record, kit) = run(&["Placed", "Refunded", "Reserved"]).await;
    assert_eq!(ran(&record), ["Placed", "Reserved"]);
    assert_eq!(record.status, SagaStatus::Running);
    assert!(
        kit.dead_letters("orders").is_empty(),
        "acked, not dead-lettered: {:?}",
        kit.dead_letters("orders")
    );
}

#[tokio::test]
async fn a_withdrawn_undo_is_never_sent_and_the_log_shows_it() {
    let (record, kit) = run(&["Placed", "PaymentVoided", "Cancel", "Released"]).await;
    assert_eq!(
        ran(&record),
        ["Placed", "PaymentVoided", "Cancel", "Released"]
    );
    assert_eq!(
        record.status,
        SagaStatus::Compensated,
        "only the stock's undo was left to run"
    );
    assert_eq!(
        kit.published_to("payments").len(),
        0,
        "the withdrawn refund never went"
    );
    assert_eq!(kit.published_to("inventory").len(), 1);
    let log: Vec<(&str, UndoStatus)> = record
        .compensation
        .iter()
        .map(|u| (u.name(), u.status()))
        .collect();
    assert_eq!(
        log,
        [
            ("payment", UndoStatus::Withdrawn),
            ("stock", UndoStatus::Done)
        ]
    );
    assert!(
        record
            .history
            .iter()
            .any(|h| h.note() == Some("undo `payment` withdrawn")),
        "the history notes the withdrawal"
    );
}

#[test]
fn a_compensation_reply_cannot_start_a_saga() {
    let refused = SagaBuilder::new(Orders, Outbox::new())
        .on(
            "Placed",
            order,
            NotFound::Start,
            transition!("Placed", |_step| {}),
        )
        .on_compensating(
            "Refunded",
            order,
            NotFound::Start,
            transition!("Refunded", |_step| {}),
        )
        .build()
        .expect_err("refused");
    assert!(
        refused
            .to_string()
            .contains("runs only while the saga compensates"),
        "{refused}"
    );
}
