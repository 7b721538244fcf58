//! The shop every example runs, whatever the broker and the store: an
//! order aggregate's events, what its three handlers do, the orders
//! placed, what a legacy producer sends on the side, and the report.
//! Each example declares the handlers on its store's transaction with
//! [`shop_handlers!`] (one declaration for every store), and wires its
//! broker.

#![allow(dead_code)]

use std::sync::atomic::{AtomicI64, Ordering};

use std::sync::Arc;

use consumer::outbox::RelayStats;
use consumer::{
    Consumer, DedupStore, Message, MessageContext, NewEvent, Outbox, OutboxRelay, Publisher,
    Router, Service, Stats, outbox::OutboxDatabase, source::Source, stats::StatsSnapshot,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct OrderPlaced {
    pub order_id: String,
    pub customer: String,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct OrderPaid {
    pub order_id: String,
    pub cents: i64,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct OrderShipped {
    pub order_id: String,
    pub carrier: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ShopError {
    #[error("payment gateway timed out (attempt {0})")]
    GatewayTimeout(u32),
    #[error("amount must be positive, got {0} cents")]
    InvalidAmount(i64),
    #[error("database error")]
    Db(#[from] sqlx::Error),
}

/// Declares the shop's three handlers (`reserve_stock`, `capture_payment`,
/// `notify_customer`, `#[handler]` on the transaction type `$tx`) and
/// `orders_router()`, the router `orders` over them on `$store`, in the
/// module that calls it (next to its `mod shop`): each example declares
/// them once this way, whatever its store.
#[allow(unused_macros)] // `outbox_orders` takes the shop's events only
macro_rules! shop_handlers {
    ($tx:ident, $store:ident) => {
        #[consumer::handler(event_type = "OrderPlaced", idempotency_key = e.order_id)]
        async fn reserve_stock(e: shop::OrderPlaced, tx: &mut $tx) -> Result<(), shop::ShopError> {
            shop::step(&mut **tx, &e.order_id, &shop::stock_reserved(&e)).await
        }

        #[consumer::handler(
                            event_type = "OrderPaid",
                            idempotency_key = e.order_id,
                            retry = exponential(base = "20ms", max_delay = "200ms", attempts = 4),
                            terminal = shop::ShopError::InvalidAmount(_),
                        )]
        async fn capture_payment(
            e: shop::OrderPaid,
            tx: &mut $tx,
            ctx: &consumer::MessageContext,
        ) -> Result<(), shop::ShopError> {
            let line = shop::capture(&e, ctx)?;
            shop::step(&mut **tx, &e.order_id, &line).await
        }

        #[consumer::handler(event_type = "OrderShipped", idempotency_key = e.order_id)]
        async fn notify_customer(
            e: shop::OrderShipped,
            tx: &mut $tx,
        ) -> Result<(), shop::ShopError> {
            shop::step(&mut **tx, &e.order_id, &shop::shipped(&e)).await
        }

        /// The router `orders`: the shop's three handlers.
        pub fn orders_router() -> Result<consumer::Router<$store>, consumer::Error> {
            consumer::Router::builder("orders")
                .route(reserve_stock)
                .route(capture_payment)
                .route(notify_customer)
                .build()
        }
    };
}
#[allow(unused_imports)]
pub(crate) use shop_handlers;

/// The shop's outbox: every event of an order to `destination`, keyed by
/// the order, each event type declared for the AsyncAPI document.
pub fn outbox(destination: &str) -> Outbox {
    Outbox::new()
        .with_default_destination(destination)
        .with_event::<OrderPlaced>("OrderPlaced")
        .with_event::<OrderPaid>("OrderPaid")
        .with_event::<OrderShipped>("OrderShipped")
}

/// The shop service every example runs (and `tests/asyncapi.rs`
/// documents): the outbox relay and the router's consumer.
pub struct Shop {
    /// The service, to run.
    pub service: Service,
    /// The relay's counters.
    pub relay_stats: Arc<RelayStats>,
    /// The consumer's counters.
    pub stats: Arc<Stats>,
}

/// Puts `relay` and a consumer of `router` over `source` into the `shop`
/// service.
pub fn service<DB, P, Src, S>(
    relay: OutboxRelay<DB, P>,
    source: Src,
    store: S,
    router: Router<S>,
) -> Shop
where
    DB: OutboxDatabase,
    P: Publisher,
    OutboxRelay<DB, P>: Send + 'static,
    Src: Source,
    S: DedupStore,
{
    let relay_stats = relay.stats();
    let consumer = Consumer::router(source, store, router);
    let stats = consumer.stats();
    let service = Service::new("shop")
        .with_version(env!("CARGO_PKG_VERSION"))
        .relay("outbox", relay)
        .consumer("orders", consumer);
    Shop {
        service,
        relay_stats,
        stats,
    }
}

/// The history table, on either database.
pub const HISTORY_DDL: &str = "CREATE TABLE IF NOT EXISTS shop_history \
    (run TEXT NOT NULL, n BIGINT NOT NULL, order_id TEXT NOT NULL, step TEXT NOT NULL)";

/// Orders as `<name>/<run>`, so runs against one database stay apart.
pub fn order_id(name: &str, run: &str) -> String {
    format!("{name}/{run}")
}

static STEPS: AtomicI64 = AtomicI64::new(0);

/// Writes one line of an order's history in the handler's transaction.
pub async fn step<'c, DB, E>(conn: E, order_id: &str, what: &str) -> Result<(), ShopError>
where
    DB: sqlx::Database,
    E: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'t> &'t str: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    for<'t> i64: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
{
    let (name, run) = order_id.split_once('/').unwrap_or((order_id, ""));
    sqlx::query::<DB>("INSERT INTO shop_history (run, n, order_id, step) VALUES ($1, $2, $3, $4)")
        .bind(run)
        .bind(STEPS.fetch_add(1, Ordering::Relaxed))
        .bind(name)
        .bind(what)
        .execute(conn)
        .await?;
    Ok(())
}

pub fn stock_reserved(e: &OrderPlaced) -> String {
    format!("stock reserved for {}", e.customer)
}

/// The payment gateway: order `o-3` times out twice, `o-4` never answers.
/// It would get `ctx.idempotency_key()`, so a retry is safe there too.
pub fn capture(e: &OrderPaid, ctx: &MessageContext) -> Result<String, ShopError> {
    if e.cents <= 0 {
        return Err(ShopError::InvalidAmount(e.cents));
    }
    let _key_for_the_gateway = ctx.idempotency_key();
    match e.order_id.split('/').next() {
        Some("o-3") if ctx.attempt() < 3 => Err(ShopError::GatewayTimeout(ctx.attempt())),
        Some("o-4") => Err(ShopError::GatewayTimeout(ctx.attempt())),
        _ => Ok(format!(
            "{:.2} captured (attempt {})",
            e.cents as f64 / 100.0,
            ctx.attempt()
        )),
    }
}

pub fn shipped(e: &OrderShipped) -> String {
    format!("shipped with {}", e.carrier)
}

/// Five orders, each with its three events written through the outbox in
/// transactions of their own (as the business rows would be).
pub async fn place_orders<DB: OutboxDatabase>(
    pool: &sqlx::Pool<DB>,
    outbox: &Outbox,
    run: &str,
) -> anyhow::Result<()> {
    for (name, customer, cents) in [
        ("o-1", "alice", 1_250),
        ("o-2", "bob", 990),
        ("o-3", "carol", 4_000),
        ("o-4", "dave", 7_500),
        ("o-5", "erin", -5),
    ] {
        let order = order_id(name, run);
        let events = [
            NewEvent::new(
                "Order",
                &order,
                "OrderPlaced",
                &OrderPlaced {
                    order_id: order.clone(),
                    customer: customer.into(),
                },
            )?,
            NewEvent::new(
                "Order",
                &order,
                "OrderPaid",
                &OrderPaid {
                    order_id: order.clone(),
                    cents,
                },
            )?,
            NewEvent::new(
                "Order",
                &order,
                "OrderShipped",
                &OrderShipped {
                    order_id: order.clone(),
                    carrier: "parcelco".into(),
                },
            )?,
        ];
        for event in events {
            let mut tx = pool.begin().await?;
            outbox.enqueue(&mut tx, event).await?;
            tx.commit().await?;
        }
    }
    Ok(())
}

/// What a legacy producer sends beside the outbox: a payload that is not
/// JSON, and an event type no handler takes.
pub fn legacy_messages(run: &str) -> anyhow::Result<Vec<Message>> {
    Ok(vec![
        Message::raw(&b"<order id=6/>"[..])
            .with_header("ce_type", "OrderPlaced")
            .with_key(order_id("o-6", run))
            .with_id(format!("legacy/{run}")),
        Message::json(
            "OrderReturned",
            &serde_json::json!({ "order_id": order_id("o-1", run) }),
        )?
        .with_key(order_id("o-1", run))
        .with_id(format!("returned/{run}")),
    ])
}

/// Runs `service` until `expected` deliveries were settled (processed,
/// duplicates or dead letters) or `within` passed, then fails with a
/// sentence naming `serving` if some were not.
pub async fn run_until_settled(
    service: Service,
    stats: &Arc<Stats>,
    expected: u64,
    within: std::time::Duration,
    serving: &str,
) -> anyhow::Result<StatsSnapshot> {
    let settled_count = |s: &StatsSnapshot| s.processed + s.duplicates + s.dead_letters();
    let settled = {
        let stats = Arc::clone(stats);
        async move {
            let _ = tokio::time::timeout(within, stats.wait_for(|s| settled_count(s) >= expected))
                .await;
        }
    };
    service.run_until(settled).await?;
    let s = stats.snapshot();
    anyhow::ensure!(
        settled_count(&s) >= expected,
        "not every delivery was settled within {within:?} ({s:?}); is {serving}?"
    );
    Ok(s)
}

/// The report every example prints. Dead letters are listed by kind (poison,
/// terminal, exhausted), then order: the order they reached the
/// dead-letter destination in depends on how the partitions interleaved.
pub fn report(
    title: &str,
    relayed: u64,
    s: &StatsSnapshot,
    history: &[(String, String)],
    dead_letters: &[consumer::DeadLetter],
) -> String {
    use std::fmt::Write as _;

    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(out, "{title}\n");
    let _ = writeln!(out, "  events relayed      {relayed}");
    let _ = writeln!(out, "  deliveries          {}", s.received);
    let _ = writeln!(out, "  processed           {}", s.processed);
    let _ = writeln!(out, "  duplicates skipped  {}", s.duplicates);
    let _ = writeln!(out, "  retries             {}", s.retries);
    let _ = writeln!(out, "  dead letters        {}", s.dead_letters());
    let _ = writeln!(
        out,
        "\nhistory, per order in the order its events were handled:"
    );
    let mut last = "";
    for (order, what) in history {
        let shown = if order == last { "" } else { order.as_str() };
        let _ = writeln!(out, "  {shown:<5} {what}");
        last = order;
    }
    let _ = writeln!(
        out,
        "\ndead letters (kind, attempts, handler, order, reason):"
    );
    let order_of = |dl: &consumer::DeadLetter| {
        dl.key
            .as_deref()
            .and_then(|k| k.split('/').next())
            .unwrap_or("-")
            .to_owned()
    };
    let rank = |kind: consumer::DeadLetterKind| match kind {
        consumer::DeadLetterKind::Poison => 0,
        consumer::DeadLetterKind::Terminal => 1,
        consumer::DeadLetterKind::Exhausted => 2,
    };
    let mut sorted: Vec<&consumer::DeadLetter> = dead_letters.iter().collect();
    sorted.sort_by_key(|dl| (rank(dl.kind), order_of(dl)));
    for dl in sorted {
        let cause = dl
            .causes
            .first()
            .map(|c| format!(": {c}"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {:<9} {} attempt(s)  {:<16} {:<4} {}{}",
            dl.kind.as_str(),
            dl.attempts,
            dl.handler,
            order_of(dl),
            dl.error,
            cause
        );
    }
    out
}

/// The history of `run`, ordered per order as the handlers wrote it.
pub async fn history<DB>(pool: &sqlx::Pool<DB>, run: &str) -> anyhow::Result<Vec<(String, String)>>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'t> &'t str: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    for<'r> String: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    for<'r> (String, String): sqlx::FromRow<'r, DB::Row>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    let mut conn = pool.acquire().await?;
    Ok(sqlx::query_as::<DB, (String, String)>(
        "SELECT order_id, step FROM shop_history WHERE run = $1 ORDER BY order_id, n",
    )
    .bind(run)
    .fetch_all(&mut *conn)
    .await?)
}
