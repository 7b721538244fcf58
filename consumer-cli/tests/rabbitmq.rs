//! The `consumer` binary on a real RabbitMQ dead-letter queue (`AMQP_URL`)
//! and PostgreSQL store (`DATABASE_URL`): inspection, export and import,
//! dry runs, canaries, and a replay killed halfway.

mod support;

use support::{World, both, stdout};

/// Exit codes the binary documents.
const CANARY_FAILED: i32 = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_against_a_still_failing_handler_sends_exactly_n_and_exits_non_zero() {
    let w = World::new("canary-fail").await;
    let ids = ["a", "b", "c", "d", "e"];
    w.dead_letters(&ids).await;
    let running = w.start_consumer().await;

    let out = w
        .run(&[
            "dead-letters",
            "replay",
            "--queue",
            w.dlq(),
            "--canary",
            "2",
        ])
        .await;
    assert_eq!(out.status.code(), Some(CANARY_FAILED), "{}", both(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("dead-lettered again"),
        "{}",
        both(&out)
    );
    // Exactly two were sent, and only they failed again: three letters
    // untouched plus the two new ones.
    assert_eq!(w.journal_rows().await, 2);
    w.wait_depth(w.dlq(), 5).await;
    let snapshot = running.stats.snapshot();
    assert_eq!(snapshot.dead_terminal, 2, "two canaries came back dead");
    assert!(w.bookings().await.is_empty());
    // The canaries' new letters: same message ids, attempts counted from
    // one again, and a header naming the letter each replayed.
    let sent: Vec<(String, String)> = sqlx::query_as(
        "SELECT letter_id, message_id FROM consumer_replay_journal ORDER BY message_id",
    )
    .fetch_all(&w.schema.pool)
    .await
    .expect("journal");
    let list = w
        .run(&["dead-letters", "list", "--queue", w.dlq(), "--json"])
        .await;
    for (letter_id, message_id) in &sent {
        let again: Vec<serde_json::Value> = stdout(&list)
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .filter(|v: &serde_json::Value| {
                v["message_id"] == message_id.as_str() && v["id"] != letter_id.as_str()
            })
            .collect();
        assert_eq!(
            again.len(),
            1,
            "{message_id} came back once: {}",
            both(&list)
        );
        assert_eq!(again[0]["attempts"], 1);
        assert_eq!(
            again[0]["key"].as_str(),
            message_id.strip_prefix("m-"),
            "the original key"
        );
        let headers = again[0]["headers"].as_array().expect("headers");
        assert!(
            headers
                .iter()
                .any(|h| h["name"] == "x-replay-of" && h["value"] == letter_id.as_str()),
            "{headers:?}"
        );
    }
    running.stop().await;
    w.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_handler_processes_every_letter_once_and_a_rerun_sends_nothing() {
    let w = World::new("fixed").await;
    let ids = ["a", "b", "c", "d"];
    w.dead_letters(&ids).await;
    w.set_broken(&ids, false).await;
    let running = w.start_consumer().await;

    let out = w
        .run(&[
            "dead-letters",
            "replay",
            "--queue",
            w.dlq(),
            "--canary",
            "1",
        ])
        .await;
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    assert!(stdout(&out).contains("replayed 4"), "{}", both(&out));
    support::eventually("four bookings", || async { w.bookings().await.len() == 4 }).await;
    assert_eq!(w.bookings().await, ["a", "b", "c", "d"]);
    assert_eq!(w.depth(w.dlq()).await, 0);

    // A second run finds nothing to send.
    let again = w.run(&["dead-letters", "replay", "--queue", w.dlq()]).await;
    assert_eq!(again.status.code(), Some(0), "{}", both(&again));
    assert!(stdout(&again).contains("replayed 0"), "{}", both(&again));
    running.stop().await;
    assert_eq!(w.bookings().await, ["a", "b", "c", "d"]);
    w.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_letter_whose_message_was_processed_is_reported_and_not_sent() {
    let w = World::new("processed").await;
    w.dead_letters(&["a", "b"]).await;
    // `a` got processed some other way (the producer sent it again, fixed).
    sqlx::query(
        "INSERT INTO consumer_processed (handler, key, message_id) VALUES ('book', 'a', 'm-a')",
    )
    .execute(&w.schema.pool)
    .await
    .expect("dedup row");
    w.set_broken(&["a", "b"], false).await;
    let running = w.start_consumer().await;
    let out = w
        .run(&["dead-letters", "replay", "--queue", w.dlq(), "--json"])
        .await;
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let lines: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    let outcome = |m: &str| {
        lines
            .iter()
            .find(|l| l["message_id"] == m)
            .map(|l| l["outcome"].as_str().unwrap_or_default().to_owned())
    };
    assert_eq!(outcome("m-a").as_deref(), Some("already_processed"));
    assert_eq!(outcome("m-b").as_deref(), Some("sent"));
    support::eventually("b booked", || async { w.bookings().await == ["b"] }).await;
    running.stop().await;
    assert_eq!(w.bookings().await, ["b"], "a was never run again");
    w.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_then_import_is_byte_identical() {
    let w = World::new("export").await;
    w.dead_letters(&["a", "b", "c"]).await;
    let first = w.run(&["dead-letters", "export", "--queue", w.dlq()]).await;
    assert_eq!(first.status.code(), Some(0), "{}", both(&first));
    assert_eq!(stdout(&first).lines().count(), 3);

    let purge = w
        .run(&["dead-letters", "purge", "--queue", w.dlq(), "--yes"])
        .await;
    assert_eq!(purge.status.code(), Some(0), "{}", both(&purge));
    assert_eq!(w.depth(w.dlq()).await, 0);

    let file = std::env::temp_dir().join(format!("cli-export-{}.jsonl", uuid::Uuid::new_v4()));
    std::fs::write(&file, &first.stdout).expect("write export");
    let path = file.to_string_lossy().into_owned();
    let import = w
        .run(&[
            "dead-letters",
            "import",
            "--queue",
            w.dlq(),
            "--input",
            &path,
        ])
        .await;
    assert_eq!(import.status.code(), Some(0), "{}", both(&import));
    let second = w.run(&["dead-letters", "export", "--queue", w.dlq()]).await;
    assert_eq!(
        stdout(&first),
        stdout(&second),
        "the DLQ round trip changed bytes"
    );

    // And into the dead-letter table and out again.
    let into_table = w.run(&["dead-letters", "import", "--input", &path]).await;
    assert_eq!(into_table.status.code(), Some(0), "{}", both(&into_table));
    let from_table = w.run(&["dead-letters", "export"]).await;
    assert_eq!(from_table.status.code(), Some(0), "{}", both(&from_table));
    let _ = std::fs::remove_file(&file);
    // The table keeps milliseconds: compare what it exports with a second
    // round through it.
    let table_file = std::env::temp_dir().join(format!("cli-table-{}.jsonl", uuid::Uuid::new_v4()));
    std::fs::write(&table_file, &from_table.stdout).expect("write table export");
    let table_path = table_file.to_string_lossy().into_owned();
    let purge = w.run(&["dead-letters", "purge", "--yes"]).await;
    assert_eq!(purge.status.code(), Some(0), "{}", both(&purge));
    let back = w
        .run(&["dead-letters", "import", "--input", &table_path])
        .await;
    assert_eq!(back.status.code(), Some(0), "{}", both(&back));
    let again = w.run(&["dead-letters", "export"]).await;
    assert_eq!(
        stdout(&from_table),
        stdout(&again),
        "the table round trip changed bytes"
    );
    let _ = std::fs::remove_file(&table_file);
    w.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_and_inspection_change_nothing_on_the_broker() {
    let w = World::new("dry").await;
    w.dead_letters(&["a", "b", "c", "d"]).await;
    let before = w
        .run(&["dead-letters", "list", "--queue", w.dlq(), "--json"])
        .await;
    assert_eq!(before.status.code(), Some(0), "{}", both(&before));
    assert_eq!(stdout(&before).lines().count(), 4);

    let dry = w
        .run(&["dead-letters", "replay", "--queue", w.dlq(), "--dry-run"])
        .await;
    assert_eq!(dry.status.code(), Some(0), "{}", both(&dry));
    assert!(stdout(&dry).contains("4 would be sent"), "{}", both(&dry));
    let id = stdout(&before)
        .lines()
        .next()
        .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .and_then(|v| v["id"].as_str().map(str::to_owned))
        .expect("an id");
    let show = w
        .run(&["dead-letters", "show", &id, "--queue", w.dlq()])
        .await;
    assert_eq!(show.status.code(), Some(0), "{}", both(&show));
    assert!(
        stdout(&show).contains("\n  {\n    \"id\": \""),
        "the payload pretty-printed: {}",
        both(&show)
    );

    // Same letters, same order, nothing sent, no journal written.
    let after = w
        .run(&["dead-letters", "list", "--queue", w.dlq(), "--json"])
        .await;
    assert_eq!(stdout(&before), stdout(&after));
    assert_eq!(
        w.depth(w.queue()).await,
        0,
        "nothing reached the work queue"
    );
    assert_eq!(w.journal_rows().await, 0);

    // Filters select without taking anything.
    let count = |o: &std::process::Output| stdout(o).lines().count();
    let by_error = w
        .run(&[
            "dead-letters",
            "list",
            "--queue",
            w.dlq(),
            "--json",
            "--error",
            "booking b ",
        ])
        .await;
    assert_eq!(count(&by_error), 1, "{}", both(&by_error));
    let by_kind = w
        .run(&[
            "dead-letters",
            "list",
            "--queue",
            w.dlq(),
            "--json",
            "--kind",
            "poison",
        ])
        .await;
    assert_eq!(count(&by_kind), 0, "{}", both(&by_kind));
    let future = w
        .run(&[
            "dead-letters",
            "list",
            "--queue",
            w.dlq(),
            "--json",
            "--since",
            "2999-01-01T00:00:00Z",
        ])
        .await;
    assert_eq!(count(&future), 0, "{}", both(&future));
    let recent = w
        .run(&[
            "dead-letters",
            "list",
            "--queue",
            w.dlq(),
            "--json",
            "--since",
            "1h",
            "--handler",
            "book",
        ])
        .await;
    assert_eq!(count(&recent), 4, "{}", both(&recent));
    let bad = w
        .run(&[
            "dead-letters",
            "list",
            "--queue",
            w.dlq(),
            "--since",
            "yesterday",
        ])
        .await;
    assert_eq!(bad.status.code(), Some(2), "{}", both(&bad));
    let after_filters = w
        .run(&["dead-letters", "list", "--queue", w.dlq(), "--json"])
        .await;
    assert_eq!(stdout(&before), stdout(&after_filters));

    let missing = w
        .run(&["dead-letters", "show", "000000000000", "--queue", w.dlq()])
        .await;
    assert_eq!(missing.status.code(), Some(6), "{}", both(&missing));
    w.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn letters_arriving_during_a_replay_are_not_replayed() {
    let w = World::new("arrivals").await;
    w.dead_letters(&["a", "b", "c"]).await;
    // Take `c` out, to put it back while the replay runs.
    let list = w
        .run(&[
            "dead-letters",
            "list",
            "--queue",
            w.dlq(),
            "--key",
            "c",
            "--json",
        ])
        .await;
    let c_id = stdout(&list)
        .lines()
        .next()
        .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .and_then(|v| v["id"].as_str().map(str::to_owned))
        .expect("c's id");
    let export = w
        .run(&["dead-letters", "export", "--queue", w.dlq(), "--id", &c_id])
        .await;
    let file = std::env::temp_dir().join(format!("cli-arrival-{}.jsonl", uuid::Uuid::new_v4()));
    std::fs::write(&file, &export.stdout).expect("write export");
    let purge = w
        .run(&[
            "dead-letters",
            "purge",
            "--queue",
            w.dlq(),
            "--id",
            &c_id,
            "--yes",
        ])
        .await;
    assert_eq!(purge.status.code(), Some(0), "{}", both(&purge));
    w.wait_depth(w.dlq(), 2).await;

    // The handler still fails: `a` and `b` come back as new letters during
    // the run too.
    let running = w.start_consumer().await;
    let replay = w
        .cli()
        .args([
            "dead-letters",
            "replay",
            "--queue",
            w.dlq(),
            "--rate",
            "0.5",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn replay");
    support::eventually("the first letter sent", || async {
        w.journal_rows().await >= 1
    })
    .await;
    let path = file.to_string_lossy().into_owned();
    let import = w
        .run(&[
            "dead-letters",
            "import",
            "--queue",
            w.dlq(),
            "--input",
            &path,
        ])
        .await;
    assert_eq!(import.status.code(), Some(0), "{}", both(&import));
    let out = replay.wait_with_output().await.expect("replay ends");
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    assert!(stdout(&out).contains("replayed 2"), "{}", both(&out));
    assert_eq!(
        w.journal_rows().await,
        2,
        "only the snapshot's letters were sent"
    );
    w.wait_depth(w.dlq(), 3).await;
    let after = w
        .run(&["dead-letters", "list", "--queue", w.dlq(), "--json"])
        .await;
    assert!(
        stdout(&after).contains(&c_id),
        "the letter that arrived meanwhile is still there: {}",
        both(&after)
    );
    running.stop().await;
    let _ = std::fs::remove_file(&file);
    w.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_killed_halfway_and_run_again_loses_none_and_duplicates_no_business_row() {
    let w = World::new("kill").await;
    let names: Vec<String> = (0..30).map(|i| format!("k{i:02}")).collect();
    let ids: Vec<&str> = names.iter().map(String::as_str).collect();
    w.dead_letters(&ids).await;
    w.set_broken(&ids, false).await;
    let running = w.start_consumer().await;

    let mut first = w
        .cli()
        .args(["dead-letters", "replay", "--queue", w.dlq(), "--rate", "20"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn replay");
    support::eventually("a third of the letters sent", || async {
        w.journal_rows().await >= 10
    })
    .await;
    first.start_kill().expect("SIGKILL the replay");
    let status = first.wait().await.expect("killed replay ends");
    assert_eq!(status.code(), None, "it was killed, not finished");
    let sent_before = w.journal_rows().await;
    assert!(sent_before < 30, "killed halfway, not after the end");

    let second = w.run(&["dead-letters", "replay", "--queue", w.dlq()]).await;
    assert_eq!(second.status.code(), Some(0), "{}", both(&second));
    support::eventually("every booking made and every queue drained", || async {
        w.bookings().await.len() >= 30 && w.depth(w.queue()).await == 0
    })
    .await;
    running.stop().await;
    let booked = w.bookings().await;
    let mut expected: Vec<String> = names.clone();
    expected.sort();
    assert_eq!(booked, expected, "each booking exactly once");
    assert_eq!(w.depth(w.dlq()).await, 0, "no letter left behind");
    assert_eq!(w.journal_rows().await, 30);
    w.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn letters_in_the_dead_letter_table_replay_to_their_work_queue() {
    let w = World::new("table").await;
    w.dead_letters(&["a", "b"]).await;
    // Move them into the table, as the settle fallback would have put them.
    let export = w.run(&["dead-letters", "export", "--queue", w.dlq()]).await;
    let file =
        std::env::temp_dir().join(format!("cli-table-replay-{}.jsonl", uuid::Uuid::new_v4()));
    std::fs::write(&file, &export.stdout).expect("write export");
    let path = file.to_string_lossy().into_owned();
    let import = w.run(&["dead-letters", "import", "--input", &path]).await;
    assert_eq!(import.status.code(), Some(0), "{}", both(&import));
    let purge = w
        .run(&["dead-letters", "purge", "--queue", w.dlq(), "--yes"])
        .await;
    assert_eq!(purge.status.code(), Some(0), "{}", both(&purge));

    let grouped = w
        .run(&["dead-letters", "list", "--group-by", "handler"])
        .await;
    assert!(
        stdout(&grouped).contains("2      book"),
        "{}",
        both(&grouped)
    );
    w.set_broken(&["a", "b"], false).await;
    let running = w.start_consumer().await;
    let replay = w
        .run(&["dead-letters", "replay", "--handler", "book"])
        .await;
    assert_eq!(replay.status.code(), Some(0), "{}", both(&replay));
    support::eventually("both booked", || async { w.bookings().await.len() == 2 }).await;
    running.stop().await;
    assert_eq!(w.bookings().await, ["a", "b"]);
    let left = w.run(&["dead-letters", "list", "--json"]).await;
    assert_eq!(stdout(&left), "", "the table is empty: {}", both(&left));

    let unknown = w
        .run(&["dead-letters", "replay", "--handler", "nobody"])
        .await;
    assert_eq!(unknown.status.code(), Some(6), "{}", both(&unknown));
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("unknown handler \"nobody\""),
        "{}",
        both(&unknown)
    );
    let _ = std::fs::remove_file(&file);
    w.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn letters_older_than_the_retention_are_refused_unless_forced() {
    let w = World::new("retention").await;
    w.dead_letters(&["a"]).await;
    let refused = w
        .run(&[
            "dead-letters",
            "replay",
            "--queue",
            w.dlq(),
            "--retention",
            "1ms",
        ])
        .await;
    assert_eq!(refused.status.code(), Some(7), "{}", both(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("older than the dedup retention"),
        "{}",
        both(&refused)
    );
    assert_eq!(w.journal_rows().await, 0);
    assert_eq!(w.depth(w.dlq()).await, 1, "nothing was taken");
    w.set_broken(&["a"], false).await;
    let running = w.start_consumer().await;
    let forced = w
        .run(&[
            "dead-letters",
            "replay",
            "--queue",
            w.dlq(),
            "--retention",
            "1ms",
            "--force",
        ])
        .await;
    assert_eq!(forced.status.code(), Some(0), "{}", both(&forced));
    support::eventually("a booked", || async { w.bookings().await == ["a"] }).await;
    running.stop().await;
    w.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_replay_on_the_same_store_is_refused_while_one_runs() {
    let w = World::new("lock").await;
    w.dead_letters(&["a"]).await;
    // What a running replay holds.
    let mut held = w.schema.pool.acquire().await.expect("connection");
    let got: bool =
        sqlx::query_scalar("SELECT pg_try_advisory_lock(25458, hashtext(current_schema()))")
            .fetch_one(&mut *held)
            .await
            .expect("lock");
    assert!(got);
    let refused = w.run(&["dead-letters", "replay", "--queue", w.dlq()]).await;
    assert_eq!(refused.status.code(), Some(7), "{}", both(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("another replay is running"),
        "{}",
        both(&refused)
    );
    assert_eq!(w.depth(w.dlq()).await, 1);
    drop(held);
    w.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_stops_a_replay_between_letters_with_exit_130_and_a_rerun_goes_on() {
    let w = World::new("sigint").await;
    let ids = ["a", "b", "c", "d", "e", "f"];
    w.dead_letters(&ids).await;
    w.set_broken(&ids, false).await;
    let running = w.start_consumer().await;
    let replay = w
        .cli()
        .args(["dead-letters", "replay", "--queue", w.dlq(), "--rate", "2"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn replay");
    support::eventually("the first letter sent", || async {
        w.journal_rows().await >= 1
    })
    .await;
    let pid = replay.id().expect("pid").to_string();
    let sent = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill -INT");
    assert!(sent.success());
    let out = replay.wait_with_output().await.expect("replay ends");
    assert_eq!(out.status.code(), Some(130), "{}", both(&out));
    assert!(w.journal_rows().await < 6, "stopped before the end");

    let rerun = w.run(&["dead-letters", "replay", "--queue", w.dlq()]).await;
    assert_eq!(rerun.status.code(), Some(0), "{}", both(&rerun));
    support::eventually("every booking", || async { w.bookings().await.len() >= 6 }).await;
    running.stop().await;
    assert_eq!(w.bookings().await, ids);
    assert_eq!(w.depth(w.dlq()).await, 0);
    w.close().await;
}
