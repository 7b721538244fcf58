//! `consumer kinesis shards | checkpoint` on a real PostgreSQL store
//! (`DATABASE_URL`): the lease table a Kinesis consumer keeps there
//! (`consumer-kinesis-store`), one shard leased by a live instance and one
//! free. The tool lists both with their owners and checkpoints, refuses to
//! move the leased shard's checkpoint, shows a move on a dry run without
//! writing it, moves it, and refuses what is not a sequence number.
//!
//! And a Kinesis consumer's dead letters (needs moto's Kinesis too:
//! `scripts/services sqs` starts it on 127.0.0.1:4566, `KINESIS_ENDPOINT`
//! names another): a consumer dead-letters a message into its dead-letter
//! stream, the tool lists it there, replays it to the origin stream once
//! (a rerun sends nothing), and the fixed consumer processes it once.

mod support;

use std::time::{Duration, SystemTime};

use consumer::testing::{FreshSchema, database_url};
use consumer::{Consumer, Message, Outgoing, PgStore, Publisher};
use consumer_kinesis::aws_sdk_kinesis;
use consumer_kinesis::lease::{Checkpoint, CheckpointWrite, LeaseStore};
use consumer_kinesis::{KinesisClient, KinesisPublisher, KinesisSource};
use consumer_kinesis_store::SqlLeaseStore;
use support::{Booking, book, both, stdout};

const LEASED: &str = "shardId-000000000000";
const FREE: &str = "shardId-000000000001";

async fn run(schema: &FreshSchema, args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_consumer"))
        .env("DATABASE_URL", database_url())
        .env("CONSUMER_SCHEMA", &schema.schema)
        .arg("kinesis")
        .args(args)
        .args(["--application", "billing", "--stream", "orders"])
        .kill_on_drop(true)
        .output()
        .await
        .expect("the consumer binary runs")
}

#[tokio::test]
async fn the_tool_lists_shards_and_moves_a_free_shards_checkpoint_only() {
    let schema = FreshSchema::create("ct_cli_kinesis", 4)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let store = SqlLeaseStore::new(schema.pool.clone(), "billing", "orders");
    store.migrate().await.expect("the lease table");
    store
        .ensure(&[LEASED.to_owned(), FREE.to_owned()])
        .await
        .expect("lease rows");
    let until = SystemTime::now() + Duration::from_secs(600);
    store
        .take(LEASED, "instance-7", 0, until, false)
        .await
        .expect("take")
        .expect("a free lease");
    assert_eq!(
        store
            .checkpoint(LEASED, "instance-7", Checkpoint::At("4200".into()))
            .await
            .expect("checkpoint"),
        CheckpointWrite::Written
    );

    let listed = run(&schema, &["shards"]).await;
    assert!(listed.status.success(), "{}", both(&listed));
    let text = stdout(&listed);
    let row = |shard: &str| {
        text.lines()
            .find(|l| l.starts_with(shard))
            .unwrap_or_else(|| panic!("no row for {shard}:\n{text}"))
            .to_owned()
    };
    assert!(
        row(LEASED).contains("instance-7")
            && row(LEASED).contains("held until")
            && row(LEASED).contains("4200"),
        "{text}"
    );
    assert!(row(FREE).contains("free"), "{text}");

    let json = run(&schema, &["shards", "--json"]).await;
    let first: serde_json::Value =
        serde_json::from_str(stdout(&json).lines().next().expect("a line")).expect("JSON");
    assert_eq!(
        (
            first["shard_id"].as_str(),
            first["owner"].as_str(),
            first["checkpoint"].as_str()
        ),
        (Some(LEASED), Some("instance-7"), Some("4200"))
    );

    let refused = run(&schema, &["checkpoint", "--shard", LEASED, "--to-start"]).await;
    assert_eq!(refused.status.code(), Some(7), "{}", both(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("leased to `instance-7`"),
        "{}",
        both(&refused)
    );

    let dry = run(
        &schema,
        &["checkpoint", "--shard", FREE, "--to", "99", "--dry-run"],
    )
    .await;
    assert!(dry.status.success(), "{}", both(&dry));
    assert!(
        stdout(&dry).contains("would move from - to 99"),
        "{}",
        both(&dry)
    );
    assert_eq!(
        store.checkpoint_of(FREE).await.expect("read"),
        None,
        "a dry run writes nothing"
    );

    let moved = run(&schema, &["checkpoint", "--shard", FREE, "--to", "99"]).await;
    assert!(moved.status.success(), "{}", both(&moved));
    assert_eq!(
        store.checkpoint_of(FREE).await.expect("read"),
        Some(Checkpoint::At("99".into()))
    );

    let bad = run(
        &schema,
        &["checkpoint", "--shard", FREE, "--to", "TRIM_HORIZON"],
    )
    .await;
    assert_eq!(bad.status.code(), Some(7), "{}", both(&bad));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("not a Kinesis sequence number"),
        "{}",
        both(&bad)
    );
    schema.drop_schema().await.expect("drop the test schema");
}

