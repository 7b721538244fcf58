//! Sequenced dead letters (`#[handler(on_dead_letter = hold_key)]`) under
//! the full runtime, on each store: the memory store, SQLite (a file) and
//! PostgreSQL (`DATABASE_URL`; a fresh schema), with the memory broker.
//!
//! A ledger's entry that is dead-lettered holds its account: the account's
//! later entries are parked (acked, not run) while other accounts go on;
//! released while it still fails, the head holds the key again and nothing
//! behind it runs; released once it works, the head runs first and then
//! every parked entry, in order, and the account's next entries run as
//! they come. Skipping the head runs the rest without it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use consumer::stats::StatsSnapshot;
use consumer::store::held::{HeldKey, HeldKeys, HoldStatus, Release};
use consumer::{Consumer, DedupStore, MemoryBroker, MemoryStore, Message, Stats, handler};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    account: String,
    n: u32,
}

#[derive(Debug, thiserror::Error)]
enum LedgerError {
    #[error("entry {0} refused by the ledger")]
    Refused(u32),
}

/// Entries refused while they are here: `(account, n)`.
static REFUSED: Mutex<Option<HashSet<(String, u32)>>> = Mutex::new(None);
/// Entries applied, per account, in order.
static APPLIED: Mutex<Option<HashMap<String, Vec<u32>>>> = Mutex::new(None);

fn refuse(account: &str, n: u32, refused: bool) {
    let mut all = REFUSED.lock().expect("refused");
    let set = all.get_or_insert_with(HashSet::new);
    if refused {
        set.insert((account.to_owned(), n));
    } else {
        set.remove(&(account.to_owned(), n));
    }
}

fn applied(account: &str) -> Vec<u32> {
    APPLIED
        .lock()
        .expect("applied")
        .as_ref()
        .and_then(|m| m.get(account).cloned())
        .unwrap_or_default()
}

#[handler(retry = none, terminal = LedgerError::Refused(_), on_dead_letter = hold_key)]
async fn apply(entry: Entry) -> Result<(), LedgerError> {
    let refused = REFUSED
        .lock()
        .expect("refused")
        .as_ref()
        .is_some_and(|r| r.contains(&(entry.account.clone(), entry.n)));
    if refused {
        return Err(LedgerError::Refused(entry.n));
    }
    APPLIED
        .lock()
        .expect("applied")
        .get_or_insert_with(HashMap::new)
        .entry(entry.account)
        .or_default()
        .push(entry.n);
    Ok(())
}

async fn publish(broker: &MemoryBroker, topic: &str, account: &str, ns: &[u32]) {
    for &n in ns {
        let entry = Entry {
            account: account.to_owned(),
            n,
        };
        let m = Message::json("Entry", &entry)
            .expect("json")
            .with_id(format!("{account}-{n}"))
            .with_key(account);
        broker.publish(topic, m).await.expect("publish");
    }
}

async fn wait(stats: &Stats, what: &str, until: impl Fn(&StatsSnapshot) -> bool) {
    let waited = tokio::time::timeout(Duration::from_secs(60), stats.wait_for(until)).await;
    assert!(
        waited.is_ok(),
        "timed out waiting for {what}: {:?}",
        stats.snapshot()
    );
}

async fn held<S: HeldKeys>(store: &S, account: &str) -> Option<HeldKey> {
    store
        .held_keys(Some("apply"), None, 100)
        .await
        .expect("held keys")
        .into_iter()
        .find(|k| k.key == account)
}

/// A running consumer of `apply` on `topic`.
struct Running {
    stats: Arc<Stats>,
    stop: tokio::sync::oneshot::Sender<()>,
    join: tokio::task::JoinHandle<Result<(), consumer::Error>>,
}

fn start<S: DedupStore>(broker: &MemoryBroker, topic: &str, store: S) -> Running {
    let consumer = Consumer::new(broker.source(topic), store, apply);
    let stats = consumer.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let join = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));
    Running { stats, stop, join }
}

impl Running {
    async fn stop(self) {
        let _ = self.stop.send(());
        self.join
            .await
            .expect("join")
            .expect("consumer ran cleanly");
    }
}

