//! One world per test: a fresh PostgreSQL schema (`DATABASE_URL`), a fresh
//! RabbitMQ work queue with its dead-letter queue (`AMQP_URL`), a consumer
//! of handler `book` on them, and the real `consumer` binary pointed at
//! both.

#![allow(dead_code)]

use std::process::Output;
use std::time::Duration;

use consumer::amqp::{AmqpPublisher, AmqpSource, Topology};
use consumer::envelope::names;
use consumer::testing::{FreshSchema, database_url};
use consumer::{Consumer, Headers, Message, PgStore, PgTx, Stats, handler};
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use serde::{Deserialize, Serialize};

pub mod kafka;
pub mod sagas;

/// The RabbitMQ the tests use.
pub fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

/// What `book` consumes.
#[derive(Debug, Serialize, Deserialize)]
pub struct Booking {
    pub id: String,
}

#[derive(Debug, thiserror::Error)]
pub enum BookError {
    #[error("booking {0} is broken")]
    Broken(String),
    /// A failure that heals (the secured-connection tests' retry).
    #[error("booking {0} failed on its first attempt")]
    Flaky(String),
    #[error("database error")]
    Db(#[from] sqlx::Error),
}

/// Fails (terminal) on bookings listed in `broken`, else writes one
/// business row per call into `bookings` (no unique key: a duplicate shows).
#[handler(idempotency_key = b.id, retry = none, terminal = BookError::Broken(_))]
pub async fn book(b: Booking, tx: &mut PgTx) -> Result<(), BookError> {
    book_or_refuse(&b, tx).await
}

/// `book`'s work: refuses a booking listed in `broken`, else writes its
/// row.
pub async fn book_or_refuse(b: &Booking, tx: &mut PgTx) -> Result<(), BookError> {
    let broken: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM broken WHERE booking_id = $1)")
            .bind(&b.id)
            .fetch_one(&mut **tx)
            .await?;
    if broken {
        return Err(BookError::Broken(b.id.clone()));
    }
    sqlx::query("INSERT INTO bookings (booking_id) VALUES ($1)")
        .bind(&b.id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Whether something takes TCP connections at `address` (`host:port`)
/// within 2 s.
pub fn takes_connections(address: &str) -> bool {
    std::net::ToSocketAddrs::to_socket_addrs(address)
        .map(|mut a| {
            a.any(|a| std::net::TcpStream::connect_timeout(&a, Duration::from_secs(2)).is_ok())
        })
        .unwrap_or(false)
}

/// Polls until `check` holds (the database and the broker have no event to
/// await), within 60 s.
pub async fn eventually<F, Fut>(what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let waited = tokio::time::timeout(Duration::from_secs(60), async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "timed out after 60 s waiting for {what}");
}

pub struct World {
    pub schema: FreshSchema,
    pub topology: Topology,
    publisher: AmqpPublisher,
}

/// A running consumer of `book`.
pub struct Running {
    pub stats: std::sync::Arc<Stats>,
    stop: tokio::sync::oneshot::Sender<()>,
    join: tokio::task::JoinHandle<Result<(), consumer::Error>>,
}

impl Running {
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.join
            .await
            .expect("consumer task")
            .expect("consumer ran cleanly");
    }
}

impl World {
    pub async fn new(tag: &str) -> Self {
        let schema = FreshSchema::create("ct_cli", 8)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        sqlx::raw_sql(
            "CREATE TABLE bookings (booking_id TEXT NOT NULL); \
             CREATE TABLE broken (booking_id TEXT PRIMARY KEY)",
        )
        .execute(&schema.pool)
        .await
        .expect("business tables");
        let queue = format!("ct.cli.{tag}.{}", uuid::Uuid::now_v7().simple());
        let topology = Topology::new(queue)
            .expect("queue name")
            .with_max_retry_delay(Duration::from_secs(1))
            .with_expires(Duration::from_secs(600));
        let world = Self {
            schema,
            topology,
            publisher: AmqpPublisher::builder(amqp_url()).build(),
        };
        // The source declares the topology.
        world.source().await;
        world
    }

    pub async fn source(&self) -> AmqpSource {
        let url = amqp_url();
        AmqpSource::builder(url.clone(), self.topology.clone())
            .connect()
            .await
            .unwrap_or_else(|e| {
                panic!("RabbitMQ is not reachable at {url} ({e}): start it or set AMQP_URL")
            })
    }

