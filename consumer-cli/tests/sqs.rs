//! The `consumer` binary on an SQS dead-letter queue (needs an SQS
//! emulator: `scripts/services sqs` starts moto on 127.0.0.1:4566,
//! `SQS_ENDPOINT` names another; and PostgreSQL: `DATABASE_URL`): list,
//! show, a dry run, a replay with a canary to the letters' origin queue,
//! a rerun that sends nothing, export, import and purge.

use std::process::Output;
use std::time::Duration;

use consumer::testing::{FreshSchema, database_url};
use consumer::{Consumer, Message, Outgoing, PgStore, PgTx, Publisher, handler};
use consumer_sqs::{SqsClient, SqsPublisher, SqsSource, Topology};
use serde::{Deserialize, Serialize};

fn endpoint() -> String {
    std::env::var("SQS_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:4566".to_owned())
}

#[derive(Debug, Serialize, Deserialize)]
struct Booking {
    id: String,
}

#[derive(Debug, thiserror::Error)]
enum BookError {
    #[error("booking {0} is broken")]
    Broken(String),
    #[error("database error")]
    Db(#[from] sqlx::Error),
}

/// Fails (terminal) on bookings listed in `broken`, else writes a row.
#[handler(idempotency_key = b.id, retry = none, terminal = BookError::Broken(_))]
async fn book(b: Booking, tx: &mut PgTx) -> Result<(), BookError> {
    let broken: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM broken WHERE booking_id = $1)")
            .bind(&b.id)
            .fetch_one(&mut **tx)
            .await?;
    if broken {
        return Err(BookError::Broken(b.id));
    }
    sqlx::query("INSERT INTO bookings (booking_id) VALUES ($1)")
        .bind(&b.id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

struct World {
    schema: FreshSchema,
    client: SqsClient,
    queue: String,
    dlq: String,
}

impl World {
    async fn new() -> Self {
        let schema = FreshSchema::create("ct_cli_sqs", 8)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        sqlx::raw_sql(
            "CREATE TABLE bookings (booking_id TEXT NOT NULL); \
             CREATE TABLE broken (booking_id TEXT PRIMARY KEY)",
        )
        .execute(&schema.pool)
        .await
        .expect("business tables");
        let id = uuid::Uuid::new_v4().simple().to_string();
        let queue = format!("ct-cli-{}.fifo", &id[..12]);
        let client = SqsClient::local(endpoint());
        let topology = Topology::new(&queue).expect("queue name");
        let dlq = topology.dead_letter_queue().expect("dlq").to_string();
        topology.declare(&client).await.unwrap_or_else(|e| {
            panic!("no SQS emulator answers at {} ({e}): run `scripts/services sqs` or set SQS_ENDPOINT", endpoint())
        });
        Self {
            schema,
            client,
            queue,
            dlq,
        }
    }

    async fn set_broken(&self, ids: &[&str], broken: bool) {
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

    /// Runs `book` until `done` holds for its counters.
    async fn consume_until(&self, done: impl Fn(&consumer::stats::StatsSnapshot) -> bool) {
        let source =
            SqsSource::builder(self.client.clone(), Topology::new(&self.queue).expect("q"))
                .with_wait_time(Duration::from_secs(1))
                .connect()
                .await
                .expect("source");
        let consumer = Consumer::new(source, PgStore::new(self.schema.pool.clone()), book);
        let stats = consumer.stats();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(consumer.run_until(async move {
            let _ = stopped.await;
        }));
        tokio::time::timeout(Duration::from_secs(60), stats.wait_for(|s| done(s)))
            .await
            .expect("the consumer got there within 60 s");
        let _ = stop.send(());
        run.await.expect("join").expect("consumer");
    }

    async fn publish(&self, ids: &[&str]) {
        let publisher = SqsPublisher::builder(self.client.clone())
            .connect()
            .await
            .expect("publisher");
        let out: Vec<Outgoing> = ids
            .iter()
            .map(|id| Outgoing {
                destination: self.queue.clone(),
                message: Message::json(
                    "Booking",
                    &Booking {
                        id: (*id).to_owned(),
                    },
                )
                .expect("json")
                .with_key(*id)
                .with_id(format!("m-{id}")),
            })
            .collect();
        for r in publisher.publish(&out).await {
            r.expect("publish");
        }
    }

    async fn bookings(&self) -> Vec<String> {
        sqlx::query_scalar("SELECT booking_id FROM bookings ORDER BY booking_id")
            .fetch_all(&self.schema.pool)
            .await
            .expect("bookings")
    }

    async fn run(&self, args: &[&str]) -> Output {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_consumer"))
            .env("DATABASE_URL", database_url())
            .env("CONSUMER_SCHEMA", &self.schema.schema)
            .env("SQS_ENDPOINT", endpoint())
            .args(args)
            .kill_on_drop(true)
            .output()
            .await
            .expect("the consumer binary runs")
    }
}

fn both(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn json_lines(o: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqs_dead_letters_are_listed_and_replayed_with_a_canary_to_their_queue_once() {
    let w = World::new().await;
    let ids = ["a", "b", "c"];
    w.set_broken(&ids, true).await;
    w.publish(&ids).await;
    w.consume_until(|s| s.dead_terminal >= 3).await;

    let list = w
        .run(&["dead-letters", "list", "--sqs-queue", &w.dlq, "--json"])
        .await;
    assert!(list.status.success(), "{}", both(&list));
    let letters = json_lines(&list);
    assert_eq!(letters.len(), 3, "{}", both(&list));
    assert!(
        letters.iter().all(|l| l["kind"] == "terminal"),
        "{letters:?}"
    );
    let first = letters[0]["id"].as_str().expect("an id").to_owned();
    let show = w
        .run(&["dead-letters", "show", "--sqs-queue", &w.dlq, &first])
        .await;
    assert!(show.status.success(), "{}", both(&show));
    assert!(
        String::from_utf8_lossy(&show.stdout).contains("is broken"),
        "{}",
        both(&show)
    );

    let dry = w
        .run(&["dead-letters", "replay", "--sqs-queue", &w.dlq, "--dry-run"])
        .await;
    assert!(dry.status.success(), "{}", both(&dry));
    let again = w
        .run(&["dead-letters", "list", "--sqs-queue", &w.dlq, "--json"])
        .await;
    assert_eq!(
        json_lines(&again).len(),
        3,
        "a dry run and a list change nothing"
    );

    // Fixed: a consumer runs while the replay sends, one canary first.
    w.set_broken(&ids, false).await;
    let consumer = {
        let source = SqsSource::builder(w.client.clone(), Topology::new(&w.queue).expect("q"))
            .with_wait_time(Duration::from_secs(1))
            .connect()
            .await
            .expect("source");
        let consumer = Consumer::new(source, PgStore::new(w.schema.pool.clone()), book);
        let stats = consumer.stats();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(consumer.run_until(async move {
            let _ = stopped.await;
        }));
        (stats, stop, run)
    };
    let replay = w
        .run(&[
            "dead-letters",
            "replay",
            "--sqs-queue",
            &w.dlq,
            "--canary",
            "1",
            "--canary-timeout",
            "60s",
        ])
        .await;
    assert!(replay.status.success(), "{}", both(&replay));
    tokio::time::timeout(
        Duration::from_secs(60),
        consumer.0.wait_for(|s| s.processed >= 3),
    )
    .await
    .expect("the replays were processed");
    let _ = consumer.1.send(());
    consumer.2.await.expect("join").expect("consumer");
    assert_eq!(w.bookings().await, ["a", "b", "c"], "each once");
    let left = w
        .run(&["dead-letters", "list", "--sqs-queue", &w.dlq, "--json"])
        .await;
    assert!(json_lines(&left).is_empty(), "{}", both(&left));

    let rerun = w
        .run(&["dead-letters", "replay", "--sqs-queue", &w.dlq])
        .await;
    assert!(rerun.status.success(), "{}", both(&rerun));
    assert_eq!(w.bookings().await, ["a", "b", "c"], "a rerun sends nothing");
    let _ = w.schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sqs_dead_letter_queue_exports_imports_and_purges() {
    let w = World::new().await;
    let ids = ["x", "y"];
    w.set_broken(&ids, true).await;
    w.publish(&ids).await;
    w.consume_until(|s| s.dead_terminal >= 2).await;

    let export = w
        .run(&["dead-letters", "export", "--sqs-queue", &w.dlq])
        .await;
    assert!(export.status.success(), "{}", both(&export));
    let file = std::env::temp_dir().join(format!("sqs-export-{}.jsonl", uuid::Uuid::new_v4()));
    std::fs::write(&file, &export.stdout).expect("export file");

    let purge = w
        .run(&["dead-letters", "purge", "--sqs-queue", &w.dlq, "--yes"])
        .await;
    assert!(purge.status.success(), "{}", both(&purge));
    let empty = w
        .run(&["dead-letters", "list", "--sqs-queue", &w.dlq, "--json"])
        .await;
    assert!(json_lines(&empty).is_empty(), "{}", both(&empty));

    let path = file.to_string_lossy().into_owned();
    let import = w
        .run(&[
            "dead-letters",
            "import",
            "--sqs-queue",
            &w.dlq,
            "--input",
            &path,
        ])
        .await;
    assert!(import.status.success(), "{}", both(&import));
    let back = w
        .run(&["dead-letters", "list", "--sqs-queue", &w.dlq, "--json"])
        .await;
    let letters = json_lines(&back);
    assert_eq!(letters.len(), 2, "{}", both(&back));
    let mut keys: Vec<String> = letters
        .iter()
        .map(|l| l["key"].as_str().unwrap_or_default().to_owned())
        .collect();
    keys.sort();
    assert_eq!(keys, ["x", "y"]);
    let _ = std::fs::remove_file(&file);
    let _ = w.schema.drop_schema().await;
}
