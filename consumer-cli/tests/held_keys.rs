//! `consumer held-keys list | release | skip` on a real PostgreSQL store
//! (`DATABASE_URL`) and RabbitMQ queue (`AMQP_URL`), with a consumer of a
//! handler that holds keys (`on_dead_letter = hold_key`): the dead letter
//! holds its account, the account's later entries are parked while another
//! account goes on, the tool lists the key, and once released the entries
//! are applied in order, each once.

mod support;

use std::time::Duration;

use consumer::amqp::AmqpPublisher;
use consumer::envelope::names;
use consumer::{Consumer, Headers, Message, PgStore, PgTx, handler};
use serde::{Deserialize, Serialize};
use support::{World, amqp_url, both, stdout};

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    account: String,
    n: i32,
}

#[derive(Debug, thiserror::Error)]
enum LedgerError {
    #[error("entry {0} of {1} refused")]
    Refused(i32, String),
    #[error("database error")]
    Db(#[from] sqlx::Error),
}

/// Refuses (terminal) an entry listed in `refused`, else appends it to
/// `ledger` (a serial id keeps the order it was applied in).
#[handler(retry = none, terminal = LedgerError::Refused(..), on_dead_letter = hold_key)]
async fn apply_entry(entry: Entry, tx: &mut PgTx) -> Result<(), LedgerError> {
    let refused: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM refused WHERE account = $1 AND n = $2)")
            .bind(&entry.account)
            .bind(entry.n)
            .fetch_one(&mut **tx)
            .await?;
    if refused {
        return Err(LedgerError::Refused(entry.n, entry.account));
    }
    sqlx::query("INSERT INTO ledger (account, n) VALUES ($1, $2)")
        .bind(&entry.account)
        .bind(entry.n)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

async fn publish(w: &World, publisher: &AmqpPublisher, account: &str, ns: &[i32]) {
    for &n in ns {
        let mut headers = Headers::new();
        headers.insert(names::ID, format!("{account}-{n}"));
        let message = Message {
            key: Some(account.to_owned()),
            headers,
            payload: serde_json::to_vec(&Entry {
                account: account.to_owned(),
                n,
            })
            .expect("json")
            .into(),
        };
        publisher
            .publish_to("", w.queue(), &message, None)
            .await
            .expect("publish an entry");
    }
}

async fn applied(w: &World, account: &str) -> Vec<i32> {
    sqlx::query_scalar("SELECT n FROM ledger WHERE account = $1 ORDER BY id")
        .bind(account)
        .fetch_all(&w.schema.pool)
        .await
        .expect("ledger")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_key_is_listed_released_by_the_tool_and_drained_in_order() {
    let w = World::new("held").await;
    sqlx::raw_sql(
        "CREATE TABLE ledger (id BIGSERIAL PRIMARY KEY, account TEXT NOT NULL, n INTEGER NOT NULL); \
         CREATE TABLE refused (account TEXT NOT NULL, n INTEGER NOT NULL); \
         INSERT INTO refused VALUES ('acct-7', 2)",
    )
    .execute(&w.schema.pool)
    .await
    .expect("ledger tables");
    let consumer = Consumer::new(
        w.source().await,
        PgStore::new(w.schema.pool.clone()),
        apply_entry,
    );
    let stats = consumer.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));
    let publisher = AmqpPublisher::builder(amqp_url()).build();
    publish(&w, &publisher, "acct-7", &[1, 2, 3, 4]).await;
    publish(&w, &publisher, "acct-8", &[1, 2]).await;

    let held = tokio::time::timeout(
        Duration::from_secs(60),
        stats.wait_for(|s| s.processed == 3 && s.parked == 2 && s.keys_held == 1),
    )
    .await;
    assert!(held.is_ok(), "entry 2 held acct-7: {:?}", stats.snapshot());
    assert_eq!(applied(&w, "acct-7").await, [1]);
    assert_eq!(applied(&w, "acct-8").await, [1, 2], "other keys go on");
    w.wait_depth(w.dlq(), 1).await;

    let list = w.run(&["held-keys", "list", "--json"]).await;
    assert_eq!(list.status.code(), Some(0), "{}", both(&list));
    let keys: Vec<serde_json::Value> = stdout(&list)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(keys.len(), 1, "{}", both(&list));
    assert_eq!(keys[0]["handler"], "apply_entry");
    assert_eq!(keys[0]["key"], "acct-7");
    assert_eq!(keys[0]["status"], "held");
    assert_eq!(keys[0]["parked"], 3, "the head and two entries behind it");
    assert_eq!(keys[0]["head_message_id"], "acct-7-2");
    let table = w.run(&["held-keys", "list"]).await;
    assert!(stdout(&table).contains("acct-7"), "{}", both(&table));

    sqlx::query("DELETE FROM refused")
        .execute(&w.schema.pool)
        .await
        .expect("fix the cause");
    let release = w
        .run(&["held-keys", "release", "apply_entry", "acct-7"])
        .await;
    assert_eq!(release.status.code(), Some(0), "{}", both(&release));
    let drained = tokio::time::timeout(
        Duration::from_secs(60),
        stats.wait_for(|s| s.keys_drained == 1),
    )
    .await;
    assert!(drained.is_ok(), "acct-7 drained: {:?}", stats.snapshot());
    assert_eq!(
        applied(&w, "acct-7").await,
        [1, 2, 3, 4],
        "in order, each once"
    );

    let again = w
        .run(&["held-keys", "release", "apply_entry", "acct-7"])
        .await;
    assert_eq!(again.status.code(), Some(7), "not held: {}", both(&again));
    let empty = w.run(&["held-keys", "list", "--json"]).await;
    assert_eq!(stdout(&empty).trim(), "", "{}", both(&empty));

    let _ = stop.send(());
    running
        .await
        .expect("consumer task")
        .expect("consumer ran cleanly");
}