    pub fn queue(&self) -> &str {
        self.topology.queue()
    }

    pub fn dlq(&self) -> &str {
        self.topology.dead_letter_queue()
    }

    pub async fn start_consumer(&self) -> Running {
        let consumer = Consumer::new(
            self.source().await,
            PgStore::new(self.schema.pool.clone()),
            book,
        );
        let stats = consumer.stats();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let join = tokio::spawn(consumer.run_until(async move {
            let _ = stopped.await;
        }));
        Running { stats, stop, join }
    }

    /// Marks bookings as failing (or, with `false`, fixes them).
    pub async fn set_broken(&self, ids: &[&str], broken: bool) {
        for id in ids {
            let sql = if broken {
                "INSERT INTO broken (booking_id) VALUES ($1) ON CONFLICT DO NOTHING"
            } else {
                "DELETE FROM broken WHERE booking_id = $1"
            };
            sqlx::query(sql)
                .bind(*id)
                .execute(&self.schema.pool)
                .await
                .expect("switch");
        }
    }

    /// Publishes bookings to the work queue, message id `m-<id>`, key `<id>`.
    pub async fn publish(&self, ids: &[&str]) {
        for id in ids {
            let mut headers = Headers::new();
            headers.insert(names::ID, format!("m-{id}"));
            let message = Message {
                key: Some((*id).to_owned()),
                headers,
                payload: serde_json::to_vec(&Booking {
                    id: (*id).to_owned(),
                })
                .expect("json")
                .into(),
            };
            self.publisher
                .publish_to("", self.queue(), &message, None)
                .await
                .expect("publish booking");
        }
    }

    /// Publishes `ids` with every one failing, and waits until each is a
    /// dead letter in the DLQ.
    pub async fn dead_letters(&self, ids: &[&str]) {
        self.set_broken(ids, true).await;
        let running = self.start_consumer().await;
        self.publish(ids).await;
        let n = ids.len() as u64;
        tokio::time::timeout(
            Duration::from_secs(60),
            running.stats.wait_for(|s| s.dead_terminal >= n),
        )
        .await
        .expect("the letters were dead-lettered within 60 s");
        running.stop().await;
        self.wait_depth(self.dlq(), ids.len() as u32).await;
    }

    /// Messages in `queue`.
    pub async fn depth(&self, queue: &str) -> u32 {
        let conn = lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default())
            .await
            .expect("RabbitMQ connection");
        let channel = conn.create_channel().await.expect("channel");
        let q = channel
            .queue_declare(
                queue.into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("passive declare");
        let _ = conn.close(200, "depth read".into()).await;
        q.message_count()
    }

    pub async fn wait_depth(&self, queue: &str, n: u32) {
        eventually(&format!("{n} messages in {queue}"), || async move {
            self.depth(queue).await == n
        })
        .await;
    }

    /// Business rows of `book`, sorted.
    pub async fn bookings(&self) -> Vec<String> {
        sqlx::query_scalar("SELECT booking_id FROM bookings ORDER BY booking_id")
            .fetch_all(&self.schema.pool)
            .await
            .expect("bookings")
    }

    /// Rows of the replay journal (0 when it was never created).
    pub async fn journal_rows(&self) -> i64 {
        let exists: Option<String> =
            sqlx::query_scalar("SELECT to_regclass('consumer_replay_journal')::text")
                .fetch_one(&self.schema.pool)
                .await
                .expect("regclass");
        if exists.is_none() {
            return 0;
        }
        sqlx::query_scalar("SELECT count(*) FROM consumer_replay_journal")
            .fetch_one(&self.schema.pool)
            .await
            .expect("journal count")
    }

    /// The binary, pointed at this world.
    pub fn cli(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_consumer"));
        cmd.env("DATABASE_URL", database_url())
            .env("CONSUMER_SCHEMA", &self.schema.schema)
            .env("AMQP_URL", amqp_url())
            .kill_on_drop(true);
        cmd
    }

    /// Runs the binary with `args` to completion.
    pub async fn run(&self, args: &[&str]) -> Output {
        self.cli()
            .args(args)
            .output()
            .await
            .expect("the consumer binary runs")
    }

    pub async fn close(self) {
        self.publisher.close().await;
        let _ = self.schema.drop_schema().await;
    }
}

/// Standard output as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Both streams, for failure messages.
pub fn both(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
