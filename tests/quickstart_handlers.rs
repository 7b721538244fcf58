//! The quickstart's handlers (the shop's router on SQLite), tested with the
//! test kit: the orders and legacy messages `cargo run --example
//! quickstart` runs, each outcome asserted, retries on the virtual clock.

// The quickstart carries the shop module, as `tests/asyncapi.rs` does.
#![allow(clippy::duplicate_mod)]

#[path = "../examples/quickstart.rs"]
#[allow(dead_code, unreachable_pub)]
mod quickstart;

use consumer::DeadLetterKind;
use consumer::testing::{Delivery, TestKit};
use quickstart::{OUTBOX, shop};

const RUN: &str = "kit";

/// What happened to the event of type `event_type` of `order`.
fn find<'d>(all: &'d [Delivery], event_type: &str, order: &str) -> Result<&'d Delivery, String> {
    let key = shop::order_id(order, RUN);
    all.iter()
        .find(|d| d.event_type.as_deref() == Some(event_type) && d.key.as_deref() == Some(&key))
        .ok_or_else(|| format!("no {event_type} of {order} was handled"))
}

#[tokio::test]
async fn each_order_ends_as_the_quickstart_reports() -> Result<(), Box<dyn std::error::Error>> {
    let mut kit = TestKit::new().await?;
    sqlx::query(shop::HISTORY_DDL).execute(kit.pool()).await?;
    kit.router("order-events", quickstart::orders_router()?);
    kit.relay(OUTBOX.clone()).await?;
    kit.relay_faults().duplicate_next_publishes(1); // as after a lost confirm
    shop::place_orders(kit.pool(), &OUTBOX, RUN).await?;
    for message in shop::legacy_messages(RUN)? {
        kit.send("order-events", message).await?;
    }
    kit.settle().await?;

    let all = kit.deliveries();
    find(&all, "OrderPaid", "o-1")?.assert_processed();
    find(&all, "OrderPaid", "o-3")?
        .assert_processed()
        .assert_retried(2);
    let o4 = find(&all, "OrderPaid", "o-4")?;
    assert_eq!(
        o4.assert_dead_lettered(DeadLetterKind::Exhausted),
        "payment gateway timed out (attempt 4)"
    );
    let o5 = find(&all, "OrderPaid", "o-5")?;
    assert_eq!(
        o5.assert_dead_lettered(DeadLetterKind::Terminal),
        "amount must be positive, got -5 cents"
    );
    let legacy = find(&all, "OrderPlaced", "o-6")?;
    assert!(
        legacy
            .assert_dead_lettered(DeadLetterKind::Poison)
            .contains("not a valid")
    );
    let returned = find(&all, "OrderReturned", "o-1")?;
    assert!(
        returned
            .assert_dead_lettered(DeadLetterKind::Poison)
            .contains("no handler of router `orders`")
    );
    assert_eq!(
        all.iter()
            .filter(|d| d.outcome == consumer::testing::Outcome::Duplicate)
            .count(),
        1
    );
    assert_eq!(kit.published().len(), 15);
    assert_eq!(kit.dead_letters("order-events").len(), 4);

    let history = shop::history(kit.pool(), RUN).await?;
    let o3: Vec<&str> = history
        .iter()
        .filter(|(o, _)| o == "o-3")
        .map(|(_, s)| s.as_str())
        .collect();
    assert_eq!(
        o3,
        [
            "stock reserved for carol",
            "40.00 captured (attempt 3)",
            "shipped with parcelco"
        ]
    );
    Ok(())
}
