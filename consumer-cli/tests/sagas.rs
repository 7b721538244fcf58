//! `consumer sagas list | show | resume | abandon` on a real PostgreSQL
//! store (`DATABASE_URL`), with sagas made by a real consumer.

mod support;

use consumer::saga::{SagaStatus, SagaStore};
use support::sagas::make_sagas;
use support::{World, both, stdout};

fn json_lines(out: &std::process::Output) -> Vec<serde_json::Value> {
    stdout(out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sagas_are_listed_shown_resumed_and_abandoned_by_hand() {
    let w = World::new("sagas").await;
    let pool = w.schema.pool.clone();
    make_sagas(&pool).await;

    let all = w.run(&["sagas", "list", "--json"]).await;
    assert_eq!(all.status.code(), Some(0), "{}", both(&all));
    let lines = json_lines(&all);
    assert_eq!(lines.len(), 2, "{}", both(&all));
    let failed = w
        .run(&["sagas", "list", "--status", "compensation_failed"])
        .await;
    assert!(
        stdout(&failed).contains("o-2") && !stdout(&failed).contains("o-1"),
        "{}",
        both(&failed)
    );
    let active = json_lines(&w.run(&["sagas", "list", "--active", "--json"]).await);
    assert_eq!(active.len(), 1);
    assert_eq!(
        (active[0]["saga_id"].as_str(), active[0]["status"].as_str()),
        (Some("o-1"), Some("running"))
    );
    let old = json_lines(
        &w.run(&["sagas", "list", "--older-than", "1h", "--json"])
            .await,
    );
    assert!(old.is_empty(), "nothing started an hour ago");

    let show = w.run(&["sagas", "show", "order", "o-2", "--json"]).await;
    assert_eq!(show.status.code(), Some(0), "{}", both(&show));
    let o2: serde_json::Value = serde_json::from_str(stdout(&show).trim()).expect("json");
    assert_eq!(o2["status"], "compensation_failed");
    assert_eq!(o2["compensation"][0]["status"], "failed");
    assert_eq!(o2["compensation"][0]["error"], "the card was closed");
    assert_eq!(o2["history"].as_array().map(Vec::len), Some(3));
    let text = w.run(&["sagas", "show", "order", "o-1"]).await;
    for part in [
        "pending timeouts: 1",
        "Expire",
        "compensation log: 1 step(s)",
        "RefundPayment",
        "history: 1 transition(s)",
    ] {
        assert!(stdout(&text).contains(part), "{part}: {}", both(&text));
    }
    let missing = w.run(&["sagas", "show", "order", "o-9"]).await;
    assert_eq!(missing.status.code(), Some(6), "{}", both(&missing));

    // A running saga's compensation cannot resume; a failed one's can: its
    // refund goes again, with another id.
    let refused = w.run(&["sagas", "resume", "order", "o-1"]).await;
    assert_eq!(refused.status.code(), Some(7), "{}", both(&refused));
    let resumed = w.run(&["sagas", "resume", "order", "o-2"]).await;
    assert_eq!(resumed.status.code(), Some(0), "{}", both(&resumed));
    assert!(
        stdout(&resumed).contains("compensating"),
        "{}",
        both(&resumed)
    );
    let refunds: Vec<String> = sqlx::query_scalar(
        "SELECT id::text FROM outbox_events WHERE event_type = 'RefundPayment' AND aggregate_id = 'o-2' ORDER BY version",
    )
    .fetch_all(&pool)
    .await
    .expect("refunds");
    assert_eq!(refunds.len(), 2, "the first refund and its resend");
    assert_ne!(refunds[0], refunds[1], "a new round, a new id");

    // Abandoned: its timeout is cancelled, and a second abandon is refused.
    let abandoned = w
        .run(&[
            "sagas",
            "abandon",
            "order",
            "o-1",
            "--reason",
            "the customer called",
        ])
        .await;
    assert_eq!(abandoned.status.code(), Some(0), "{}", both(&abandoned));
    let sagas = SagaStore::new(pool.clone());
    let o1 = sagas.get("order", "o-1").await.expect("read").expect("o-1");
    assert_eq!(o1.status, SagaStatus::Abandoned);
    assert!(o1.timeouts.is_empty());
    let scheduled: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM outbox_events_scheduled WHERE aggregate_id = 'o-1'",
    )
    .fetch_one(&pool)
    .await
    .expect("count");
    assert_eq!(scheduled, 0, "its timeout was cancelled");
    let again = w
        .run(&["sagas", "abandon", "order", "o-1", "--reason", "twice"])
        .await;
    assert_eq!(again.status.code(), Some(7), "{}", both(&again));
    w.close().await;
}
