//! A saga's history has rows of its own (`consumer_saga_history`), on
//! PostgreSQL and SQLite: a saga of more than 100 transitions keeps
//! exactly its last 100 entries, oldest first, whether read one saga at a
//! time or in a listing, and its row no longer carries them; a table of
//! the previous version has its history moved there by the migration, and
//! its sagas go on.
//!
//! Needs PostgreSQL at `DATABASE_URL` (`scripts/services postgres`).

use std::time::Duration;

use consumer::saga::{
    HistoryEntry, NotFound, SagaBuilder, SagaDatabase, SagaFilter, SagaRecord, SagaStore,
    SagaTables, Step,
};
use consumer::testing::FreshSchema;
use consumer::{Consumer, MemoryBroker, Message, Outbox, Saga, Store};
use serde::{Deserialize, Serialize};

const TOPIC: &str = "accounts";
/// Transitions of the long saga: more than the 100 its history keeps.
const TRANSITIONS: usize = 105;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Deposit {
    account: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Balance {
    deposits: u32,
}

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

struct Ledger;

impl Saga for Ledger {
    type State = Balance;
    type Error = Never;
    fn name(&self) -> &'static str {
        "ledger"
    }
}

fn deposit(_: &Ledger, b: &mut Balance, _: Deposit, _: &mut Step<'_>) -> Result<(), Never> {
    b.deposits += 1;
    Ok(())
}

/// `Opened` then `Deposit`s for `account`; each message's id, in order.
fn messages(account: &str, kinds: &[&str]) -> (Vec<Message>, Vec<String>) {
    let mut ids = Vec::new();
    let msgs = kinds
        .iter()
        .map(|kind| {
            let d = Deposit {
                account: account.to_owned(),
            };
            let m = Message::json(kind, &d)
                .expect("json")
                .with_key(account.to_owned());
            let id = m.headers.get(consumer::envelope::names::ID);
            ids.push(id.expect("a header").expect("ce_id").to_owned());
            m
        })
        .collect();
    (msgs, ids)
}

/// Runs the ledger saga over `msgs` on `store` until they are drained.
async fn run<DB: SagaDatabase>(store: Store<DB>, msgs: Vec<Message>) {
    let account = |d: &Deposit| d.account.clone();
    let saga = SagaBuilder::new(Ledger, Outbox::new())
        .on("Opened", account, NotFound::Start, deposit)
        .on(
            "Deposit",
            account,
            NotFound::dead_letter("no account"),
            deposit,
        )
        .build()
        .expect("the saga");
    let broker = MemoryBroker::new(1);
    for m in msgs {
        broker.publish(TOPIC, m).await.expect("publish");
    }
    let drained = broker.clone();
    let consumer = Consumer::new(broker.source(TOPIC), store, saga);
    let stats = consumer.stats();
    tokio::time::timeout(
        Duration::from_secs(60),
        consumer.run_until(async move { drained.wait_drained(TOPIC).await }),
    )
    .await
    .expect("the messages drained within a minute")
    .expect("the consumer");
    let s = stats.snapshot();
    assert_eq!(
        (s.dead_letters(), s.retries),
        (0, 0),
        "every message applied: {s:?}"
    );
}

/// The saga's record, read alone and in a listing (the same).
async fn read<DB: SagaDatabase>(pool: &sqlx::Pool<DB>, account: &str) -> SagaRecord {
    let store = SagaStore::new(pool.clone());
    let one = store
        .get("ledger", account)
        .await
        .expect("get")
        .expect("the saga");
    let listed = store.list(&SagaFilter::new()).await.expect("list");
    let listed = listed.iter().find(|r| r.saga_id == account);
    assert_eq!(listed, Some(&one), "a listing reads the same history");
    one
}

fn versions_and_ids(history: &[HistoryEntry]) -> Vec<(i64, String, String)> {
    history
        .iter()
        .map(|h| {
            (
                h.version(),
                h.event_type().to_owned(),
                h.message_id().to_owned(),
            )
        })
        .collect()
}

/// Runs the long saga on `pool`: its record.
async fn long_saga<DB: SagaDatabase>(pool: &sqlx::Pool<DB>) -> SagaRecord {
    let store = Store::new(pool.clone()).with_extension(SagaTables);
    store.migrate().await.expect("migrate");
    let mut kinds = vec!["Opened"];
    kinds.resize(TRANSITIONS, "Deposit");
    let (msgs, ids) = messages("a-1", &kinds);
    run(store, msgs).await;
    let record = read(pool, "a-1").await;
    assert_eq!(record.version, TRANSITIONS as i64);
    let expected: Vec<(i64, String, String)> = (TRANSITIONS - 100..TRANSITIONS)
        .map(|i| (i as i64 + 1, kinds[i].to_owned(), ids[i].clone()))
        .collect();
    assert_eq!(
        versions_and_ids(&record.history),
        expected,
        "exactly the last 100 transitions, oldest first"
    );
    record
}

