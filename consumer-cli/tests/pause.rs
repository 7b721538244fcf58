//! Pause and resume on a real PostgreSQL store (`DATABASE_URL`) and
//! RabbitMQ queue (`AMQP_URL`). Through the tool (`consumer pause | paused
//! | resume`): a running consumer stops running its handler's deliveries
//! once the tool pauses it, a consumer process started while it is
//! paused starts paused (the pause is in the store), and once resumed every entry is
//! applied once, in order, without an attempt spent while paused. Through
//! a service's admin endpoint: refused without its token, a pause and a
//! resume with it, and `/readyz` naming the paused handler.

mod support;

use std::sync::Arc;
use std::time::Duration;

use std::process::Stdio;

use consumer::amqp::{AmqpPublisher, AmqpSource, Topology};
use consumer::envelope::names;
use consumer::secret::Secret;
use consumer::stats::{Stats, StatsSnapshot};
use consumer::testing::{FreshSchema, database_url};
use consumer::{Consumer, Headers, Message, PgStore, PgTx, Service, handler};
use serde::{Deserialize, Serialize};
use support::{World, amqp_url, both, stdout};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    n: i32,
}

/// Appends the entry to `ledger` (a serial id keeps the order it was
/// applied in).
#[handler(retry = none)]
async fn post_entry(entry: Entry, tx: &mut PgTx) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO ledger (n) VALUES ($1)")
        .bind(entry.n)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Entries of one account (one key: one lane, in order).
async fn publish(w: &World, publisher: &AmqpPublisher, ns: std::ops::RangeInclusive<i32>) {
    for n in ns {
        let mut headers = Headers::new();
        headers.insert(names::ID, format!("entry-{n}"));
        let message = Message {
            key: Some("acct-1".to_owned()),
            headers,
            payload: serde_json::to_vec(&Entry { n }).expect("json").into(),
        };
        publisher
            .publish_to("", w.queue(), &message, None)
            .await
            .expect("publish an entry");
    }
}

/// A fresh schema and queue, with the ledger table.
async fn ledger_world(tag: &str) -> World {
    let w = World::new(tag).await;
    sqlx::raw_sql("CREATE TABLE ledger (id BIGSERIAL PRIMARY KEY, n INTEGER NOT NULL)")
        .execute(&w.schema.pool)
        .await
        .expect("ledger table");
    w
}

async fn applied(w: &World) -> Vec<i32> {
    sqlx::query_scalar("SELECT n FROM ledger ORDER BY id")
        .fetch_all(&w.schema.pool)
        .await
        .expect("ledger")
}

/// A running consumer of `post_entry`.
struct Running {
    stats: Arc<Stats>,
    stop: tokio::sync::oneshot::Sender<()>,
    join: tokio::task::JoinHandle<Result<(), consumer::Error>>,
}

async fn start(w: &World) -> Running {
    let store = PgStore::new(w.schema.pool.clone());
    let consumer = Consumer::new(w.source().await, store, post_entry);
    let stats = consumer.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let join = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));
    Running { stats, stop, join }
}

impl Running {
    async fn until(&self, what: &str, condition: impl Fn(&StatsSnapshot) -> bool) {
        let reached = tokio::time::timeout(Duration::from_secs(60), self.stats.wait_for(condition));
        assert!(reached.await.is_ok(), "{what}: {:?}", self.stats.snapshot());
    }

    async fn stop(self) -> StatsSnapshot {
        let _ = self.stop.send(());
        self.join
            .await
            .expect("consumer task")
            .expect("consumer ran cleanly");
        self.stats.snapshot()
    }
}

/// Failed attempts the store recorded.
async fn failed_attempts(w: &World) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM consumer_attempts")
        .fetch_one(&w.schema.pool)
        .await
        .expect("attempts")
}

/// `consumer paused`, as JSON lines and as a table, lists the one pause.
async fn listed(w: &World) {
    let list = w.run(&["paused", "--json"]).await;
    assert_eq!(list.status.code(), Some(0), "{}", both(&list));
    let pauses: Vec<serde_json::Value> = stdout(&list)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(pauses.len(), 1, "{}", both(&list));
    assert_eq!(pauses[0]["handler"], "post_entry");
    assert_eq!(pauses[0]["by"], "ana");
    assert_eq!(pauses[0]["reason"], "ledger migration");
    let table = w.run(&["paused"]).await;
    assert!(
        stdout(&table).contains("ledger migration"),
        "{}",
        both(&table)
    );
}

