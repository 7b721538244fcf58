//! `consumer jobs` through the real binary on a real PostgreSQL
//! (`DATABASE_URL`, default postgres://postgres@127.0.0.1:5432/test;
//! `scripts/services postgres` starts it): the job queue's jobs listed by
//! queue and state, one shown, a scheduled one made due now, one
//! cancelled, and a queue paused (a worker gets none of its jobs) then
//! resumed (the worker takes them).

use std::process::Output;
use std::time::Duration;

use consumer::Message;
use consumer::jobs::{Job, Jobs};
use consumer::source::{Acker, Source};
use consumer::testing::{FreshSchema, database_url};

/// A fresh schema with the job queue's table.
async fn schema() -> FreshSchema {
    let schema = FreshSchema::create("ct_jobs", 4)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    consumer::jobs::migrate(&schema.pool)
        .await
        .unwrap_or_else(|e| panic!("migrating consumer_jobs: {e}"));
    schema
}

async fn run(schema: &FreshSchema, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_consumer"))
        .env("DATABASE_URL", database_url())
        .env("CONSUMER_SCHEMA", &schema.schema)
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .unwrap_or_else(|e| panic!("the consumer binary runs: {e}"))
}

fn both(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `args`, which must succeed; its standard output.
async fn ok(schema: &FreshSchema, args: &[&str]) -> String {
    let o = run(schema, args).await;
    assert!(o.status.success(), "consumer {args:?}: {}", both(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The JSON lines of `consumer jobs list` with `filters`: `(queue, id,
/// state)`.
async fn listed(schema: &FreshSchema, filters: &[&str]) -> Vec<(String, String, String)> {
    let mut args = vec!["jobs", "list", "--json"];
    args.extend_from_slice(filters);
    ok(schema, &args)
        .await
        .lines()
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
            (s("queue"), s("id"), s("state"))
        })
        .collect()
}

fn job(n: u32) -> Message {
    Message::json("Send", &serde_json::json!({ "n": n }))
        .unwrap_or_else(|e| panic!("{e}"))
        .with_id(format!("job-{n}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_listed_shown_retried_and_cancelled_through_the_tool() {
    let schema = schema().await;
    let pool = &schema.pool;
    let (mail, bills) = (Jobs::new("mail"), Jobs::new("bills"));
    let later = Job::new(job(1)).with_due(Duration::from_secs(3600));
    for (jobs, job) in [
        (&mail, later),
        (&mail, job(2).into()),
        (&bills, job(3).into()),
    ] {
        jobs.enqueue_now(pool, job)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    let s = |q: &str, id: &str, st: &str| (q.to_owned(), id.to_owned(), st.to_owned());
    assert_eq!(listed(&schema, &[]).await.len(), 3);
    assert_eq!(
        listed(&schema, &["--queue", "mail"]).await,
        [s("mail", "job-1", "scheduled"), s("mail", "job-2", "ready")]
    );
    assert_eq!(
        listed(&schema, &["--state", "ready"]).await,
        [s("mail", "job-2", "ready"), s("bills", "job-3", "ready")]
    );
    let table = ok(&schema, &["jobs", "list", "--queue", "bills"]).await;
    assert!(
        table.contains("QUEUE") && table.contains("job-3"),
        "{table}"
    );

    let shown = ok(&schema, &["jobs", "show", "job-1"]).await;
    assert!(shown.contains("state:      scheduled"), "{shown}");
    assert!(shown.contains(r#"{"n":1}"#), "the body: {shown}");
    let shown = ok(&schema, &["jobs", "show", "job-1", "--json"]).await;
    let v: serde_json::Value = serde_json::from_str(shown.trim()).unwrap_or_else(|e| panic!("{e}"));
    let headers = v["headers"].as_array().cloned().unwrap_or_default();
    let ce_id = headers.iter().find(|h| h["name"] == "ce_id");
    assert_eq!(
        ce_id.map(|h| &h["value"]),
        Some(&serde_json::json!("job-1")),
        "{v}"
    );
    assert!(
        ok(&schema, &["jobs", "show", "job-1"])
            .await
            .contains("    ce_id: job-1")
    );

    ok(&schema, &["jobs", "retry", "mail", "job-1"]).await;
    assert_eq!(
        listed(&schema, &["--queue", "mail", "--state", "ready"])
            .await
            .len(),
        2,
        "the scheduled job is due now"
    );
    let again = run(&schema, &["jobs", "retry", "mail", "job-1"]).await;
    assert_eq!(
        again.status.code(),
        Some(6),
        "due already: {}",
        both(&again)
    );

    ok(&schema, &["jobs", "cancel", "mail", "job-2"]).await;
    assert_eq!(
        listed(&schema, &["--queue", "mail"]).await,
        [s("mail", "job-1", "ready")]
    );
    let gone = run(&schema, &["jobs", "show", "job-2"]).await;
    assert_eq!(gone.status.code(), Some(6), "{}", both(&gone));
    let _ = schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_paused_through_the_tool_is_not_claimed_until_resumed() {
    let schema = schema().await;
    let pool = &schema.pool;
    let jobs = Jobs::new("reports");
    ok(
        &schema,
        &[
            "jobs",
            "pause",
            "reports",
            "--reason",
            "migration",
            "--by",
            "ops",
        ],
    )
    .await;
    let paused = ok(&schema, &["jobs", "paused", "--json"]).await;
    let v: serde_json::Value =
        serde_json::from_str(paused.trim()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (v["queue"].as_str(), v["by"].as_str(), v["reason"].as_str()),
        (Some("reports"), Some("ops"), Some("migration"))
    );
    jobs.enqueue_now(pool, job(1))
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // A worker polling the paused queue many times over gets nothing.
    let mut worker = jobs
        .source(pool.clone())
        .with_poll_interval(Duration::from_millis(20));
    let none = tokio::time::timeout(Duration::from_millis(300), worker.recv()).await;
    assert!(none.is_err(), "a paused queue's job was claimed");

    ok(&schema, &["jobs", "resume", "reports"]).await;
    let taken = tokio::time::timeout(Duration::from_secs(20), worker.recv())
        .await
        .unwrap_or_else(|_| panic!("the resumed queue's job was not taken within 20 s"))
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("the source closed"));
    assert_eq!(taken.0.id, "job-1");
    taken.1.ack().await.unwrap_or_else(|e| panic!("{e}"));
    worker.close().await;
    let not_paused = run(&schema, &["jobs", "resume", "reports"]).await;
    assert_eq!(not_paused.status.code(), Some(7), "{}", both(&not_paused));
    let _ = schema.drop_schema().await;
}