fn kinesis_endpoint() -> String {
    std::env::var("KINESIS_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:4566".to_owned())
}

/// The test's streams, deleted when it ends however it ends.
struct Streams {
    sdk: aws_sdk_kinesis::Client,
    names: Vec<String>,
}

impl Streams {
    fn new() -> Self {
        let config = consumer_aws::local_config(kinesis_endpoint(), "consumer-cli-tests");
        Self {
            sdk: aws_sdk_kinesis::Client::new(&config),
            names: Vec::new(),
        }
    }

    /// A one-shard stream of the test's own, active.
    async fn create(&mut self, tag: &str) -> String {
        let name = format!(
            "ct-cli-{tag}-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        let created = tokio::time::timeout(
            Duration::from_secs(10),
            self.sdk
                .create_stream()
                .stream_name(&name)
                .shard_count(1)
                .send(),
        )
        .await;
        assert!(
            matches!(created, Ok(Ok(_))),
            "no Kinesis emulator answers at {}: run `scripts/services sqs` (it starts moto, which serves Kinesis) or set KINESIS_ENDPOINT ({created:?})",
            kinesis_endpoint()
        );
        self.names.push(name.clone());
        self.wait_active(&name).await;
        name
    }

    async fn wait_active(&self, name: &str) {
        support::eventually(&format!("stream {name} active"), || async {
            self.sdk
                .describe_stream_summary()
                .stream_name(name)
                .send()
                .await
                .ok()
                .and_then(|s| {
                    s.stream_description_summary()
                        .map(|d| d.stream_status().clone())
                })
                == Some(aws_sdk_kinesis::types::StreamStatus::Active)
        })
        .await;
    }
}

impl Drop for Streams {
    fn drop(&mut self) {
        let sdk = self.sdk.clone();
        let names = std::mem::take(&mut self.names);
        let deleting = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                for name in names {
                    let _ = sdk.delete_stream().stream_name(name).send().await;
                }
            });
        });
        let _ = deleting.join();
    }
}

type Builder = consumer_kinesis::KinesisSourceBuilder<SqlLeaseStore<sqlx::Postgres>>;

/// Runs `book` on `stream` (dead letters where `letters` says, leases in
/// the schema) until `done` holds for its counters, then stops it.
async fn consume_until(
    schema: &FreshSchema,
    stream: &str,
    letters: impl FnOnce(Builder) -> Builder,
    done: impl Fn(&consumer::stats::StatsSnapshot) -> bool,
) -> consumer::stats::StatsSnapshot {
    let leases = SqlLeaseStore::new(schema.pool.clone(), "billing", stream);
    leases.migrate().await.expect("the lease table");
    let builder = KinesisSource::builder(KinesisClient::local(kinesis_endpoint()), stream, leases);
    let source = letters(builder)
        .with_lease_duration(Duration::from_secs(2))
        .with_poll_interval(Duration::from_millis(200))
        .with_checkpoint_interval(Duration::from_millis(50))
        .connect()
        .await
        .expect("a Kinesis source");
    let consumer = Consumer::new(source, PgStore::new(schema.pool.clone()), book);
    let stats = consumer.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));
    let reached = tokio::time::timeout(Duration::from_secs(60), stats.wait_for(|s| done(s)))
        .await
        .expect("the consumer got there within 60 s");
    let _ = stop.send(());
    run.await.expect("join").expect("consumer");
    reached
}

/// A schema with `book`'s tables, booking `a` broken.
async fn booking_schema() -> FreshSchema {
    let schema = FreshSchema::create("ct_cli_kinesis_dlq", 8)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    sqlx::raw_sql(
        "CREATE TABLE bookings (booking_id TEXT NOT NULL); \
         CREATE TABLE broken (booking_id TEXT PRIMARY KEY); \
         INSERT INTO broken VALUES ('a')",
    )
    .execute(&schema.pool)
    .await
    .expect("business tables");
    schema
}

/// The binary with `args`, pointed at the schema and the emulators.
async fn cli(schema: &FreshSchema, args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_consumer"))
        .env("DATABASE_URL", database_url())
        .env("CONSUMER_SCHEMA", &schema.schema)
        .env("KINESIS_ENDPOINT", kinesis_endpoint())
        .env("SQS_ENDPOINT", kinesis_endpoint())
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .expect("the consumer binary runs")
}

