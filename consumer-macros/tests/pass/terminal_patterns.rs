//! `terminal` takes `|` patterns over tuple and struct variants: whatever
//! `matches!(&err, ...)` accepts.

use consumer::{SqliteTx, handler};

#[derive(serde::Deserialize)]
struct Charge {
    id: String,
    cents: i64,
}

#[derive(Debug, thiserror::Error)]
enum ChargeError {
    #[error("declined: {0}")]
    Declined(String),
    #[error("invalid amount {0}")]
    InvalidAmount(i64),
    #[error("card expired in {month}/{year}")]
    Expired { month: u8, year: u16 },
    #[error("gateway timeout")]
    Timeout,
}

#[handler(
    idempotency_key = charge.id,
    terminal = ChargeError::Declined(_)
        | ChargeError::InvalidAmount(..)
        | ChargeError::Expired { .. },
)]
async fn charge_card(charge: Charge, _tx: &mut SqliteTx) -> Result<(), ChargeError> {
    match charge.cents {
        0 => Err(ChargeError::InvalidAmount(0)),
        1 => Err(ChargeError::Declined(charge.id)),
        2 => Err(ChargeError::Expired {
            month: 1,
            year: 2020,
        }),
        3 => Err(ChargeError::Timeout),
        _ => Ok(()),
    }
}

fn assert_handler<H: consumer::Handler<consumer::SqliteStore>>(_: H) {}

pub fn main() {
    assert_handler(charge_card);
}