const SCHEMA_ENV: &str = "PAUSE_CHILD_SCHEMA";
const QUEUE_ENV: &str = "PAUSE_CHILD_QUEUE";

/// The restarted consumer, a process of its own (this test binary run
/// again). Says on its standard output what its stats say once it runs
/// (`started ...`) and once it applied three entries (`processed ...`);
/// runs until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "entry point of the consumer process of a_handler_paused_by_the_tool_stays_paused_across_a_restart_and_resumes_in_order"]
async fn child_consumer() {
    let (Ok(schema), Ok(queue)) = (std::env::var(SCHEMA_ENV), std::env::var(QUEUE_ENV)) else {
        return;
    };
    let pool = FreshSchema::pool_on(&schema, 4).await.unwrap_or_else(|e| {
        panic!(
            "PostgreSQL is not reachable at {} ({e}): start it or set DATABASE_URL",
            database_url()
        )
    });
    let topology = Topology::new(queue)
        .expect("queue name")
        .with_max_retry_delay(Duration::from_secs(1))
        .with_expires(Duration::from_secs(600));
    let source = AmqpSource::builder(amqp_url(), topology)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("RabbitMQ is not reachable ({e}): start it or set AMQP_URL"));
    let consumer = Consumer::new(source, PgStore::new(pool), post_entry);
    let stats = consumer.stats();
    let running = tokio::spawn(consumer.run_until(std::future::pending()));
    let s = stats.wait_for(|s| s.running).await;
    println!(
        "started paused={} received={}",
        s.handlers_paused, s.received
    );
    let s = stats.wait_for(|s| s.processed >= 3).await;
    let dead = s.dead_letters();
    println!(
        "processed={} paused={} retries={} dead={dead}",
        s.processed, s.handlers_paused, s.retries
    );
    let _ = running.await;
}

