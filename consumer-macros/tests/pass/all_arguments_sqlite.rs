//! Every argument at once, with a SQLite transaction and the context.

use consumer::{MessageContext, SqliteTx, handler};

#[derive(serde::Deserialize)]
struct OrderPlaced {
    order_id: String,
    cents: i64,
}

#[derive(Debug, thiserror::Error)]
enum OrderError {
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("amount must be positive")]
    InvalidAmount,
}

#[handler(
    idempotency_key = order.order_id,
    retry = exponential(base = "50ms", max_delay = "2s", attempts = 5, mode = in_place),
    terminal = OrderError::InvalidAmount,
    name = "record-order",
    crate = ::consumer,
)]
async fn record_order(
    order: OrderPlaced,
    tx: &mut SqliteTx,
    ctx: &MessageContext,
) -> Result<(), OrderError> {
    if order.cents <= 0 {
        return Err(OrderError::InvalidAmount);
    }
    sqlx::query("INSERT INTO orders (id, cents, message_id) VALUES (?1, ?2, ?3)")
        .bind(&order.order_id)
        .bind(order.cents)
        .bind(ctx.message_id())
        .execute(&mut **tx)
        .await?;
    Ok(())
}

fn assert_handler<H: consumer::Handler<consumer::SqliteStore>>(_: H) {}

pub fn main() {
    assert_handler(record_order);
}
