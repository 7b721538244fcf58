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