/// A consumer process (see [`child_consumer`]) and its standard output.
struct Child {
    process: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Child {
    /// Starts one on `w`'s schema and queue.
    fn spawn(w: &World) -> Self {
        let exe = std::env::current_exe().expect("test binary");
        let mut process = tokio::process::Command::new(exe)
            .args([
                "--ignored",
                "--exact",
                "child_consumer",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(SCHEMA_ENV, &w.schema.schema)
            .env(QUEUE_ENV, w.queue())
            .env("DATABASE_URL", database_url())
            .env("AMQP_URL", amqp_url())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn a consumer process");
        let stdout = process.stdout.take().expect("its standard output");
        Self {
            process,
            lines: BufReader::new(stdout).lines(),
        }
    }

    /// Its next line that says `what`, from there on.
    async fn says(&mut self, what: &str) -> String {
        let line = async {
            while let Some(line) = self.lines.next_line().await.expect("read its output") {
                // libtest's "test child_consumer ... " may lead the line.
                if let Some(at) = line.find(what) {
                    return line[at..].to_owned();
                }
            }
            panic!("the consumer process ended before saying {what:?}");
        };
        tokio::time::timeout(Duration::from_secs(60), line)
            .await
            .unwrap_or_else(|_| panic!("the consumer process said no {what:?} within 60 s"))
    }

    async fn kill(mut self) {
        let _ = self.process.kill().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_paused_by_the_tool_stays_paused_across_a_restart_and_resumes_in_order() {
    let w = ledger_world("pause").await;
    let publisher = AmqpPublisher::builder(amqp_url()).build();
    let first = start(&w).await;
    publish(&w, &publisher, 1..=1).await;
    first.until("entry 1 applied", |s| s.processed == 1).await;

    let pause = w
        .run(&[
            "pause",
            "post_entry",
            "--reason",
            "ledger migration",
            "--by",
            "ana",
        ])
        .await;
    assert_eq!(pause.status.code(), Some(0), "{}", both(&pause));
    first
        .until("the running consumer saw the pause", |s| {
            s.handlers_paused == 1
        })
        .await;
    assert_eq!(first.stats.paused_handlers(), ["post_entry"]);
    publish(&w, &publisher, 2..=4).await;
    let again = w.run(&["pause", "post_entry"]).await;
    assert_eq!(again.status.code(), Some(0), "{}", both(&again));
    assert!(
        stdout(&again).contains("paused already"),
        "{}",
        both(&again)
    );

    // Stopped, the consumer can run nothing more: what it ran while paused
    // is all it ever ran.
    let stopped = first.stop().await;
    assert_eq!(
        stopped.processed, 1,
        "nothing ran while paused: {stopped:?}"
    );
    assert_eq!(applied(&w).await, [1]);

    listed(&w).await;

    // Restarted, as a process of its own: paused from its first reading,
    // before it takes anything.
    let mut second = Child::spawn(&w);
    let started = second.says("started").await;
    assert_eq!(
        started, "started paused=1 received=0",
        "a paused consumer takes nothing"
    );
    let resume = w.run(&["resume", "post_entry"]).await;
    assert_eq!(resume.status.code(), Some(0), "{}", both(&resume));
    let done = second.says("processed").await;
    assert_eq!(
        done, "processed=3 paused=0 retries=0 dead=0",
        "entries 2 to 4, once resumed"
    );
    assert_eq!(applied(&w).await, [1, 2, 3, 4], "each once, in order");
    assert_eq!(
        failed_attempts(&w).await,
        0,
        "no attempt failed or was spent while paused"
    );
    second.kill().await;

    let not_paused = w.run(&["resume", "post_entry"]).await;
    assert_eq!(not_paused.status.code(), Some(7), "{}", both(&not_paused));
    publisher.close().await;
    w.close().await;
}

/// Sends `method path` to the endpoint at `addr` with `token` as its
/// bearer token; the whole answer, status line first.
async fn request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("the service's endpoint takes connections");
    let auth = token.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
    let head = format!("{method} {path} HTTP/1.1\r\nhost: test\r\n{auth}\r\n");
    stream.write_all(head.as_bytes()).await.expect("write");
    let mut out = String::new();
    stream.read_to_string(&mut out).await.expect("read");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_endpoint_needs_its_token_pauses_and_resumes_and_readyz_names_the_pause() {
    let w = ledger_world("pause-admin").await;
    let store = PgStore::new(w.schema.pool.clone());
    let consumer = Consumer::new(w.source().await, store.clone(), post_entry);
    let stats = consumer.stats();
    const TOKEN: &str = "admin-token-of-this-test";
    let service = Service::new("ledger")
        .consumer("ledger", consumer)
        .with_health_endpoint("127.0.0.1:0".parse().expect("address"))
        .expect("health endpoint")
        .with_admin(Secret::new(TOKEN), store);
    let addr = service.health_endpoint().expect("bound");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(service.run_until(async move {
        let _ = stopped.await;
    }));
    let until = |what: &'static str, condition: fn(&StatsSnapshot) -> bool| {
        let stats = Arc::clone(&stats);
        async move {
            let reached = tokio::time::timeout(Duration::from_secs(60), stats.wait_for(condition));
            assert!(reached.await.is_ok(), "{what}: {:?}", stats.snapshot());
        }
    };
    until("running", |s| s.running).await;

    let pause = "/admin/pause/post_entry?reason=ledger+migration&by=bo";
    let refused = request(addr, "POST", pause, None).await;
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    let wrong = request(addr, "POST", pause, Some("admin-token-of-another")).await;
    assert!(wrong.starts_with("HTTP/1.1 401"), "{wrong}");
    let list = request(addr, "GET", "/admin/paused", None).await;
    assert!(list.starts_with("HTTP/1.1 401"), "{list}");
    until("nothing paused without the token", |s| {
        s.handlers_paused == 0
    })
    .await;

    let paused = request(addr, "POST", pause, Some(TOKEN)).await;
    assert!(paused.starts_with("HTTP/1.1 200"), "{paused}");
    until("the consumer saw the pause", |s| s.handlers_paused == 1).await;
    let ready = request(addr, "GET", "/readyz", None).await;
    assert!(
        ready.starts_with("HTTP/1.1 200"),
        "a paused part is still ready: {ready}"
    );
    assert!(ready.contains("(paused: post_entry)"), "{ready}");
    let list = request(addr, "GET", "/admin/paused", Some(TOKEN)).await;
    assert!(list.contains("post_entry since"), "{list}");
    assert!(list.contains("by bo: ledger migration"), "{list}");

    let resumed = request(addr, "POST", "/admin/resume/post_entry", Some(TOKEN)).await;
    assert!(resumed.starts_with("HTTP/1.1 200"), "{resumed}");
    until("the consumer saw the resume", |s| s.handlers_paused == 0).await;
    let ready = request(addr, "GET", "/readyz", None).await;
    assert!(!ready.contains("paused"), "{ready}");
    let again = request(addr, "POST", "/admin/resume/post_entry", Some(TOKEN)).await;
    assert!(again.starts_with("HTTP/1.1 404"), "{again}");

    let _ = stop.send(());
    running
        .await
        .expect("service task")
        .expect("service ran cleanly");
    w.close().await;
}
