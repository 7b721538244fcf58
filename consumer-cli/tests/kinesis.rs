//! `consumer kinesis shards | checkpoint` on a real PostgreSQL store
//! (`DATABASE_URL`): the lease table a Kinesis consumer keeps there
//! (`consumer-kinesis-store`), one shard leased by a live instance and one
//! free. The tool lists both with their owners and checkpoints, refuses to
//! move the leased shard's checkpoint, shows a move on a dry run without
//! writing it, moves it, and refuses what is not a sequence number.

mod support;

use std::time::{Duration, SystemTime};

use consumer::testing::{FreshSchema, database_url};
use consumer_kinesis::lease::{Checkpoint, CheckpointWrite, LeaseStore};
use consumer_kinesis_store::SqlLeaseStore;
use support::{both, stdout};

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