/// The whole story on one store; `tag` keeps its accounts apart from the
/// other tests' (they share the handler's statics).
async fn a_dead_letter_holds_its_key_until_released_then_the_key_runs_in_order<S: DedupStore>(
    store: S,
    tag: &str,
) {
    let account = format!("{tag}-acct");
    let other = format!("{tag}-other");
    let topic = format!("ledger-{tag}");
    let broker = MemoryBroker::new(2);
    refuse(&account, 2, true);
    publish(&broker, &topic, &account, &[1, 2, 3, 4]).await;
    publish(&broker, &topic, &other, &[1, 2]).await;
    let running = start(&broker, &topic, store.clone());
    let stats = running.stats.clone();

    wait(&stats, "entry 2 dead-lettered and 3, 4 parked", |s| {
        s.processed == 3 && s.keys_held == 1 && s.parked == 2 && s.dead_terminal == 1
    })
    .await;
    assert_eq!(applied(&account), [1], "nothing behind the dead letter ran");
    assert_eq!(applied(&other), [1, 2], "other keys go on");
    assert_eq!(broker.dead_letters(&topic).len(), 1, "the head's letter");
    let hold = held(&store, &account).await.expect("the account is held");
    assert_eq!(
        (hold.status, hold.parked, hold.head_message_id.as_str()),
        (HoldStatus::Held, 3, format!("{account}-2").as_str()),
        "the head and the two entries behind it"
    );
    assert!(hold.reason.contains("refused by the ledger"), "{hold:?}");

    // Released while the ledger still refuses it: the head fails again and
    // holds the key again; nothing behind it runs.
    assert_eq!(
        store
            .release_key("apply", &account, false)
            .await
            .expect("release"),
        Release::Released
    );
    wait(&stats, "the head held its key again", |s| s.keys_held == 2).await;
    assert_eq!(applied(&account), [1]);
    let hold = held(&store, &account).await.expect("held again");
    assert_eq!((hold.status, hold.parked), (HoldStatus::Held, 3));

    // Released once it works: the head first, then the parked entries.
    refuse(&account, 2, false);
    store
        .release_key("apply", &account, false)
        .await
        .expect("release");
    wait(&stats, "the key drained", |s| s.keys_drained == 1).await;
    assert_eq!(applied(&account), [1, 2, 3, 4], "in order, each once");
    assert!(held(&store, &account).await.is_none(), "the hold ended");

    // The account's next entries run as they come.
    publish(&broker, &topic, &account, &[5]).await;
    wait(&stats, "entry 5", |s| s.processed == 7).await;
    assert_eq!(applied(&account), [1, 2, 3, 4, 5]);
    assert_eq!(stats.snapshot().parked, 2, "nothing more parked");
    assert_eq!(
        store
            .release_key("apply", &account, false)
            .await
            .expect("release"),
        Release::NotHeld,
        "a key that is not held is said so"
    );
    running.stop().await;
}

async fn skipping_the_head_runs_the_rest_without_it<S: DedupStore>(store: S, tag: &str) {
    let account = format!("{tag}-skip");
    let topic = format!("ledger-skip-{tag}");
    let broker = MemoryBroker::new(1);
    refuse(&account, 1, true);
    publish(&broker, &topic, &account, &[1, 2, 3]).await;
    let running = start(&broker, &topic, store.clone());
    let stats = running.stats.clone();
    wait(&stats, "entry 1 held its key", |s| {
        s.keys_held == 1 && s.parked == 2
    })
    .await;
    assert_eq!(
        store
            .release_key("apply", &account, true)
            .await
            .expect("skip"),
        Release::Released
    );
    wait(&stats, "the key drained", |s| s.keys_drained == 1).await;
    assert_eq!(
        applied(&account),
        [2, 3],
        "the rest, in order, without the head"
    );
    assert_eq!(broker.dead_letters(&topic).len(), 1, "its letter stays");
    running.stop().await;
}

mod memory {
    use super::*;

    #[tokio::test]
    async fn a_dead_letter_holds_its_key_until_released() {
        a_dead_letter_holds_its_key_until_released_then_the_key_runs_in_order(
            MemoryStore::new(),
            "mem",
        )
        .await;
    }

    #[tokio::test]
    async fn skipping_the_head() {
        skipping_the_head_runs_the_rest_without_it(MemoryStore::new(), "mem").await;
    }
}

mod sqlite {
    use super::*;
    use consumer::SqliteStore;

    async fn store() -> SqliteStore {
        let dir = std::env::temp_dir().join("consumer-tests");
        std::fs::create_dir_all(&dir).expect("temp dir");
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(dir.join(format!("held-{}.db", uuid::Uuid::new_v4())))
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(30));
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .expect("a SQLite database file in the temp dir");
        let store = SqliteStore::new(pool);
        store.migrate().await.expect("migrations");
        store
    }

    #[tokio::test]
    async fn a_dead_letter_holds_its_key_until_released() {
        a_dead_letter_holds_its_key_until_released_then_the_key_runs_in_order(
            store().await,
            "lite",
        )
        .await;
    }

    #[tokio::test]
    async fn skipping_the_head() {
        skipping_the_head_runs_the_rest_without_it(store().await, "lite").await;
    }
}

mod postgres {
    use super::*;
    use consumer::PgStore;
    use consumer::testing::FreshSchema;

    async fn store() -> PgStore {
        let schema = FreshSchema::create("ct_held", 8)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        PgStore::new(schema.pool)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dead_letter_holds_its_key_until_released() {
        a_dead_letter_holds_its_key_until_released_then_the_key_runs_in_order(store().await, "pg")
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn skipping_the_head() {
        skipping_the_head_runs_the_rest_without_it(store().await, "pg").await;
    }
}
