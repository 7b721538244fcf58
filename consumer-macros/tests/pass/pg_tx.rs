//! A PostgreSQL transaction makes a handler for `PgStore`.

use consumer::{PgTx, handler};

#[derive(serde::Deserialize)]
struct Refund {
    refund_id: i64,
}

#[derive(Debug, thiserror::Error)]
#[error("database: {0}")]
struct RefundError(#[from] sqlx::Error);

#[handler(idempotency_key = refund.refund_id)]
async fn record_refund(refund: Refund, tx: &mut PgTx) -> Result<(), RefundError> {
    sqlx::query("INSERT INTO refunds (id) VALUES ($1)")
        .bind(refund.refund_id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

fn assert_handler<H: consumer::Handler<consumer::PgStore>>(_: H) {}

pub fn main() {
    assert_handler(record_refund);
}
