//! `batch`: the function takes the batch and the batch's transaction; the
//! key is computed per message by a closure, `terminal` classifies the
//! error a batch narrowed to one message returns.

use consumer::batch::{Batch, BatchHandler, Batched};
use consumer::{PgStore, PgTx, handler};

#[derive(serde::Deserialize)]
struct Payment {
    id: String,
    cents: i64,
}

#[derive(Debug, thiserror::Error)]
enum PaymentError {
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("negative amount")]
    Negative,
}

#[handler(
    batch,
    idempotency_key = |p| p.id,
    retry = exponential(base = "50ms", max_delay = "2s", attempts = 5),
    terminal = PaymentError::Negative,
    name = "record-payments",
)]
async fn record_payments(payments: &mut Batch<Payment>, tx: &mut PgTx) -> Result<(), PaymentError> {
    let mut refused = Vec::new();
    for (i, item) in payments.iter() {
        let p = item.message();
        if p.cents < 0 {
            refused.push(i);
            continue;
        }
        sqlx::query("INSERT INTO payments (id, cents, message_id) VALUES ($1, $2, $3)")
            .bind(&p.id)
            .bind(p.cents)
            .bind(item.context().message_id())
            .execute(&mut **tx)
            .await?;
    }
    for i in refused {
        payments.fail_terminal(i, PaymentError::Negative);
    }
    Ok(())
}

fn assert_batch_handler<H: BatchHandler<PgStore>>(_: H) {}
fn assert_handler<H: consumer::Handler<PgStore>>(_: H) {}

pub fn main() {
    assert_batch_handler(record_payments);
    assert_handler(Batched::new(record_payments).with_max_batch(50));
}
