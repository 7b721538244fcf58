//! The consumer behind the operations guide's walk-through: handler `book`
//! on RabbitMQ queue `demo.bookings` with its store in PostgreSQL schema
//! `cli_demo`. It publishes three bookings, one of which (`b-2`) the
//! handler cannot take yet (it is listed in table `broken`), and consumes
//! until Ctrl-C. "Fixing the bug" is `DELETE FROM cli_demo.broken`.
//!
//! ```text
//! cargo run -p consumer-cli --example poison_demo
//! ```

use std::str::FromStr;

use consumer::amqp::{AmqpPublisher, AmqpSource, Topology};
use consumer::envelope::names;
use consumer::{Consumer, Headers, Message, PgStore, PgTx, handler};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Booking {
    id: String,
    seats: u32,
}

#[derive(Debug, thiserror::Error)]
enum BookError {
    #[error("seat map for booking {0} is missing")]
    NoSeatMap(String),
    #[error("database error")]
    Db(#[from] sqlx::Error),
}

#[handler(idempotency_key = b.id, retry = none, terminal = BookError::NoSeatMap(_))]
async fn book(b: Booking, tx: &mut PgTx) -> Result<(), BookError> {
    let broken: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM broken WHERE booking_id = $1)")
            .bind(&b.id)
            .fetch_one(&mut **tx)
            .await?;
    if broken {
        return Err(BookError::NoSeatMap(b.id));
    }
    sqlx::query("INSERT INTO bookings (booking_id, seats) VALUES ($1, $2)")
        .bind(&b.id)
        .bind(i32::try_from(b.seats).unwrap_or(i32::MAX))
        .execute(&mut **tx)
        .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_owned());
    let amqp_url = env("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f");
    let database_url = env("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test");

    let admin = sqlx::PgPool::connect(&database_url).await?;
    sqlx::query("CREATE SCHEMA IF NOT EXISTS cli_demo")
        .execute(&admin)
        .await?;
    admin.close().await;
    let options = sqlx::postgres::PgConnectOptions::from_str(&database_url)?
        .options([("search_path", "cli_demo")]);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await?;
    let store = PgStore::new(pool.clone());
    store.migrate().await?;
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS bookings (booking_id TEXT NOT NULL, seats INTEGER NOT NULL); \
         CREATE TABLE IF NOT EXISTS broken (booking_id TEXT PRIMARY KEY); \
         INSERT INTO broken VALUES ('b-2') ON CONFLICT DO NOTHING",
    )
    .execute(&pool)
    .await?;

    let topology = Topology::new("demo.bookings")?;
    let source = AmqpSource::builder(amqp_url.clone(), topology.clone())
        .connect()
        .await?;
    let publisher = AmqpPublisher::builder(amqp_url).connect().await?;
    for (i, seats) in [(1, 2), (2, 4), (3, 1)] {
        let id = format!("b-{i}");
        let mut headers = Headers::new();
        headers.insert(names::ID, format!("booking-{i}"));
        headers.insert(names::CONTENT_TYPE, "application/json");
        let message = Message {
            key: Some(id.clone()),
            headers,
            payload: serde_json::to_vec(&Booking { id, seats })?.into(),
        };
        publisher
            .publish_to("", topology.queue(), &message, None)
            .await?;
    }
    publisher.close().await;
    eprintln!("consuming demo.bookings; Ctrl-C to stop");
    Consumer::new(source, store, book)
        .run_until(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
