//! The conformance suite end to end on an out-of-process Apache
//! Kafka broker: `KAFKA_BROKERS` (default 127.0.0.1:9092; `scripts/services kafka`
//! starts Apache Kafka there), with the PostgreSQL store (`DATABASE_URL`). Each
//! test works on topics of its own.

mod conformance;
mod suite;

type SuiteHarness = crate::conformance::support::PgHarness;
type SuiteTx = consumer::PgTx;

crate::declare!(crate::conformance::kafka::ExternalKafka);

/// Static membership on Apache Kafka: KIP-345's rejoin (a JoinGroup with no
/// member id and a known `group.instance.id` gets the old member id and its
/// assignment back), which librdkafka's mock cluster does not implement
/// under the classic protocol (see `kafka_faults`).
mod static_membership {
    use std::time::Duration;

    use consumer::kafka::{KafkaPublisher, KafkaSource, Topics};
    use consumer::{Consumer, MessageContext, Outgoing, PgTx, Publisher, handler};

    use crate::conformance::kafka::{check_external, external_brokers};
    use crate::conformance::support::{self, Harness, Job, JobError, PgHarness};

    #[handler(idempotency_key = job.id)]
    async fn record(job: Job, tx: &mut PgTx, ctx: &MessageContext) -> Result<(), JobError> {
        PgHarness::insert_effect(tx, "record", &job, ctx.message_id()).await?;
        Ok(())
    }

    async fn count(h: &PgHarness) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM effects WHERE handler = 'record'")
            .fetch_one(h.pool())
            .await
            .expect("count effects")
    }

    /// A static member's close sends no LeaveGroup, so with a session
    /// timeout of 4 minutes (below `max.poll.interval.ms`, as librdkafka
    /// requires) its partitions would wait that long for any
    /// other member. The same instance id, restarted, gets them back at
    /// once and goes on from the committed offsets: every record once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_static_member_restarted_with_its_id_takes_its_partitions_back_without_waiting_out_its_session()
     {
        let brokers = external_brokers();
        check_external(&brokers);
        let h = PgHarness::new().await;
        let topic = format!("static-{}", uuid::Uuid::new_v4().simple());
        let group = format!("g-{topic}");
        let topics = || Topics::new(&topic).expect("topic").without_retry_topic();
        topics().create(&brokers, 2, 1).await.expect("create topic");
        let publisher = KafkaPublisher::builder(&brokers)
            .connect()
            .await
            .expect("publisher");
        let publish = |from: i64| {
            let batch: Vec<Outgoing> = (from..from + 10)
                .flat_map(|seq| ["a", "b", "c", "d"].map(|k| Job::new(k, seq)))
                .map(|j| Outgoing {
                    destination: topic.clone(),
                    message: j.message(),
                })
                .collect();
            let publisher = &publisher;
            async move {
                for r in support::within(publisher.publish(&batch)).await {
                    r.expect("publish");
                }
            }
        };
        let member = || async {
            KafkaSource::builder(&brokers, &group, topics())
                .with_property("session.timeout.ms", "240000")
                .with_static_membership("static-instance-0")
                .connect()
                .await
                .expect("static source")
        };
        let run = |n: i64| {
            let h = &h;
            async move {
                let consumer = Consumer::new(member().await, h.store(), record);
                let stats = consumer.stats();
                let done = async {
                    while count(h).await < n {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                };
                support::within(consumer.run_until(done))
                    .await
                    .expect("consumer");
                stats.snapshot()
            }
        };

        publish(0).await;
        let first = run(40).await;
        publish(10).await;
        // `within` fails after 60 s, far below the 4 minute session.
        let second = run(80).await;

        assert_eq!(first.duplicates + second.duplicates, 0, "{second:?}");
        let distinct: i64 = sqlx::query_scalar(
            "SELECT count(DISTINCT job_id) FROM effects WHERE handler = 'record'",
        )
        .fetch_one(h.pool())
        .await
        .expect("count");
        assert_eq!((count(&h).await, distinct), (80, 80));
    }
}

/// The static member id the source derives by default
/// (`<hostname>-<slot>`, the slot held by a file lock): distinct for two
/// consumers of a group on one host, the same for a SIGKILLed process's
/// restart, which therefore takes its partition back at once.
mod derived_membership {
    use std::time::Duration;

    use consumer::kafka::{KafkaSource, Topics};
    use consumer::source::{Acker as _, Source as _};
    use rdkafka::ClientConfig;
    use rdkafka::producer::{FutureProducer, FutureRecord};

    use crate::conformance::kafka::{check_external, external_brokers};
    use crate::conformance::scale_out::Child;
    use crate::conformance::support;

    const CHILD_ENV: &str = "CONSUMER_KAFKA_DERIVED_CHILD";
    /// Far beyond `within`'s 60 s: a successor that had to wait out the
    /// dead member's session would fail the test rather than pass slowly
    /// (librdkafka requires it below `max.poll.interval.ms`, 5 minutes).
    const LONG_SESSION: &str = "240000";

