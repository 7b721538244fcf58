//! The `consumer` binary on a Kafka dead-letter topic: a Kafka-protocol
//! broker at `KAFKA_BROKERS` (default 127.0.0.1:9092; `scripts/services
//! kafka` starts tansu there) with the PostgreSQL store (`DATABASE_URL`).
//! Replays go to the failed group's own retry topic.

mod support;

use std::time::Duration;

use consumer::envelope::names;
use consumer::kafka::{KafkaPublisher, KafkaSource, Topics};
use consumer::{Consumer, Headers, Message, Outgoing, PgStore, Publisher};
use support::{Booking, World, book, both, stdout};

fn brokers() -> String {
    let brokers = std::env::var("KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".to_owned());
    let first = brokers.split(',').next().unwrap_or(&brokers).to_owned();
    let up = std::net::ToSocketAddrs::to_socket_addrs(&first)
        .map(|mut a| {
            a.any(|a| std::net::TcpStream::connect_timeout(&a, Duration::from_secs(2)).is_ok())
        })
        .unwrap_or(false);
    assert!(
        up,
        "no Kafka-protocol broker answers at {brokers}: run `scripts/services kafka` (it starts tansu) or set KAFKA_BROKERS"
    );
    brokers
}

async fn publish(brokers: &str, topic: &str, ids: &[&str]) {
    let publisher = KafkaPublisher::builder(brokers)
        .with_property("batch.num.messages", "1")
        .build()
        .expect("publisher");
    let batch: Vec<Outgoing> = ids
        .iter()
        .map(|id| {
            let mut headers = Headers::new();
            headers.insert(names::ID, format!("m-{id}"));
            Outgoing {
                destination: topic.to_owned(),
                message: Message {
                    key: Some((*id).to_owned()),
                    headers,
                    payload: serde_json::to_vec(&Booking {
                        id: (*id).to_owned(),
                    })
                    .expect("json")
                    .into(),
                },
            }
        })
        .collect();
    for r in publisher.publish(&batch).await {
        r.expect("publish");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_letters_replay_to_the_groups_retry_topic_with_a_canary_and_export_round_trips() {
    let brokers = brokers();
    let w = World::new("kafka").await;
    let topic = format!("cli-kafka-{}", uuid::Uuid::new_v4().simple());
    let retry = format!("{topic}.retry.book");
    let topics = Topics::new(&topic)
        .expect("topic")
        .with_retry_topic(&retry)
        .expect("retry topic");
    topics.create(&brokers, 2, 1).await.expect("create topics");
    let dlt = topics.dead_letter_topic().to_owned();
    let group = format!("g-{topic}");

    let ids = ["a", "b", "c"];
    w.set_broken(&ids, true).await;
    let consumer = Consumer::new(
        KafkaSource::builder(&brokers, &group, topics.clone())
            // tansu 0.6 mishandles reads inside multi-record batches.
            .with_producer_property("batch.num.messages", "1")
            .connect()
            .expect("Kafka source"),
        PgStore::new(w.schema.pool.clone()),
        book,
    );
    let stats = consumer.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));
    publish(&brokers, &topic, &ids).await;
    tokio::time::timeout(
        Duration::from_secs(60),
        stats.wait_for(|s| s.dead_terminal >= 3),
    )
    .await
    .expect("three dead letters within 60 s");

    let list = w
        .run(&["dead-letters", "list", "--topic", &dlt, "--json"])
        .await;
    assert_eq!(list.status.code(), Some(0), "{}", both(&list));
    assert_eq!(stdout(&list).lines().count(), 3, "{}", both(&list));

    // The work topic is shared by every group: no default route.
    let no_route = w.run(&["dead-letters", "replay", "--topic", &dlt]).await;
    assert_eq!(no_route.status.code(), Some(2), "{}", both(&no_route));
    let purge = w
        .run(&["dead-letters", "purge", "--topic", &dlt, "--yes"])
        .await;
    assert_eq!(purge.status.code(), Some(2), "{}", both(&purge));

    let canary = w
        .run(&[
            "dead-letters",
            "replay",
            "--topic",
            &dlt,
            "--to-topic",
            &retry,
            "--canary",
            "1",
        ])
        .await;
    assert_eq!(canary.status.code(), Some(4), "{}", both(&canary));
    assert_eq!(w.journal_rows().await, 1, "exactly the canary was sent");
    tokio::time::timeout(
        Duration::from_secs(60),
        stats.wait_for(|s| s.dead_terminal >= 4),
    )
    .await
    .expect("the canary came back dead");

    w.set_broken(&ids, false).await;
    let fixed = w
        .run(&[
            "dead-letters",
            "replay",
            "--topic",
            &dlt,
            "--to-topic",
            &retry,
            "--canary",
            "1",
        ])
        .await;
    assert_eq!(fixed.status.code(), Some(0), "{}", both(&fixed));
    assert!(
        stdout(&fixed).contains("replayed 3; already processed 0, already sent 1"),
        "the canary's first letter stays journaled; its new letter and the two others go: {}",
        both(&fixed)
    );
    support::eventually("three bookings", || async { w.bookings().await.len() >= 3 }).await;
    let again = w
        .run(&[
            "dead-letters",
            "replay",
            "--topic",
            &dlt,
            "--to-topic",
            &retry,
        ])
        .await;
    assert_eq!(again.status.code(), Some(0), "{}", both(&again));
    assert!(stdout(&again).contains("replayed 0"), "{}", both(&again));
    let _ = stop.send(());
    run.await.expect("join").expect("consumer");
    assert_eq!(w.bookings().await, ["a", "b", "c"], "each booking once");

    // Export, import into another topic, export again: the same bytes.
    let copy = Topics::new(format!("{topic}-copy"))
        .expect("topic")
        .without_retry_topic();
    copy.create(&brokers, 1, 1)
        .await
        .expect("create copy topics");
    let first = w.run(&["dead-letters", "export", "--topic", &dlt]).await;
    assert_eq!(first.status.code(), Some(0), "{}", both(&first));
    let file = std::env::temp_dir().join(format!("cli-kafka-{}.jsonl", uuid::Uuid::new_v4()));
    std::fs::write(&file, &first.stdout).expect("write export");
    let path = file.to_string_lossy().into_owned();
    let copy_dlt = copy.dead_letter_topic().to_owned();
    let import = w
        .run(&[
            "dead-letters",
            "import",
            "--topic",
            &copy_dlt,
            "--input",
            &path,
        ])
        .await;
    assert_eq!(import.status.code(), Some(0), "{}", both(&import));
    let second = w
        .run(&["dead-letters", "export", "--topic", &copy_dlt])
        .await;
    let sorted = |o: &std::process::Output| {
        let mut l: Vec<String> = stdout(o).lines().map(str::to_owned).collect();
        l.sort();
        l
    };
    // The source topic has two partitions, the copy one: compare as sets.
    assert_eq!(sorted(&first), sorted(&second));
    let _ = std::fs::remove_file(&file);
    w.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_replay_killed_halfway_and_rerun_sends_each_letter_once_from_the_journal() {
    let brokers = brokers();
    let w = World::new("kafka-kill").await;
    let topic = format!("cli-kafka-kill-{}", uuid::Uuid::new_v4().simple());
    let retry = format!("{topic}.retry.book");
    let topics = Topics::new(&topic)
        .expect("topic")
        .with_retry_topic(&retry)
        .expect("retry topic");
    topics.create(&brokers, 2, 1).await.expect("create topics");
    let dlt = topics.dead_letter_topic().to_owned();
    let names: Vec<String> = (0..20).map(|i| format!("k{i:02}")).collect();
    let ids: Vec<&str> = names.iter().map(String::as_str).collect();
    w.set_broken(&ids, true).await;
    let consumer = Consumer::new(
        KafkaSource::builder(&brokers, format!("g-{topic}"), topics.clone())
            .with_producer_property("batch.num.messages", "1")
            .connect()
            .expect("Kafka source"),
        PgStore::new(w.schema.pool.clone()),
        book,
    );
    let stats = consumer.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));
    publish(&brokers, &topic, &ids).await;
    tokio::time::timeout(
        Duration::from_secs(60),
        stats.wait_for(|s| s.dead_terminal >= 20),
    )
    .await
    .expect("twenty dead letters within 60 s");
    w.set_broken(&ids, false).await;

    let mut first = w
        .cli()
        .args([
            "dead-letters",
            "replay",
            "--topic",
            &dlt,
            "--to-topic",
            &retry,
            "--rate",
            "20",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn replay");
    support::eventually("a quarter sent", || async { w.journal_rows().await >= 5 }).await;
    first.start_kill().expect("SIGKILL the replay");
    assert_eq!(first.wait().await.expect("killed").code(), None);
    let sent_before = w.journal_rows().await;
    assert!(sent_before < 20, "killed halfway");

    let second = w
        .run(&[
            "dead-letters",
            "replay",
            "--topic",
            &dlt,
            "--to-topic",
            &retry,
        ])
        .await;
    assert_eq!(second.status.code(), Some(0), "{}", both(&second));
    assert!(
        stdout(&second).contains(&format!("already sent {sent_before}")),
        "the letters stay on the topic; the journal skips them: {}",
        both(&second)
    );
    support::eventually("twenty bookings", || async {
        w.bookings().await.len() >= 20
    })
    .await;
    let _ = stop.send(());
    run.await.expect("join").expect("consumer");
    let mut expected = names.clone();
    expected.sort();
    assert_eq!(w.bookings().await, expected, "each booking exactly once");
    assert_eq!(w.journal_rows().await, 20);
    w.close().await;
}
