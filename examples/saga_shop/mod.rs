//! The order saga every saga example and suite case runs, whatever the
//! broker and the store: an order goes through payment, inventory and
//! shipping, orchestrated by the `order-fulfilment` saga; the three
//! participants answer by data (`bob` pays by a bank transfer that never
//! arrives, `unicorn` is never in stock, `dee`'s card is closed before her
//! refund). Each includer declares the participants' `#[handler]`s on its
//! store's transaction with [`participant_handlers!`], and wires its
//! broker.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use consumer::outbox::{InTransaction, OutboxDatabase};
use consumer::saga::{
    NotFound, SagaBuilder, SagaDatabase, SagaHandler, SagaMonitor, SagaRecord, SagaStatus,
    SagaStore, Step, Undo,
};
use consumer::source::Source;
use consumer::{
    Consumer, NewEvent, Outbox, OutboxRelay, Publisher, RetryPolicy, Router, Saga, Service, Stats,
    Store, outbox::ScheduleToken, retry::RetryMode,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where each kind of message goes: the saga's input (events, replies and
/// its own timeouts), and each participant's commands.
#[derive(Debug, Clone)]
pub struct Destinations {
    pub orders: String,
    pub payments: String,
    pub inventory: String,
    pub shipping: String,
}

impl Destinations {
    /// The names as they are, for a broker without namespaces.
    pub fn plain() -> Self {
        Self {
            orders: "orders".into(),
            payments: "payments".into(),
            inventory: "inventory".into(),
            shipping: "shipping".into(),
        }
    }
}

// ---------------------------------------------------------------------------
// Messages. Commands carry where to reply; replies and events are keyed by
// the order id, the saga's id.

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct OrderPlaced {
    pub order_id: String,
    pub customer: String,
    pub item: String,
    pub quantity: u32,
    pub amount_cents: i64,
    /// How long the customer has to pay.
    pub pay_within_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ChargePayment {
    pub order_id: String,
    pub customer: String,
    pub amount_cents: i64,
    pub reply_to: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RefundPayment {
    pub order_id: String,
    pub customer: String,
    pub amount_cents: i64,
    pub reply_to: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CancelPayment {
    pub order_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ReserveStock {
    pub order_id: String,
    pub item: String,
    pub quantity: u32,
    pub reply_to: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ReleaseStock {
    pub order_id: String,
    pub item: String,
    pub quantity: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ShipOrder {
    pub order_id: String,
    pub reply_to: String,
}

/// A participant's answer about one order.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Reply {
    pub order_id: String,
    #[serde(default)]
    pub reason: Option<String>,
}

/// The saga's own timeout.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PaymentTimedOut {
    pub order_id: String,
}

// ---------------------------------------------------------------------------
// The saga.

/// An order on its way: what the saga remembers between events.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Order {
    pub customer: String,
    pub item: String,
    pub quantity: u32,
    pub amount_cents: i64,
    pub payment_timeout: Option<ScheduleToken>,
}

#[derive(Debug, thiserror::Error)]
pub enum OrderError {
    #[error("order amount {0} cents is not positive")]
    BadAmount(i64),
}

/// The orchestrator: charge, reserve, ship; refund if the stock is not
/// there; give up if the payment does not come in time.
pub struct OrderFulfilment {
    pub to: Destinations,
}

impl Saga for OrderFulfilment {
    type State = Order;
    type Error = OrderError;

    fn name(&self) -> &'static str {
        "order-fulfilment"
    }

    fn is_terminal(&self, error: &OrderError) -> bool {
        matches!(error, OrderError::BadAmount(_))
    }
}

impl OrderFulfilment {
    fn placed(
        &self,
        order: &mut Order,
        e: OrderPlaced,
        step: &mut Step<'_>,
    ) -> Result<(), OrderError> {
        if e.amount_cents <= 0 {
            return Err(OrderError::BadAmount(e.amount_cents));
        }
        *order = Order {
            customer: e.customer.clone(),
            item: e.item,
            quantity: e.quantity,
            amount_cents: e.amount_cents,
            payment_timeout: None,
        };
        let charge = ChargePayment {
            order_id: e.order_id.clone(),
            customer: e.customer,
            amount_cents: e.amount_cents,
            reply_to: self.to.orders.clone(),
        };
        step.send(&self.to.payments, "ChargePayment", &charge);
        let timeout = PaymentTimedOut {
            order_id: e.order_id,
        };
        order.payment_timeout = Some(step.schedule_timeout(
            "PaymentTimedOut",
            &timeout,
            Duration::from_millis(e.pay_within_ms),
        ));
        Ok(())
    }

    fn paid(&self, order: &mut Order, e: Reply, step: &mut Step<'_>) -> Result<(), OrderError> {
        if let Some(token) = order.payment_timeout.take() {
            step.cancel_timeout(token);
        }
        step.record_undo(Undo::new(
            "payment",
            &self.to.payments,
            "RefundPayment",
            &RefundPayment {
                order_id: e.order_id.clone(),
                customer: order.customer.clone(),
                amount_cents: order.amount_cents,
                reply_to: self.to.orders.clone(),
            },
        ));
        let reserve = ReserveStock {
            order_id: e.order_id,
            item: order.item.clone(),
            quantity: order.quantity,
            reply_to: self.to.orders.clone(),
        };
        step.send(&self.to.inventory, "ReserveStock", &reserve);
        Ok(())
    }

    fn payment_timed_out(
        &self,
        order: &mut Order,
        e: PaymentTimedOut,
        step: &mut Step<'_>,
    ) -> Result<(), OrderError> {
        order.payment_timeout = None;
        // A late capture must not take the money: the gateway voids it.
        step.send(
            &self.to.payments,
            "CancelPayment",
            &CancelPayment {
                order_id: e.order_id,
            },
        );
        step.fail("no payment in time");
        Ok(())
    }

    fn reserved(&self, order: &mut Order, e: Reply, step: &mut Step<'_>) -> Result<(), OrderError> {
        step.record_undo(
            Undo::new(
                "stock",
                &self.to.inventory,
                "ReleaseStock",
                &ReleaseStock {
                    order_id: e.order_id.clone(),
                    item: order.item.clone(),
                    quantity: order.quantity,
                },
            )
            .without_reply(),
        );
        let ship = ShipOrder {
            order_id: e.order_id,
            reply_to: self.to.orders.clone(),
        };
        step.send(&self.to.shipping, "ShipOrder", &ship);
        Ok(())
    }

    fn out_of_stock(
        &self,
        _order: &mut Order,
        e: Reply,
        step: &mut Step<'_>,
    ) -> Result<(), OrderError> {
        step.compensate(e.reason.unwrap_or_else(|| "out of stock".into()));
        Ok(())
    }

    fn shipped(
        &self,
        _order: &mut Order,
        _e: Reply,
        step: &mut Step<'_>,
    ) -> Result<(), OrderError> {
        step.complete();
        Ok(())
    }

    fn refunded(
        &self,
        _order: &mut Order,
        _e: Reply,
        step: &mut Step<'_>,
    ) -> Result<(), OrderError> {
        step.undone();
        Ok(())
    }

    fn refund_failed(
        &self,
        _order: &mut Order,
        e: Reply,
        step: &mut Step<'_>,
    ) -> Result<(), OrderError> {
        step.undo_failed(e.reason.unwrap_or_else(|| "refused".into()));
        Ok(())
    }
}

fn order_of(e: &Reply) -> String {
    e.order_id.clone()
}

/// The saga, writing into `outbox`, its timeouts to `to.orders`.
pub fn saga(
    outbox: Outbox,
    to: Destinations,
) -> Result<SagaHandler<OrderFulfilment>, consumer::Error> {
    let orders = to.orders.clone();
    // A reply may overtake the event it answers on its way back (another
    // partition, a retry): it waits for its saga through the broker.
    let late = NotFound::Retry(
        RetryPolicy::exponential(Duration::from_millis(20), Duration::from_millis(250), 10)
            .with_mode(RetryMode::Redeliver),
    );
    let builder = SagaBuilder::new(OrderFulfilment { to: to.clone() }, outbox)
        .on(
            "OrderPlaced",
            |e: &OrderPlaced| e.order_id.clone(),
            NotFound::Start,
            OrderFulfilment::placed,
        )
        .on(
            "PaymentCaptured",
            order_of,
            late.clone(),
            OrderFulfilment::paid,
        )
        .on(
            "StockReserved",
            order_of,
            late.clone(),
            OrderFulfilment::reserved,
        )
        .on(
            "StockUnavailable",
            order_of,
            late.clone(),
            OrderFulfilment::out_of_stock,
        )
        .on(
            "OrderShipped",
            order_of,
            late.clone(),
            OrderFulfilment::shipped,
        )
        // The replies to the refund, an undo step: they run only while the
        // saga compensates (a forward step's late reply then does not).
        .on_compensating(
            "PaymentRefunded",
            order_of,
            late.clone(),
            OrderFulfilment::refunded,
        )
        .on_compensating(
            "RefundFailed",
            order_of,
            late,
            OrderFulfilment::refund_failed,
        )
        .on_timeout("PaymentTimedOut", OrderFulfilment::payment_timed_out)
        .with_timeouts_to(orders.clone())
        .with_event_schema::<OrderPlaced>("OrderPlaced")
        .with_event_schema::<PaymentTimedOut>("PaymentTimedOut")
        .with_command::<ChargePayment>(&to.payments, "ChargePayment")
        .with_command::<CancelPayment>(&to.payments, "CancelPayment")
        .with_command::<RefundPayment>(&to.payments, "RefundPayment")
        .with_command::<ReserveStock>(&to.inventory, "ReserveStock")
        .with_command::<ReleaseStock>(&to.inventory, "ReleaseStock")
        .with_command::<ShipOrder>(&to.shipping, "ShipOrder")
        .with_command::<PaymentTimedOut>(&orders, "PaymentTimedOut");
    let builder = [
        "PaymentCaptured",
        "StockReserved",
        "StockUnavailable",
        "OrderShipped",
        "PaymentRefunded",
        "RefundFailed",
    ]
    .into_iter()
    .fold(builder, |b, t| b.with_event_schema::<Reply>(t));
    builder.build()
}

// ---------------------------------------------------------------------------
// The participants: each answers through the outbox, in its handler's
// transaction, keyed by the order.

#[derive(Debug, thiserror::Error)]
pub enum ParticipantError {
    #[error("outbox")]
    Outbox(#[from] consumer::Error),
}

async fn reply<C: InTransaction + ?Sized>(
    tx: &mut C,
    to: &str,
    event_type: &str,
    order_id: &str,
    reason: Option<&str>,
) -> Result<(), ParticipantError> {
    let reply = Reply {
        order_id: order_id.to_owned(),
        reason: reason.map(str::to_owned),
    };
    let event = NewEvent::new("order", order_id, event_type, &reply)?.with_destination(to);
    Outbox::new().enqueue(tx, event).await?;
    Ok(())
}

/// The payment gateway: captures, except `bob`'s bank transfer, which
/// never arrives (no reply at all).
pub async fn charge<C: InTransaction + ?Sized>(
    cmd: ChargePayment,
    tx: &mut C,
) -> Result<(), ParticipantError> {
    if cmd.customer == "bob" {
        return Ok(());
    }
    reply(tx, &cmd.reply_to, "PaymentCaptured", &cmd.order_id, None).await
}

/// Refunds, except to `dee`, whose card was closed meanwhile.
pub async fn refund<C: InTransaction + ?Sized>(
    cmd: RefundPayment,
    tx: &mut C,
) -> Result<(), ParticipantError> {
    if cmd.customer == "dee" {
        let why = "the card was closed: refund by hand";
        return reply(tx, &cmd.reply_to, "RefundFailed", &cmd.order_id, Some(why)).await;
    }
    reply(tx, &cmd.reply_to, "PaymentRefunded", &cmd.order_id, None).await
}

/// Reserves stock, except of `unicorn`s.
pub async fn reserve<C: InTransaction + ?Sized>(
    cmd: ReserveStock,
    tx: &mut C,
) -> Result<(), ParticipantError> {
    if cmd.item == "unicorn" {
        let why = format!("no {} in stock", cmd.item);
        return reply(
            tx,
            &cmd.reply_to,
            "StockUnavailable",
            &cmd.order_id,
            Some(&why),
        )
        .await;
    }
    reply(tx, &cmd.reply_to, "StockReserved", &cmd.order_id, None).await
}

/// Ships.
pub async fn ship<C: InTransaction + ?Sized>(
    cmd: ShipOrder,
    tx: &mut C,
) -> Result<(), ParticipantError> {
    reply(tx, &cmd.reply_to, "OrderShipped", &cmd.order_id, None).await
}

// ---------------------------------------------------------------------------
// The orders, the service, the report.

/// The four orders, `run` telling runs against one database apart.
pub fn orders(run: &str) -> Vec<OrderPlaced> {
    let order = |n: u32, customer: &str, item: &str, pay_within_ms: u64| OrderPlaced {
        order_id: format!("order-{n}{run}"),
        customer: customer.into(),
        item: item.into(),
        quantity: 1,
        amount_cents: 4200,
        pay_within_ms,
    };
    vec![
        order(1, "ada", "teapot", 60_000),
        order(2, "bob", "teapot", 200),
        order(3, "cy", "unicorn", 60_000),
        order(4, "dee", "unicorn", 60_000),
    ]
}

/// The status each order ends in.
pub const EXPECTED: [SagaStatus; 4] = [
    SagaStatus::Completed,
    SagaStatus::Failed,
    SagaStatus::Compensated,
    SagaStatus::CompensationFailed,
];

/// Declares the participants' handlers (`#[handler]` on the transaction
/// type `$tx`) and `participants()`, their routers on `$store`, in the
/// module that calls it (next to its `mod saga_shop`): each includer
/// declares them once this way, whatever its store.
macro_rules! participant_handlers {
    ($tx:ident, $store:ident) => {
        #[consumer::handler(event_type = "ChargePayment", idempotency_key = cmd.order_id)]
        async fn charge(
            cmd: saga_shop::ChargePayment,
            tx: &mut $tx,
        ) -> Result<(), saga_shop::ParticipantError> {
            saga_shop::charge(cmd, tx).await
        }

        /// Deduplicated on the message id: the saga gives each undo
        /// command a deterministic id, so a repeat of the same refund is
        /// absorbed here.
        #[consumer::handler(event_type = "RefundPayment")]
        async fn refund(
            cmd: saga_shop::RefundPayment,
            tx: &mut $tx,
        ) -> Result<(), saga_shop::ParticipantError> {
            saga_shop::refund(cmd, tx).await
        }

        #[consumer::handler(event_type = "CancelPayment")]
        async fn cancel(
            _cmd: saga_shop::CancelPayment,
            _tx: &mut $tx,
        ) -> Result<(), saga_shop::ParticipantError> {
            Ok(())
        }

        #[consumer::handler(event_type = "ReserveStock", idempotency_key = cmd.order_id)]
        async fn reserve(
            cmd: saga_shop::ReserveStock,
            tx: &mut $tx,
        ) -> Result<(), saga_shop::ParticipantError> {
            saga_shop::reserve(cmd, tx).await
        }

        #[consumer::handler(event_type = "ReleaseStock")]
        async fn release(
            _cmd: saga_shop::ReleaseStock,
            _tx: &mut $tx,
        ) -> Result<(), saga_shop::ParticipantError> {
            Ok(())
        }

        #[consumer::handler(event_type = "ShipOrder", idempotency_key = cmd.order_id)]
        async fn ship(
            cmd: saga_shop::ShipOrder,
            tx: &mut $tx,
        ) -> Result<(), saga_shop::ParticipantError> {
            saga_shop::ship(cmd, tx).await
        }

        /// The participants' routers.
        pub fn participants() -> Result<saga_shop::Participants<$store>, consumer::Error> {
            Ok(saga_shop::Participants {
                payments: consumer::Router::builder("payments")
                    .route(charge)
                    .route(refund)
                    .route(cancel)
                    .build()?,
                inventory: consumer::Router::builder("inventory")
                    .route(reserve)
                    .route(release)
                    .build()?,
                shipping: consumer::Router::builder("shipping").route(ship).build()?,
            })
        }
    };
}
pub(crate) use participant_handlers;

/// The participants' routers, declared by the includer on its store.
pub struct Participants<S: consumer::DedupStore> {
    pub payments: Router<S>,
    pub inventory: Router<S>,
    pub shipping: Router<S>,
}

/// The sources of the four destinations.
pub struct Sources<A, B, C, D> {
    pub orders: A,
    pub payments: B,
    pub inventory: C,
    pub shipping: D,
}

/// The saga's outbox: its commands, each to its participant, and the
/// replies it documents.
pub fn outbox(to: &Destinations) -> Outbox {
    Outbox::new()
        .with_event_to::<Reply>(to.orders.clone(), "PaymentCaptured")
        .with_event_to::<ChargePayment>(to.payments.clone(), "ChargePayment")
        .with_event_to::<ReserveStock>(to.inventory.clone(), "ReserveStock")
        .with_event_to::<ShipOrder>(to.shipping.clone(), "ShipOrder")
}

/// The service: the saga's consumer, the three participants' consumers,
/// the outbox relay publishing through `publisher`, the saga monitor.
pub fn service<DB, P, A, B, C, D>(
    pool: sqlx::Pool<DB>,
    store: Store<DB>,
    publisher: P,
    sources: Sources<A, B, C, D>,
    participants: Participants<Store<DB>>,
    to: Destinations,
) -> Result<(Service, Arc<Stats>), consumer::Error>
where
    DB: SagaDatabase + OutboxDatabase,
    P: Publisher,
    OutboxRelay<DB, P>: Send + 'static,
    A: Source,
    B: Source,
    C: Source,
    D: Source,
{
    let outbox = outbox(&to);
    let router = Router::builder("orders")
        .route(saga(outbox.clone(), to)?)
        .build()?;
    let orders = Consumer::router(sources.orders, store.clone(), router);
    let stats = orders.stats();
    let relay = OutboxRelay::new(pool.clone(), outbox, publisher).with_source("saga-shop");
    let monitor = SagaMonitor::new(pool).with_interval(Duration::from_secs(1));
    let service = Service::new("saga-shop")
        .with_version(env!("CARGO_PKG_VERSION"))
        .consumer("orders", orders)
        .consumer(
            "payments",
            Consumer::router(sources.payments, store.clone(), participants.payments),
        )
        .consumer(
            "inventory",
            Consumer::router(sources.inventory, store.clone(), participants.inventory),
        )
        .consumer(
            "shipping",
            Consumer::router(sources.shipping, store, participants.shipping),
        )
        .relay("outbox", relay)
        .task("saga-monitor", move |stop| {
            monitor.run_until(stop.stopped())
        });
    Ok((service, stats))
}

/// Asserts that the four orders ended as [`EXPECTED`], `bob`'s by his
/// payment's timeout, and returns their report.
///
/// # Panics
///
/// When they did not, with the report.
pub fn assert_ended_as_expected(records: &[SagaRecord]) -> String {
    let report = report(records);
    let statuses: Vec<SagaStatus> = records.iter().map(|r| r.status).collect();
    assert_eq!(statuses, EXPECTED, "{report}");
    let bob = &records[1];
    assert!(
        bob.history
            .iter()
            .any(|e| e.note().is_some_and(|n| n.contains("timed out"))),
        "{report}"
    );
    report
}

/// Waits until every order of `run` has finished (polling the store).
pub async fn wait_finished<DB: SagaDatabase>(
    sagas: &SagaStore<DB>,
    run: &str,
) -> Result<Vec<SagaRecord>, consumer::saga::OperatorError> {
    loop {
        let mut done = Vec::new();
        for o in orders(run) {
            match sagas.get("order-fulfilment", &o.order_id).await? {
                Some(r) if !r.status.is_active() => done.push(r),
                _ => break,
            }
        }
        if done.len() == 4 {
            return Ok(done);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Each saga's outcome and history, for people.
pub fn report(records: &[SagaRecord]) -> String {
    let mut out = String::new();
    for r in records {
        let customer = r
            .state
            .get("customer")
            .and_then(|c| c.as_str())
            .unwrap_or("?");
        let reason = r
            .reason
            .as_deref()
            .map(|w| format!(" ({w})"))
            .unwrap_or_default();
        out.push_str(&format!(
            "{} ({customer}): {}{reason}\n",
            r.saga_id, r.status
        ));
        for h in &r.history {
            let note = h.note().map(|n| format!("  [{n}]")).unwrap_or_default();
            out.push_str(&format!(
                "  v{}  {:<17} -> {}{note}\n",
                h.version(),
                h.event_type(),
                h.status()
            ));
        }
        for u in &r.compensation {
            let error = u.error().map(|e| format!(": {e}")).unwrap_or_default();
            out.push_str(&format!(
                "  undo {:<8} {} to {}: {}{error}\n",
                u.name(),
                u.event_type(),
                u.destination(),
                u.status()
            ));
        }
    }
    out
}