    fn topics(topic: &str) -> Topics {
        Topics::new(topic).expect("topic").without_retry_topic()
    }

    /// A topic of its own with `partitions`, on a broker that answers,
    /// and a group of its own.
    async fn fresh_topic(prefix: &str, partitions: i32) -> (String, String) {
        let brokers = external_brokers();
        check_external(&brokers);
        let topic = format!("{prefix}-{}", uuid::Uuid::new_v4().simple());
        topics(&topic)
            .create(&brokers, partitions, 1)
            .await
            .expect("create topic");
        let group = format!("g-{topic}");
        (topic, group)
    }

    async fn source(topic: &str, group: &str) -> KafkaSource {
        KafkaSource::builder(external_brokers(), group, topics(topic))
            .with_property("session.timeout.ms", LONG_SESSION)
            .with_derived_membership()
            .connect()
            .await
            .expect("source with a derived membership")
    }

    async fn produce(topic: &str, partition: i32) {
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", external_brokers())
            .create()
            .expect("producer");
        support::within(
            producer.send(
                FutureRecord::<str, _>::to(topic)
                    .payload("{}")
                    .key("k")
                    .partition(partition),
                Duration::from_secs(10),
            ),
        )
        .await
        .expect("produce");
    }

    /// Until the source's first record, acked.
    async fn first_record(s: &mut KafkaSource) {
        let (_, acker) = support::within(s.recv())
            .await
            .expect("recv")
            .expect("a record");
        acker.ack().await.expect("ack");
    }

    /// Two sources of one group in one process hold different slots, so
    /// join as two members, one partition each (a shared id would fence
    /// one); the slot of the one closed goes to the next.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_sources_of_a_group_get_distinct_ids_and_a_closed_ones_slot_is_reused() {
        let (topic, group) = fresh_topic("derived", 2).await;
        let a = source(&topic, &group).await;
        let b = source(&topic, &group).await;
        let (ida, idb) = (a.instance_id().map(str::to_owned), b.instance_id());
        let (Some(ida), Some(idb)) = (ida, idb) else {
            panic!("no derived id: {:?} {:?}", a.instance_id(), b.instance_id());
        };
        assert_ne!(ida, idb);
        let slot = |id: &str| id.rsplit('-').next().map(str::to_owned);
        assert_eq!(slot(&ida), Some("0".to_owned()), "{ida}");
        assert_eq!(slot(idb), Some("1".to_owned()), "{idb}");

        // Two members: each is assigned one of the two partitions (the
        // source has no assignment event; its counters are read).
        support::within(async {
            while [&a, &b]
                .iter()
                .any(|s| s.stats().snapshot().partitions.len() != 1)
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;

        a.close().await;
        let c = source(&topic, &group).await;
        assert_eq!(c.instance_id(), Some(ida.as_str()), "the freed slot 0");
        c.close().await;
        b.close().await;
    }

    /// The body of the consumer process the test below SIGKILLs: a member
    /// with a derived id that prints it after its first record.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "a child process of a_sigkilled_process_restarted_on_its_host_takes_its_id_and_partition_back_at_once"]
    async fn child_derived_member_process() {
        let spec = std::env::var(CHILD_ENV).unwrap_or_else(|_| {
            panic!("{CHILD_ENV} is unset: this is a child process of a test, not a test of its own")
        });
        let Some((topic, group)) = spec.split_once(' ') else {
            panic!("{CHILD_ENV} is `topic group`");
        };
        let mut s = source(topic, group).await;
        first_record(&mut s).await;
        println!("joined as {}", s.instance_id().unwrap_or("-"));
        std::future::pending::<()>().await;
    }

    /// A SIGKILLed static member leaves its partition assigned for its
    /// whole session (4 minutes here); the restart on the same host takes
    /// the dead process's slot, so its id, and gets the partition at once
    /// (within `within`'s 60 s, far below the session).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sigkilled_process_restarted_on_its_host_takes_its_id_and_partition_back_at_once() {
        let (topic, group) = fresh_topic("derived-kill", 1).await;
        let log = std::env::temp_dir().join(format!("{topic}.log"));
        let mut child = Child::spawn_logging_to(
            "derived_membership::child_derived_member_process",
            (CHILD_ENV, format!("{topic} {group}")),
            "derived",
            &log,
        );
        produce(&topic, 0).await;
        let joined_as = support::within(async {
            loop {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                // After the harness's `test … ... ` on the same line.
                let id = text
                    .lines()
                    .find_map(|l| l.split_once("joined as ").map(|(_, id)| id.trim()));
                if let Some(id) = id {
                    return id.to_owned();
                }
                if let Some(status) = child.exited() {
                    panic!("the child exited ({status}) before its first record:\n{text}");
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        child.kill();
        let _ = std::fs::remove_file(&log);

        produce(&topic, 0).await;
        let mut restarted = source(&topic, &group).await;
        assert_eq!(restarted.instance_id(), Some(joined_as.as_str()));
        first_record(&mut restarted).await;
        restarted.close().await;
    }
}