/// Booking `a`, keyed and identified, as a producer puts it on `stream`.
fn booking_on(stream: &str) -> Outgoing {
    Outgoing {
        destination: stream.to_owned(),
        message: Message::json("Booking", &Booking { id: "a".into() })
            .expect("json")
            .with_key("a")
            .with_id("m-a"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kinesis_consumers_dead_letter_is_listed_and_replayed_to_its_stream_once() {
    let schema = booking_schema().await;
    let mut streams = Streams::new();
    let stream = streams.create("orders").await;
    let dead = streams.create("orders-dlq").await;
    let client = KinesisClient::local(kinesis_endpoint());
    let publisher = KinesisPublisher::builder(client).build();
    // A record another producer put on the dead-letter stream: no letter.
    let stray = Outgoing {
        destination: dead.clone(),
        message: Message::raw(&b"not a letter"[..]).with_key("x"),
    };
    for r in publisher.publish(&[booking_on(&stream), stray]).await {
        r.expect("Kinesis takes the record");
    }
    let to_dead = |b: Builder| b.with_dead_letter_stream(&dead);
    consume_until(&schema, &stream, to_dead, |s| s.dead_terminal >= 1).await;
    let leases = SqlLeaseStore::new(schema.pool.clone(), "billing", stream.as_str());
    assert!(
        matches!(
            leases
                .checkpoint_of("shardId-000000000000")
                .await
                .expect("read"),
            Some(Checkpoint::At(_))
        ),
        "the dead-lettered record is checkpointed"
    );

    let list = cli(
        &schema,
        &["dead-letters", "list", "--kinesis-stream", &dead, "--json"],
    )
    .await;
    assert!(list.status.success(), "{}", both(&list));
    let letters: Vec<serde_json::Value> = stdout(&list)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(letters.len(), 1, "{}", both(&list));
    assert_eq!(
        (
            letters[0]["kind"].as_str(),
            letters[0]["message_id"].as_str()
        ),
        (Some("terminal"), Some("m-a")),
        "{}",
        both(&list)
    );
    assert!(
        String::from_utf8_lossy(&list.stderr).contains("1 other message(s) carry no x-dlq-*"),
        "{}",
        both(&list)
    );
    let id = letters[0]["id"].as_str().expect("an id").to_owned();
    let show = cli(
        &schema,
        &["dead-letters", "show", &id, "--kinesis-stream", &dead],
    )
    .await;
    assert!(
        show.status.success() && stdout(&show).contains("booking a is broken"),
        "{}",
        both(&show)
    );
    let purge = cli(
        &schema,
        &["dead-letters", "purge", "--kinesis-stream", &dead, "--yes"],
    )
    .await;
    assert_eq!(purge.status.code(), Some(2), "{}", both(&purge));
    assert!(
        String::from_utf8_lossy(&purge.stderr).contains("retention deletes letters"),
        "{}",
        both(&purge)
    );

    sqlx::query("DELETE FROM broken")
        .execute(&schema.pool)
        .await
        .expect("the handler fixed");
    let replay = cli(
        &schema,
        &["dead-letters", "replay", "--kinesis-stream", &dead],
    )
    .await;
    assert!(replay.status.success(), "{}", both(&replay));
    assert!(
        stdout(&replay).contains(&format!("-> Kinesis stream {stream}"))
            && stdout(&replay).contains("replayed 1;"),
        "{}",
        both(&replay)
    );
    let again = cli(
        &schema,
        &["dead-letters", "replay", "--kinesis-stream", &dead],
    )
    .await;
    assert!(again.status.success(), "{}", both(&again));
    assert!(
        stdout(&again).contains("replayed 0;") && stdout(&again).contains("already sent 1"),
        "a rerun sends nothing: {}",
        both(&again)
    );

    let after = consume_until(&schema, &stream, to_dead, |s| s.processed >= 1).await;
    assert_eq!(
        (after.received, after.dead_terminal, after.duplicates),
        (1, 0, 0),
        "only the replay is read after the checkpoint: {after:?}"
    );
    let bookings: Vec<String> = sqlx::query_scalar("SELECT booking_id FROM bookings")
        .fetch_all(&schema.pool)
        .await
        .expect("bookings");
    assert_eq!(bookings, ["a"], "processed once");
    schema.drop_schema().await.expect("drop the test schema");
}

/// A Kinesis consumer whose dead letters go to an SQS queue: the letters'
/// origin is the stream, so a replay from the queue goes to the stream,
/// not to an SQS queue of the stream's name.
#[cfg(feature = "sqs")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kinesis_consumers_dead_letter_in_an_sqs_queue_is_replayed_to_its_stream() {
    use consumer_sqs::{SqsClient, SqsPublisher, Topology};

    let schema = booking_schema().await;
    let mut streams = Streams::new();
    let stream = streams.create("orders").await;
    let sqs = SqsClient::local(kinesis_endpoint());
    let queue = format!(
        "ct-cli-kdlq-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    Topology::new(&queue)
        .expect("a queue name")
        .declare(&sqs)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "no SQS emulator answers at {} ({e}): run `scripts/services sqs`",
                kinesis_endpoint()
            )
        });
    let publisher = KinesisPublisher::builder(KinesisClient::local(kinesis_endpoint())).build();
    for r in publisher.publish(&[booking_on(&stream)]).await {
        r.expect("Kinesis takes the record");
    }
    let letters_publisher = SqsPublisher::builder(sqs.clone())
        .connect()
        .await
        .expect("an SQS publisher");
    let to_queue = |b: Builder| b.with_dead_letter_publisher(letters_publisher.clone(), &queue);
    consume_until(&schema, &stream, to_queue, |s| s.dead_terminal >= 1).await;

    sqlx::query("DELETE FROM broken")
        .execute(&schema.pool)
        .await
        .expect("the handler fixed");
    let replay = cli(&schema, &["dead-letters", "replay", "--sqs-queue", &queue]).await;
    assert!(replay.status.success(), "{}", both(&replay));
    assert!(
        stdout(&replay).contains(&format!("-> Kinesis stream {stream}"))
            && stdout(&replay).contains("replayed 1;"),
        "{}",
        both(&replay)
    );
    let list = cli(
        &schema,
        &["dead-letters", "list", "--sqs-queue", &queue, "--json"],
    )
    .await;
    assert!(
        list.status.success() && stdout(&list).trim().is_empty(),
        "a replayed letter is deleted from the queue: {}",
        both(&list)
    );
    let after = consume_until(&schema, &stream, to_queue, |s| s.processed >= 1).await;
    assert_eq!((after.received, after.duplicates), (1, 0), "{after:?}");
    let bookings: Vec<String> = sqlx::query_scalar("SELECT booking_id FROM bookings")
        .fetch_all(&schema.pool)
        .await
        .expect("bookings");
    assert_eq!(bookings, ["a"], "processed once");
    schema.drop_schema().await.expect("drop the test schema");
}

