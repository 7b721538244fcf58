//! The `outbox_orders` example's handlers, tested with the test kit as an
//! application would test its own: a command placed once (a duplicate
//! skipped), its event relayed through the outbox, the notification
//! written downstream.

#[path = "../examples/outbox_orders.rs"]
#[allow(dead_code, unreachable_pub)]
mod outbox_orders;

use consumer::Message;
use consumer::testing::TestKit;
use outbox_orders::{OUTBOX, OrderPlaced, PlaceOrder, TABLES, notify_customer, place_order};

/// The example's two consumers and its relay, on the kit.
async fn orders() -> Result<TestKit, Box<dyn std::error::Error>> {
    let mut kit = TestKit::new().await?;
    sqlx::raw_sql(TABLES).execute(kit.pool()).await?;
    kit.handler("commands", place_order)
        .handler("order-events", notify_customer);
    kit.relay(OUTBOX.clone()).await?;
    Ok(kit)
}

fn place(order_id: &str, customer: &str) -> Result<Message, serde_json::Error> {
    let cmd = PlaceOrder {
        order_id: order_id.into(),
        customer: customer.into(),
        cents: 1200,
    };
    Ok(Message::json("PlaceOrder", &cmd)?.with_key(customer))
}

#[tokio::test]
async fn a_duplicate_command_places_one_order() -> Result<(), Box<dyn std::error::Error>> {
    let kit = orders().await?;
    let command = place("o-1", "alice")?;
    kit.deliver("commands", command.clone())
        .await?
        .assert_processed();
    kit.deliver("commands", command).await?.assert_duplicate();
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders")
        .fetch_one(kit.pool())
        .await?;
    assert_eq!(orders, 1);
    Ok(())
}

#[tokio::test]
async fn an_order_placed_is_published_then_notified() -> Result<(), Box<dyn std::error::Error>> {
    let kit = orders().await?;
    kit.send("commands", place("o-1", "alice")?).await?;
    kit.send("commands", place("o-2", "bob")?).await?;
    kit.settle().await?;

    let placed: Vec<OrderPlaced> = kit.published_of("OrderPlaced")?;
    let customers: Vec<&str> = placed.iter().map(|e| e.customer.as_str()).collect();
    assert_eq!(customers.len(), 2);
    assert!(customers.contains(&"alice") && customers.contains(&"bob"));
    assert!(
        kit.published_to("order-events")
            .iter()
            .all(|p| p.key().is_some_and(|k| k.starts_with("o-")))
    );
    let notes: Vec<String> = sqlx::query_scalar("SELECT text FROM notifications ORDER BY text")
        .fetch_all(kit.pool())
        .await?;
    assert_eq!(notes, ["order o-1 is confirmed", "order o-2 is confirmed"]);
    Ok(())
}
