//! A service whose message types are the ones that broke other
//! generators: nested structs, enums of each serde tagging, `Option`,
//! maps, recursive and generic types, a field the two contracts see
//! differently (`#[serde(default)]`).

use std::collections::{BTreeMap, HashMap};

use consumer::{
    Consumer, MemoryBroker, MemoryStore, Outbox, OutboxRelay, Router, Service, handler,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Order {
    pub id: String,
    pub lines: Vec<Line>,
    pub shipping: Option<Address>,
    pub tags: BTreeMap<String, String>,
    pub totals: HashMap<String, Money>,
    pub status: Status,
    pub payment: Payment,
    pub note: Note,
    pub amount: Amount,
    pub category: Category,
    /// Required when sent, optional when read: the contracts differ.
    #[serde(default)]
    pub priority: u8,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Line {
    pub sku: String,
    pub quantity: u32,
    pub price: Money,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Money {
    pub cents: i64,
    pub currency: String,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Address {
    pub street: String,
    pub city: String,
    pub zip: Option<String>,
}

/// Externally tagged (serde's default).
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub enum Status {
    Placed,
    Paid { at: String },
    Shipped(String),
    Split(u32, u32),
}

/// Internally tagged.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Payment {
    Card { last4: String },
    Cash,
    Voucher { code: String, value: Money },
}

/// Adjacently tagged.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "t", content = "c")]
pub enum Note {
    Text(String),
    Rating(u8),
    Empty,
}

/// Untagged.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Amount {
    Cents(i64),
    Text(String),
    Detailed { value: i64, unit: String },
}

/// Recursive, directly and through `Option<Box<_>>`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Category {
    pub name: String,
    pub children: Vec<Category>,
    pub parent: Option<Box<Category>>,
}

/// Generic: its schema name has the parameter in it.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Batch<T> {
    pub items: Vec<T>,
    pub next: Option<String>,
}

#[derive(Debug, thiserror::Error)]
#[error("never")]
pub struct Never;

#[handler(event_type = "OrderRecorded")]
async fn record_order(_order: Order) -> Result<(), Never> {
    Ok(())
}

#[handler(event_type = "LinesBatched")]
async fn batch_lines(_batch: Batch<Line>) -> Result<(), Never> {
    Ok(())
}

#[handler]
async fn audit_amount(_amount: Amount) -> Result<(), Never> {
    Ok(())
}

/// The fixture service: a router over `orders`, a single handler over
/// `amounts`, and an outbox sending `Order`s to `orders`.
pub fn service(pool: sqlx::SqlitePool) -> anyhow::Result<Service> {
    let broker = MemoryBroker::new(1);
    let router = Router::builder("orders")
        .route(record_order)
        .route(batch_lines)
        .build()?;
    let outbox = Outbox::new()
        .with_default_destination("orders")
        .with_event::<Order>("OrderRecorded");
    Ok(Service::new("fixture")
        .with_version("1.0.0")
        .relay("outbox", OutboxRelay::new(pool, outbox, broker.clone()))
        .consumer(
            "orders",
            Consumer::router(broker.source("orders"), MemoryStore::new(), router),
        )
        .consumer(
            "amounts",
            Consumer::new(broker.source("amounts"), MemoryStore::new(), audit_amount),
        ))
}