async fn pg_fresh() -> FreshSchema {
    FreshSchema::create("ct", 4)
        .await
        .expect("PostgreSQL at DATABASE_URL (scripts/services postgres)")
}

async fn sqlite_pool() -> sqlx::SqlitePool {
    let dir = std::env::temp_dir().join("consumer-tests");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(format!("{}.db", uuid::Uuid::new_v4()));
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(30));
    sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .expect("a SQLite database file in the temp dir")
}

#[tokio::test]
async fn a_long_saga_keeps_its_last_100_entries_on_postgres() {
    let fresh = pg_fresh().await;
    long_saga(&fresh.pool).await;
    let (rows, empty): (i64, bool) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM consumer_saga_history), \
         (SELECT history = '[]'::jsonb FROM consumer_sagas)",
    )
    .fetch_one(&fresh.pool)
    .await
    .expect("the tables");
    assert_eq!(
        (rows, empty),
        (100, true),
        "100 rows; the saga's row carries none"
    );
    fresh.drop_schema().await.expect("drop the schema");
}

#[tokio::test]
async fn a_long_saga_keeps_its_last_100_entries_on_sqlite() {
    let pool = sqlite_pool().await;
    long_saga(&pool).await;
    let (rows, empty): (i64, bool) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM consumer_saga_history), \
         (SELECT history = '[]' FROM consumer_sagas)",
    )
    .fetch_one(&pool)
    .await
    .expect("the tables");
    assert_eq!(
        (rows, empty),
        (100, true),
        "100 rows; the saga's row carries none"
    );
}

/// A history as the previous version wrote it in the row: three entries,
/// one with a note.
const OLD_HISTORY: &str = r#"[
  {"version":1,"event_type":"Opened","message_id":"m-1","status":"running","at_ms":1700000000001},
  {"version":2,"event_type":"Deposit","message_id":"m-2","status":"running","at_ms":1700000000002,"note":"timed out"},
  {"version":3,"event_type":"operator","message_id":"consumer sagas resume","status":"running","at_ms":1700000000003}
]"#;

/// After the migration: the three entries as they were, then the
/// transition that ran on the migrated saga.
async fn check_migrated<DB: SagaDatabase>(pool: &sqlx::Pool<DB>) {
    let store = Store::new(pool.clone()).with_extension(SagaTables);
    store
        .migrate()
        .await
        .expect("the migration to the history table");
    let before = read(pool, "old").await;
    let old: Vec<serde_json::Value> = serde_json::from_str(OLD_HISTORY).expect("json");
    let as_json: Vec<serde_json::Value> = before
        .history
        .iter()
        .map(|h| serde_json::to_value(h).expect("json"))
        .collect();
    assert_eq!(as_json, old, "the entries moved as they were");
    let (msgs, ids) = messages("old", &["Deposit"]);
    run(store, msgs).await;
    let after = read(pool, "old").await;
    assert_eq!(after.version, 4);
    assert_eq!(after.history[..3], before.history[..]);
    assert_eq!(
        versions_and_ids(&after.history[3..]),
        [(4, "Deposit".to_owned(), ids[0].clone())]
    );
}

#[tokio::test]
async fn the_previous_tables_history_moves_to_its_rows_on_postgres() {
    let fresh = pg_fresh().await;
    let mut v1 = sqlx::migrate!("consumer-saga/migrations/postgres");
    v1.dangerous_set_table_name(consumer::saga::MIGRATIONS_TABLE);
    v1.run_to(1, &fresh.pool)
        .await
        .expect("the first migration");
    sqlx::query(
        "INSERT INTO consumer_sagas (saga_type, saga_id, version, status, state, timeouts, \
         compensation, retries, history) \
         VALUES ('ledger', 'old', 3, 'running', '{\"deposits\":2}', '[]', '[]', '{}', $1::jsonb)",
    )
    .bind(OLD_HISTORY)
    .execute(&fresh.pool)
    .await
    .expect("a saga as the previous version saved it");
    check_migrated(&fresh.pool).await;
    fresh.drop_schema().await.expect("drop the schema");
}

#[tokio::test]
async fn the_previous_tables_history_moves_to_its_rows_on_sqlite() {
    let pool = sqlite_pool().await;
    let mut v1 = sqlx::migrate!("consumer-saga/migrations/sqlite");
    v1.dangerous_set_table_name(consumer::saga::MIGRATIONS_TABLE);
    v1.run_to(1, &pool).await.expect("the first migration");
    sqlx::query(
        "INSERT INTO consumer_sagas (saga_type, saga_id, version, status, state, timeouts, \
         compensation, retries, history, started_at, updated_at) \
         VALUES ('ledger', 'old', 3, 'running', '{\"deposits\":2}', '[]', '[]', '{}', $1, 1, 1)",
    )
    .bind(OLD_HISTORY)
    .execute(&pool)
    .await
    .expect("a saga as the previous version saved it");
    check_migrated(&pool).await;
}
