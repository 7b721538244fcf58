//! The saga shop (`examples/saga_shop`, which `cargo run --example saga`
//! runs), tested with the test kit: the four orders end as the example
//! reports, `bob`'s payment window closing on the virtual clock, each
//! command sent once to its participant.

#[path = "../examples/saga_shop/mod.rs"]
mod saga_shop;

use consumer::saga::{SagaStore, SagaTables};
use consumer::testing::TestKit;
use consumer::{Message, Router, SqliteStore, SqliteTx};
use saga_shop::Destinations;

saga_shop::participant_handlers!(SqliteTx, SqliteStore);

/// The shop on the kit: the saga on `orders`, its participants on theirs,
/// the outbox relayed.
async fn shop() -> Result<TestKit, Box<dyn std::error::Error>> {
    let mut kit = TestKit::builder()
        .with_store(|store| store.with_extension(SagaTables))
        .start()
        .await?;
    let to = Destinations::plain();
    let outbox = saga_shop::outbox(&to);
    let saga = saga_shop::saga(outbox.clone(), to.clone())?;
    let participants = participants()?;
    kit.router(&to.orders, Router::builder("orders").route(saga).build()?)
        .router(&to.payments, participants.payments)
        .router(&to.inventory, participants.inventory)
        .router(&to.shipping, participants.shipping);
    kit.relay(outbox).await?;
    Ok(kit)
}

#[tokio::test]
async fn each_order_ends_as_the_example_reports() -> Result<(), Box<dyn std::error::Error>> {
    let kit = shop().await?;
    for order in saga_shop::orders("") {
        let placed = Message::json("OrderPlaced", &order)?.with_key(order.order_id.clone());
        kit.send("orders", placed).await?;
    }
    kit.settle().await?;

    let sagas = SagaStore::new(kit.pool().clone());
    let mut records = Vec::new();
    for order in saga_shop::orders("") {
        let record = sagas.get("order-fulfilment", &order.order_id).await?;
        records.push(record.ok_or_else(|| format!("no saga for {}", order.order_id))?);
    }
    let report = saga_shop::assert_ended_as_expected(&records);
    // Four charges (bob's never answered), two refunds (cy's, dee's), one
    // shipment (ada's): each command once, duplicates none.
    let sent = |to: &str| kit.published_to(to).len();
    assert_eq!((sent("inventory"), sent("shipping")), (3, 1), "{report}");
    let refunds = kit
        .published()
        .iter()
        .filter(|p| p.event_type() == Some("RefundPayment"))
        .count();
    assert_eq!(refunds, 2, "{report}");
    let letters: i64 = sqlx::query_scalar("SELECT count(*) FROM consumer_dead_letters")
        .fetch_one(kit.pool())
        .await?;
    assert_eq!(
        letters, 1,
        "dee's failed compensation, in the store's table: {report}"
    );
    Ok(())
}
