//! A user's test written from docs/guide/testing.md alone: a router of two
//! handlers, one publishing a follow-up event through the outbox that the
//! other consumes.

use consumer::testing::TestKit;
use consumer::{Message, NewEvent, Outbox, Router, SqliteTx, handler};

#[derive(serde::Serialize, serde::Deserialize)]
struct ItemOrdered {
    sku: String,
    quantity: i64,
}

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct StockReserved {
    sku: String,
    quantity: i64,
}

#[derive(Debug, thiserror::Error)]
enum StockError {
    #[error(transparent)]
    Db(#[from] sqlx::Error),
    #[error(transparent)]
    Outbox(#[from] consumer::Error),
}

#[handler(event_type = "ItemOrdered", idempotency_key = e.sku)]
async fn reserve(e: ItemOrdered, tx: &mut SqliteTx) -> Result<(), StockError> {
    sqlx::query("UPDATE stock SET reserved = reserved + ?1 WHERE sku = ?2")
        .bind(e.quantity)
        .bind(&e.sku)
        .execute(&mut **tx)
        .await?;
    let reserved = StockReserved {
        sku: e.sku.clone(),
        quantity: e.quantity,
    };
    let event =
        NewEvent::new("Stock", &e.sku, "StockReserved", &reserved)?.with_destination("stock");
    Outbox::new().enqueue(tx, event).await?;
    Ok(())
}

#[handler(event_type = "StockReserved", idempotency_key = e.sku)]
async fn pick(e: StockReserved, tx: &mut SqliteTx) -> Result<(), StockError> {
    sqlx::query("INSERT INTO picks (sku, quantity) VALUES (?1, ?2)")
        .bind(&e.sku)
        .bind(e.quantity)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_follow_up_through_the_outbox_is_published_and_consumed()
-> Result<(), Box<dyn std::error::Error>> {
    let mut kit = TestKit::new().await?;
    sqlx::query("CREATE TABLE stock (sku TEXT PRIMARY KEY, reserved INTEGER NOT NULL DEFAULT 0)")
        .execute(kit.pool())
        .await?;
    sqlx::query("CREATE TABLE picks (sku TEXT, quantity INTEGER)")
        .execute(kit.pool())
        .await?;
    sqlx::query("INSERT INTO stock (sku) VALUES ('sku-1')")
        .execute(kit.pool())
        .await?;
    kit.router(
        "stock",
        Router::builder("stock")
            .route(reserve)
            .route(pick)
            .build()?,
    );
    kit.relay(Outbox::new()).await?;

    let ordered = ItemOrdered {
        sku: "sku-1".into(),
        quantity: 2,
    };
    let delivery = kit
        .deliver(
            "stock",
            Message::json("ItemOrdered", &ordered)?.with_key("sku-1"),
        )
        .await?;
    delivery.assert_processed();
    kit.settle().await?;

    let reserved: Vec<StockReserved> = kit.published_of("StockReserved")?;
    assert_eq!(
        reserved,
        [StockReserved {
            sku: "sku-1".into(),
            quantity: 2
        }]
    );
    assert_eq!(kit.published_to("stock")[0].key(), Some("sku-1"));
    let handled: Vec<_> = kit
        .deliveries()
        .iter()
        .map(|d| (d.handler.clone(), d.is_processed()))
        .collect();
    assert_eq!(
        handled,
        [(Some("reserve".into()), true), (Some("pick".into()), true)]
    );
    let (picked,): (i64,) = sqlx::query_as("SELECT quantity FROM picks WHERE sku = 'sku-1'")
        .fetch_one(kit.pool())
        .await?;
    assert_eq!(picked, 2);
    Ok(())
}
