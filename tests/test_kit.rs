//! The application test kit (`consumer::testing::TestKit`): outcomes from
//! the runtime's events, retries and scheduled events on the virtual
//! clock, cascades through the outbox, and a timeout that names what is
//! pending. The guide's testing page has the same kit at work as doctests.

use std::time::Duration;

use consumer::testing::{KitError, Outcome, TestKit};
use consumer::{
    DeadLetterKind, Message, MessageContext, NewEvent, Outbox, Router, SqliteTx, handler,
};

#[derive(Debug, serde::Serialize, serde::Deserialize, PartialEq)]
struct OrderPlaced {
    order_id: String,
    cents: i64,
}

#[derive(Debug, serde::Serialize, serde::Deserialize, PartialEq)]
struct OrderAccepted {
    order_id: String,
}

#[derive(Debug, thiserror::Error)]
enum ShopError {
    #[error("gateway timed out on attempt {0}")]
    Gateway(u32),
    #[error("amount must be positive, got {0}")]
    Amount(i64),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
    #[error(transparent)]
    Outbox(#[from] consumer::Error),
}

const DDL: &str = "CREATE TABLE orders (id TEXT PRIMARY KEY, cents INTEGER NOT NULL); \
                   CREATE TABLE notices (id TEXT PRIMARY KEY)";

/// Records the order; fails transiently until its fifth attempt for
/// orders named `slow-*`, for good for `never-*`; writes `OrderAccepted`
/// through the outbox.
#[handler(
    event_type = "OrderPlaced",
    idempotency_key = o.order_id,
    retry = exponential(base = "1s", max_delay = "30s", attempts = 5),
    terminal = ShopError::Amount(_),
)]
async fn record(o: OrderPlaced, tx: &mut SqliteTx, ctx: &MessageContext) -> Result<(), ShopError> {
    if o.cents <= 0 {
        return Err(ShopError::Amount(o.cents));
    }
    if (o.order_id.starts_with("slow-") && ctx.attempt() < 5) || o.order_id.starts_with("never-") {
        return Err(ShopError::Gateway(ctx.attempt()));
    }
    sqlx::query("INSERT INTO orders (id, cents) VALUES (?1, ?2)")
        .bind(&o.order_id)
        .bind(o.cents)
        .execute(&mut **tx)
        .await?;
    let accepted = OrderAccepted {
        order_id: o.order_id.clone(),
    };
    let event =
        NewEvent::new("Order", &o.order_id, "OrderAccepted", &accepted)?.with_destination("orders");
    Outbox::new().enqueue(tx, event).await?;
    Ok(())
}