/// A letter of handler `book` for message `m-{n}`, consumed from a
/// Kinesis stream, as the source puts it on its dead-letter stream.
fn letter(n: u32) -> Outgoing {
    let now = time::OffsetDateTime::now_utc();
    let letter = consumer::DeadLetter {
        kind: consumer::DeadLetterKind::Terminal,
        error: format!("booking {n} is broken"),
        causes: Vec::new(),
        attempts: 1,
        first_failure: now,
        last_failure: now,
        handler: "book".into(),
        message_id: format!("m-{n}"),
        key: Some(format!("k-{n}")),
        origin: consumer::envelope::Origin {
            channel: String::from("orders").into(),
            position: format!("shardId-000000000000/{n}").into(),
            ..Default::default()
        },
        original_headers: consumer::Headers::default(),
        payload: bytes::Bytes::from_static(b"{}"),
        payload_omitted: None,
    };
    Outgoing {
        destination: String::new(),
        message: letter.to_message(),
    }
}

/// A dead-letter stream resharded between two letters: the snapshot reads
/// the closed parent and its children, parent first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resharded_dead_letter_stream_is_read_parent_first() {
    let schema = booking_schema().await;
    let mut streams = Streams::new();
    let dead = streams.create("resharded-dlq").await;
    let publisher = KinesisPublisher::builder(KinesisClient::local(kinesis_endpoint())).build();
    let put = |n: u32| Outgoing {
        destination: dead.clone(),
        ..letter(n)
    };
    for r in publisher.publish(&[put(1)]).await {
        r.expect("Kinesis takes the letter");
    }
    streams
        .sdk
        .split_shard()
        .stream_name(&dead)
        .shard_to_split("shardId-000000000000")
        .new_starting_hash_key("170141183460469231731687303715884105728")
        .send()
        .await
        .expect("SplitShard answers for an active stream's open shard");
    streams.wait_active(&dead).await;
    for r in publisher.publish(&[put(2)]).await {
        r.expect("Kinesis takes the letter");
    }
    let list = cli(
        &schema,
        &["dead-letters", "list", "--kinesis-stream", &dead, "--json"],
    )
    .await;
    assert!(list.status.success(), "{}", both(&list));
    let ids: Vec<String> = stdout(&list)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a JSON line"))
        .filter_map(|l| l["message_id"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(ids, ["m-1", "m-2"], "{}", both(&list));
    schema.drop_schema().await.expect("drop the test schema");
}
