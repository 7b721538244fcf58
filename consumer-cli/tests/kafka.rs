//! The `consumer` binary on a Kafka dead-letter topic: an Apache Kafka
//! broker at `KAFKA_BROKERS` (default 127.0.0.1:9092; `scripts/services
//! kafka` starts Apache Kafka there) with the PostgreSQL store (`DATABASE_URL`).
//! Replays go to the failed group's own retry topic (`<topic>.retry.book`),
//! which nothing else writes to here: its record count is what the replays
//! sent.

mod support;

use support::kafka::KafkaTopics;
use support::{World, both, stdout};

fn replay<'a>(k: &'a KafkaTopics, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "dead-letters",
        "replay",
        "--topic",
        &k.dlt,
        "--to-topic",
        &k.retry,
    ];
    args.extend_from_slice(extra);
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_canary_against_a_still_failing_handler_sends_exactly_n_and_exits_non_zero() {
    let w = World::new("kafka-canary").await;
    let k = KafkaTopics::create("canary").await;
    let running = k.start_consumer(&w).await;
    let ids = ["a", "b", "c", "d"];
    k.dead_letters(&w, &running, &ids, 0).await;

    let list = w
        .run(&["dead-letters", "list", "--topic", &k.dlt, "--json"])
        .await;
    assert_eq!(list.status.code(), Some(0), "{}", both(&list));
    assert_eq!(stdout(&list).lines().count(), 4, "{}", both(&list));
    // The work topic is shared by every group: no default route.
    let no_route = w.run(&["dead-letters", "replay", "--topic", &k.dlt]).await;
    assert_eq!(no_route.status.code(), Some(2), "{}", both(&no_route));
    let purge = w
        .run(&["dead-letters", "purge", "--topic", &k.dlt, "--yes"])
        .await;
    assert_eq!(purge.status.code(), Some(2), "{}", both(&purge));

    let canary = w.run(&replay(&k, &["--canary", "2"])).await;
    assert_eq!(canary.status.code(), Some(4), "{}", both(&canary));
    assert!(
        String::from_utf8_lossy(&canary.stderr).contains("dead-lettered again"),
        "{}",
        both(&canary)
    );
    // The binary has exited: whatever it sent is on the retry topic now.
    assert_eq!(
        k.records(&k.retry),
        2,
        "exactly the two canaries went to the retry topic"
    );
    assert_eq!(w.journal_rows().await, 2, "exactly the canaries were sent");
    k.wait_dead(&running, 6).await;
    assert_eq!(k.records(&k.dlt), 6, "the two canaries came back dead");
    running.stop().await;
    assert!(w.bookings().await.is_empty());
    w.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_replay_to_a_fixed_handler_processes_every_letter_once_and_a_rerun_sends_nothing() {
    let w = World::new("kafka-fixed").await;
    let k = KafkaTopics::create("fixed").await;
    let running = k.start_consumer(&w).await;
    let ids = ["a", "b", "c"];
    k.dead_letters(&w, &running, &ids, 0).await;
    w.set_broken(&ids, false).await;

    let fixed = w.run(&replay(&k, &["--canary", "1"])).await;
    assert_eq!(fixed.status.code(), Some(0), "{}", both(&fixed));
    assert!(
        stdout(&fixed).contains("canary: 1 letter(s) processed"),
        "{}",
        both(&fixed)
    );
    assert!(
        stdout(&fixed).contains("replayed 3; already processed 0, already sent 0"),
        "{}",
        both(&fixed)
    );
    support::eventually("three bookings", || async { w.bookings().await.len() >= 3 }).await;

    // A replayed letter stays on the topic; `list` says it was replayed.
    let listed = w
        .run(&["dead-letters", "list", "--topic", &k.dlt, "--json"])
        .await;
    let flags: Vec<Option<bool>> = stdout(&listed)
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).expect("a JSON line")["replayed"].as_bool()
        })
        .collect();
    assert_eq!(flags, [Some(true); 3], "{}", both(&listed));
    let table = w.run(&["dead-letters", "list", "--topic", &k.dlt]).await;
    assert!(stdout(&table).contains("REPLAYED"), "{}", both(&table));

    let again = w.run(&replay(&k, &[])).await;
    assert_eq!(again.status.code(), Some(0), "{}", both(&again));
    assert!(
        stdout(&again).contains("replayed 0; already processed 0, already sent 3"),
        "the letters stay on the topic; the journal skips them: {}",
        both(&again)
    );
    assert_eq!(
        k.records(&k.retry),
        3,
        "one copy per letter, none on the rerun"
    );
    running.stop().await;
    assert_eq!(w.bookings().await, ["a", "b", "c"], "each booking once");
    w.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_replay_killed_halfway_and_rerun_loses_none_and_duplicates_no_business_row() {
    let w = World::new("kafka-kill").await;
    let k = KafkaTopics::create("kill").await;
    let running = k.start_consumer(&w).await;
    let names: Vec<String> = (0..20).map(|i| format!("k{i:02}")).collect();
    let ids: Vec<&str> = names.iter().map(String::as_str).collect();
    k.dead_letters(&w, &running, &ids, 0).await;
    w.set_broken(&ids, false).await;

    let mut first = w
        .cli()
        .args(replay(&k, &["--rate", "20"]))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn replay");
    support::eventually("a quarter sent", || async { w.journal_rows().await >= 5 }).await;
    first.start_kill().expect("SIGKILL the replay");
    assert_eq!(first.wait().await.expect("killed").code(), None);
    let sent_before = w.journal_rows().await;
    assert!(sent_before < 20, "killed halfway");

    let second = w.run(&replay(&k, &[])).await;
    assert_eq!(second.status.code(), Some(0), "{}", both(&second));
    // A letter sent in the instant before the kill, and not yet journaled,
    // may have been processed since: the rerun finds its dedup row and
    // leaves it in place instead of sending it again.
    let counts = replay_counts(&stdout(&second))
        .unwrap_or_else(|| panic!("no summary line: {}", both(&second)));
    // The killed replay's last journal commit may reach the database just
    // after `sent_before` was read: the rerun may find one more sent.
    assert!(
        (sent_before..=sent_before + 1).contains(&counts.already_sent),
        "the journal skips what it recorded ({sent_before} read after the kill): {}",
        both(&second)
    );
    assert!(
        counts.already_processed <= 1,
        "only a letter in flight at the kill can be found processed: {}",
        both(&second)
    );
    assert_eq!(
        counts.replayed + counts.already_processed + counts.already_sent,
        20,
        "every letter is accounted for once: {}",
        both(&second)
    );
    support::eventually("twenty bookings", || async {
        w.bookings().await.len() >= 20
    })
    .await;
    running.stop().await;
    let mut expected = names.clone();
    expected.sort();
    assert_eq!(
        w.bookings().await,
        expected,
        "none lost, none duplicated (the bookings table has no unique key)"
    );
    assert_eq!(w.journal_rows().await, 20);
    w.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_export_then_import_is_byte_identical() {
    let w = World::new("kafka-export").await;
    let k = KafkaTopics::create("export").await;
    let running = k.start_consumer(&w).await;
    k.dead_letters(&w, &running, &["a", "b", "c", "d", "e"], 0)
        .await;
    running.stop().await;

    // Another dead-letter topic with as many partitions: a letter keeps its
    // key, so it lands in the same partition, in the same order.
    let copy = KafkaTopics::create("export-copy").await;
    let first = w.run(&["dead-letters", "export", "--topic", &k.dlt]).await;
    assert_eq!(first.status.code(), Some(0), "{}", both(&first));
    assert_eq!(stdout(&first).lines().count(), 5, "{}", both(&first));
    let file = std::env::temp_dir().join(format!("cli-kafka-{}.jsonl", uuid::Uuid::new_v4()));
    std::fs::write(&file, &first.stdout).expect("write export");
    let path = file.to_string_lossy().into_owned();
    let import = w
        .run(&[
            "dead-letters",
            "import",
            "--topic",
            &copy.dlt,
            "--input",
            &path,
        ])
        .await;
    assert_eq!(import.status.code(), Some(0), "{}", both(&import));
    let second = w
        .run(&["dead-letters", "export", "--topic", &copy.dlt])
        .await;
    assert_eq!(second.status.code(), Some(0), "{}", both(&second));
    assert_eq!(
        stdout(&first),
        stdout(&second),
        "export, import, export: the same bytes"
    );
    let _ = std::fs::remove_file(&file);
    w.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_dry_run_and_inspection_change_nothing_on_the_broker() {
    let w = World::new("kafka-dry").await;
    let k = KafkaTopics::create("dry").await;
    let running = k.start_consumer(&w).await;
    k.dead_letters(&w, &running, &["a", "b", "c"], 0).await;
    w.set_broken(&["a", "b", "c"], false).await;
    let before = k.all_watermarks();

    let list = w
        .run(&["dead-letters", "list", "--topic", &k.dlt, "--json"])
        .await;
    assert_eq!(list.status.code(), Some(0), "{}", both(&list));
    let first_id = stdout(&list)
        .lines()
        .next()
        .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .and_then(|v| v["id"].as_str().map(str::to_owned))
        .expect("a letter id");
    let show = w
        .run(&["dead-letters", "show", "--topic", &k.dlt, &first_id])
        .await;
    assert_eq!(show.status.code(), Some(0), "{}", both(&show));
    let export = w.run(&["dead-letters", "export", "--topic", &k.dlt]).await;
    assert_eq!(export.status.code(), Some(0), "{}", both(&export));
    let dry = w.run(&replay(&k, &["--dry-run"])).await;
    assert_eq!(dry.status.code(), Some(0), "{}", both(&dry));
    assert!(
        stdout(&dry).contains("dry run: 3 would be sent, nothing was changed"),
        "{}",
        both(&dry)
    );

    assert_eq!(
        k.all_watermarks(),
        before,
        "no record appended to the work, retry or dead-letter topic"
    );
    assert_eq!(w.journal_rows().await, 0, "no journal row");
    running.stop().await;
    assert!(w.bookings().await.is_empty(), "nothing was processed");
    w.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn letters_arriving_in_a_kafka_dead_letter_topic_during_a_replay_are_not_replayed() {
    let w = World::new("kafka-arrivals").await;
    let k = KafkaTopics::create("arrivals").await;
    let running = k.start_consumer(&w).await;
    let names: Vec<String> = (0..10).map(|i| format!("a{i:02}")).collect();
    let ids: Vec<&str> = names.iter().map(String::as_str).collect();
    k.dead_letters(&w, &running, &ids, 0).await;
    w.set_broken(&ids, false).await;

    // Two letters a second: the run lasts about five seconds.
    let replaying = w
        .cli()
        .args(replay(&k, &["--rate", "2"]))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn replay");
    support::eventually("the first letter sent", || async {
        w.journal_rows().await >= 1
    })
    .await;
    // A new dead letter lands in the topic, past the snapshot's high
    // watermarks.
    k.dead_letters(&w, &running, &["late"], 10).await;
    assert!(
        w.journal_rows().await < 10,
        "the new letter arrived while the replay was still running"
    );
    let out = replaying.wait_with_output().await.expect("replay ends");
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    assert!(
        stdout(&out).contains("replayed 10; already processed 0, already sent 0"),
        "{}",
        both(&out)
    );
    assert_eq!(w.journal_rows().await, 10, "only the snapshot's letters");
    assert_eq!(k.records(&k.retry), 10, "only the snapshot's letters");

    // The late letter is still there, and would be sent by the next run.
    let late = w
        .run(&[
            "dead-letters",
            "list",
            "--topic",
            &k.dlt,
            "--key",
            "late",
            "--json",
        ])
        .await;
    assert_eq!(stdout(&late).lines().count(), 1, "{}", both(&late));
    assert!(
        stdout(&late).contains("\"replayed\":false"),
        "{}",
        both(&late)
    );
    let dry = w.run(&replay(&k, &["--dry-run"])).await;
    assert!(
        stdout(&dry).contains(
            "dry run: 1 would be sent, nothing was changed; already processed 0, already sent 10"
        ),
        "{}",
        both(&dry)
    );
    support::eventually("ten bookings", || async { w.bookings().await.len() >= 10 }).await;
    running.stop().await;
    let mut expected = names.clone();
    expected.sort();
    assert_eq!(w.bookings().await, expected, "each once, the late one not");
    w.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_the_settle_producer_batched_are_all_read() {
    let w = World::new("kafka-batched").await;
    let k = KafkaTopics::create("batched").await;
    // The settle producer batches its dead letters (200 ms linger): the
    // snapshot must hold every record of each multi-record batch.
    let running = k.start_consumer_with(&w, &[("linger.ms", "200")]).await;
    let names: Vec<String> = (0..30).map(|i| format!("b{i:02}")).collect();
    let ids: Vec<&str> = names.iter().map(String::as_str).collect();
    k.dead_letters(&w, &running, &ids, 0).await;
    running.stop().await;

    let list = w
        .run(&["dead-letters", "list", "--topic", &k.dlt, "--json"])
        .await;
    assert_eq!(list.status.code(), Some(0), "{}", both(&list));
    let mut keys: Vec<String> = stdout(&list)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
            v["key"].as_str().expect("a key").to_owned()
        })
        .collect();
    keys.sort();
    assert_eq!(keys, names, "every letter, once: {}", both(&list));
    let dry = w.run(&replay(&k, &["--dry-run"])).await;
    assert!(
        stdout(&dry).contains("dry run: 30 would be sent"),
        "{}",
        both(&dry)
    );
    w.close().await;
}

/// The counts of a replay's summary line, `replayed R; already processed P,
/// already sent S`.
struct ReplayCounts {
    replayed: i64,
    already_processed: i64,
    already_sent: i64,
}

fn replay_counts(out: &str) -> Option<ReplayCounts> {
    let line = out.lines().find(|l| l.contains("replayed "))?;
    let number_after = |word: &str| -> Option<i64> {
        let rest = &line[line.find(word)? + word.len()..];
        rest.trim_start()
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    Some(ReplayCounts {
        replayed: number_after("replayed ")?,
        already_processed: number_after("already processed ")?,
        already_sent: number_after("already sent ")?,
    })
}