#[handler(event_type = "OrderAccepted", idempotency_key = a.order_id)]
async fn notify(a: OrderAccepted, tx: &mut SqliteTx) -> Result<(), ShopError> {
    sqlx::query("INSERT INTO notices (id) VALUES (?1)")
        .bind(&a.order_id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// A handler that never finishes: what a stuck cascade looks like.
#[handler(event_type = "Stuck")]
async fn stuck(_event: serde_json::Value) -> Result<(), ShopError> {
    std::future::pending::<()>().await;
    Ok(())
}

async fn shop() -> Result<TestKit, Box<dyn std::error::Error>> {
    let mut kit = TestKit::new().await?;
    sqlx::raw_sql(DDL).execute(kit.pool()).await?;
    let router = Router::builder("orders")
        .route(record)
        .route(notify)
        .build()?;
    kit.router("orders", router);
    kit.relay(Outbox::new()).await?;
    Ok(kit)
}

fn placed(id: &str, cents: i64) -> Result<Message, serde_json::Error> {
    Ok(Message::json(
        "OrderPlaced",
        &OrderPlaced {
            order_id: id.into(),
            cents,
        },
    )?
    .with_key(id))
}

#[tokio::test]
async fn a_message_is_processed_then_its_duplicate_skipped()
-> Result<(), Box<dyn std::error::Error>> {
    let kit = shop().await?;
    let message = placed("o-1", 1200)?.with_id("m-1");
    kit.deliver("orders", message.clone())
        .await?
        .assert_processed();
    let again = kit.deliver("orders", message).await?;
    again.assert_duplicate();
    assert_eq!(again.handler.as_deref(), Some("record"));
    Ok(())
}

#[tokio::test]
async fn a_five_attempt_backoff_runs_on_the_virtual_clock() -> Result<(), Box<dyn std::error::Error>>
{
    let kit = shop().await?;
    let wall = std::time::Instant::now();
    let virtual_start = tokio::time::Instant::now();
    let delivery = kit.deliver("orders", placed("slow-1", 500)?).await?;
    delivery.assert_processed().assert_retried(4);
    assert_eq!(delivery.attempts, 5);
    assert_eq!(
        delivery.last_error.as_deref(),
        Some("gateway timed out on attempt 4")
    );
    // Up to 1+2+4+8 s of backoff passed on the virtual clock (full jitter
    // draws each delay below its cap), in milliseconds of wall time.
    println!(
        "five attempts: {:?} virtual, {:?} wall",
        virtual_start.elapsed(),
        wall.elapsed()
    );
    Ok(())
}

#[tokio::test]
async fn exhausted_terminal_and_poison_are_dead_lettered_with_their_reason()
-> Result<(), Box<dyn std::error::Error>> {
    let kit = shop().await?;
    let exhausted = kit.deliver("orders", placed("never-1", 500)?).await?;
    assert_eq!(
        exhausted.assert_dead_lettered(DeadLetterKind::Exhausted),
        "gateway timed out on attempt 5"
    );
    assert_eq!(exhausted.retries, 4);

    let terminal = kit.deliver("orders", placed("o-2", -5)?).await?;
    assert_eq!(
        terminal.assert_dead_lettered(DeadLetterKind::Terminal),
        "amount must be positive, got -5"
    );
    assert_eq!(terminal.attempts, 1);

    let poison = Message::raw(&b"<order id=3/>"[..])
        .with_header("ce_type", "OrderPlaced")
        .with_key("o-3");
    let poison = kit.deliver("orders", poison).await?;
    let reason = poison.assert_dead_lettered(DeadLetterKind::Poison);
    assert!(
        reason.contains("not a valid `test_kit::OrderPlaced` JSON document"),
        "{reason}"
    );

    let letters = kit.dead_letters("orders");
    assert_eq!(letters.len(), 3);
    assert!(letters.iter().all(|l| l.handler == "record"));
    assert_eq!(letters[0].key.as_deref(), Some("never-1"));
    assert_eq!(letters[0].attempts, 5);
    Ok(())
}

#[tokio::test]
async fn settle_relays_the_outbox_and_consumes_the_follow_up()
-> Result<(), Box<dyn std::error::Error>> {
    let kit = shop().await?;
    kit.send("orders", placed("o-1", 1200)?).await?;
    kit.send("orders", placed("o-2", 900)?).await?;
    kit.settle().await?;

    let accepted: Vec<OrderAccepted> = kit.published_of("OrderAccepted")?;
    assert_eq!(accepted.len(), 2);
    let published = kit.published_to("orders");
    assert!(published.iter().all(|p| {
        p.key()
            == p.payload::<OrderAccepted>()
                .ok()
                .map(|a| a.order_id)
                .as_deref()
    }));
    let (notices,): (i64,) = sqlx::query_as("SELECT count(*) FROM notices")
        .fetch_one(kit.pool())
        .await?;
    assert_eq!(notices, 2);
    let outcomes: Vec<(String, Outcome)> = kit
        .deliveries()
        .into_iter()
        .map(|d| (d.event_type.unwrap_or_default(), d.outcome))
        .collect();
    assert_eq!(
        outcomes
            .iter()
            .filter(|(t, o)| t == "OrderAccepted" && *o == Outcome::Processed)
            .count(),
        2
    );
    Ok(())
}

#[tokio::test]
async fn advance_fires_a_scheduled_event_only_once_it_is_due()
-> Result<(), Box<dyn std::error::Error>> {
    let kit = shop().await?;
    let outbox = Outbox::new();
    let mut tx = kit.pool().begin().await?;
    let later = NewEvent::new(
        "Order",
        "o-9",
        "OrderPlaced",
        &OrderPlaced {
            order_id: "o-9".into(),
            cents: 100,
        },
    )?
    .with_destination("orders");
    outbox
        .schedule(&mut tx, later, Duration::from_secs(30 * 60))
        .await?;
    tx.commit().await?;

    kit.advance(Duration::from_secs(29 * 60)).await?;
    assert!(kit.published_of::<OrderPlaced>("OrderPlaced")?.is_empty());
    let wall = std::time::Instant::now();
    kit.advance(Duration::from_secs(60)).await?;
    assert_eq!(kit.published_of::<OrderPlaced>("OrderPlaced")?.len(), 1);
    assert_eq!(kit.published_of::<OrderAccepted>("OrderAccepted")?.len(), 1);
    println!(
        "30 minutes of virtual time in {:?} of wall time",
        wall.elapsed()
    );
    Ok(())
}

#[tokio::test]
async fn a_wait_that_does_not_end_names_what_is_pending() -> Result<(), Box<dyn std::error::Error>>
{
    let mut kit = TestKit::builder()
        .with_timeout(Duration::from_millis(300))
        .start()
        .await?;
    kit.handler("stuck", stuck);
    let message = Message::json("Stuck", &serde_json::json!({}))?.with_id("s-1");
    let error = kit
        .deliver("stuck", message)
        .await
        .err()
        .ok_or("a stuck handler settled")?;
    let text = error.to_string();
    assert!(matches!(error, KitError::Timeout { .. }), "{text}");
    assert!(
        text.contains("message `s-1` (Stuck) on `stuck`, 0 attempt(s) ended"),
        "{text}"
    );
    assert!(
        text.contains("1 message(s) of `stuck` not settled"),
        "{text}"
    );
    Ok(())
}

#[tokio::test]
async fn the_relay_publishes_twice_or_fails_for_a_while_and_the_cascade_still_settles_once()
-> Result<(), Box<dyn std::error::Error>> {
    let kit = shop().await?;
    kit.relay_faults().duplicate_next_publishes(1);
    kit.send("orders", placed("o-1", 1200)?).await?;
    kit.settle().await?;
    let accepted: Vec<&str> = kit
        .deliveries()
        .iter()
        .filter(|d| d.event_type.as_deref() == Some("OrderAccepted"))
        .map(|d| {
            if d.is_processed() {
                "processed"
            } else {
                "duplicate"
            }
        })
        .collect();
    assert_eq!(accepted, ["processed", "duplicate"]);

    kit.relay_faults().fail_next_publishes(3);
    kit.send("orders", placed("o-2", 900)?).await?;
    kit.settle().await?;
    let (notices,): (i64,) = sqlx::query_as("SELECT count(*) FROM notices")
        .fetch_one(kit.pool())
        .await?;
    assert_eq!(notices, 2);
    Ok(())
}

#[tokio::test]
async fn a_message_to_a_topic_nobody_reads_fails_at_once() -> Result<(), Box<dyn std::error::Error>>
{
    let kit = shop().await?;
    let error = kit
        .deliver("nowhere", placed("o-1", 1)?)
        .await
        .err()
        .ok_or("an outcome from nowhere")?;
    assert!(
        matches!(&error, KitError::NoConsumer { topic } if topic == "nowhere"),
        "{error}"
    );
    Ok(())
}

/// Fails its first two attempts; its retries go back through the broker.
#[handler(
    event_type = "OrderPlaced",
    idempotency_key = o.order_id,
    retry = exponential(base = "2s", max_delay = "10s", attempts = 5, mode = redeliver),
)]
async fn record_by_redelivery(o: OrderPlaced, ctx: &MessageContext) -> Result<(), ShopError> {
    if ctx.attempt() < 3 {
        return Err(ShopError::Gateway(ctx.attempt()));
    }
    let _ = o;
    Ok(())
}

#[tokio::test]
async fn retry_copies_through_the_broker_are_one_delivery() -> Result<(), Box<dyn std::error::Error>>
{
    let mut kit = TestKit::new().await?;
    kit.handler("orders", record_by_redelivery);
    let delivery = kit.deliver("orders", placed("o-1", 100)?).await?;
    delivery.assert_processed().assert_retried(2);
    assert_eq!(delivery.attempts, 3);
    assert_eq!(kit.deliveries().len(), 1);
    Ok(())
}
