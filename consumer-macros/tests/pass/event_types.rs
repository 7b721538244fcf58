//! A handler takes the event types it names, or its message type's name.

use consumer::{Handler, SqliteStore, handler};

mod events {
    #[derive(serde::Deserialize)]
    pub struct OrderPlaced {
        pub id: String,
    }
}

#[derive(serde::Deserialize)]
struct Payment {
    order: String,
}

#[derive(Debug, thiserror::Error)]
#[error("failed")]
struct Failed;

#[handler]
async fn placed(order: events::OrderPlaced) -> Result<(), Failed> {
    let _ = order.id;
    Ok(())
}

#[handler(event_type = "payments.captured")]
async fn captured(payment: Payment) -> Result<(), Failed> {
    let _ = payment.order;
    Ok(())
}

#[handler(event_type = ["OrderPaid", "OrderRefunded"])]
async fn money(payment: Payment) -> Result<(), Failed> {
    let _ = payment.order;
    Ok(())
}

fn types<H: Handler<SqliteStore>>(h: H) -> Vec<&'static str> {
    h.event_types().to_vec()
}

pub fn main() {
    assert_eq!(types(placed), ["OrderPlaced"]);
    assert_eq!(types(captured), ["payments.captured"]);
    assert_eq!(types(money), ["OrderPaid", "OrderRefunded"]);
}
