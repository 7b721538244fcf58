//! The conformance suite on Kafka, on librdkafka's in-process mock cluster
//! (one cluster per test, no install), with the PostgreSQL store (needs
//! PostgreSQL: `DATABASE_URL`).

mod conformance;
mod suite;

type SuiteHarness = crate::conformance::support::PgHarness;
type SuiteTx = consumer::PgTx;

crate::declare!(crate::conformance::kafka::MockKafka);

mod kafka_settle {
    //! What only Kafka shows: the default producer size limit against the
    //! default consumer payload limit, and a source that cannot serve
    //! retries through the broker.

    use consumer::kafka::{KafkaPublisher, KafkaSource};
    use consumer::{Consumer, DeadLetterKind, Message, Outgoing, Publisher};

    use crate::conformance::broker::BrokerHarness;
    use crate::conformance::kafka::MockKafka;
    use crate::conformance::support::{self, Harness, Job, PgHarness};
    use crate::suite::handlers;

    /// An outside client writes a 1.5 MB record (its producer allows it);
    /// the consumer's default payload limit (1 MiB) makes it poison, and
    /// its dead letter, payload included, is over the settle producer's
    /// default `message.max.bytes` (1 000 000): librdkafka refuses it for
    /// good, so it goes without its payload, and the key moves on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_record_whose_dead_letter_is_over_the_producer_limit_goes_without_its_payload() {
        let h = PgHarness::new().await;
        let broker = <MockKafka as BrokerHarness>::new(1).await;
        broker.create("t").await;
        let outside = KafkaPublisher::builder(broker.cluster.bootstrap())
            .with_property("message.max.bytes", "2000000")
            .connect()
            .await
            .expect("an outside producer");
        let payload = vec![b'x'; 1_500_000];
        let big = Message::raw(payload.clone()).with_key("k").with_id("huge");
        let after = Job::new("k", 2);
        for message in [big, after.message()] {
            let out = Outgoing {
                destination: broker.topic_name("t"),
                message,
            };
            for r in Publisher::publish(&outside, &[out]).await {
                r.expect("the outside producer's publish");
            }
        }
        let source = KafkaSource::builder(
            broker.cluster.bootstrap(),
            broker.group("t"),
            broker.topics("t"),
        )
        .connect()
        .await
        .expect("source");
        let consumer = Consumer::new(source, h.store(), handlers::work);
        let stats = consumer.stats();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(consumer.run_until(async move {
            let _ = stopped.await;
        }));
        support::within(stats.wait_for(|s| s.processed == 1 && s.dead_poison == 1)).await;
        let _ = stop.send(());
        support::within(run).await.expect("join").expect("consumer");

        let dls = BrokerHarness::dead_letter_records(&broker, "t").await;
        assert_eq!(dls.len(), 1);
        assert_eq!(
            (dls[0].kind, dls[0].message_id.as_str()),
            (DeadLetterKind::Poison, "huge")
        );
        let omitted = dls[0]
            .payload_omitted
            .clone()
            .expect("sent without its payload");
        assert_eq!(omitted.size, payload.len());
        assert_eq!(h.effects_of("work", &after.id).await, 1, "the key moved on");
        assert_eq!(stats.snapshot().dead_letters_without_payload, 1);
        let stored = h.stored_dead_letters().await;
        assert_eq!(stored.len(), 1, "the whole letter is in the table");
        assert_eq!(stored[0].payload, payload);
    }

    /// `mode = redeliver` needs the retry topic: without one the consumer
    /// refuses to start, with a sentence naming the fix, before it takes a
    /// record.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_redeliver_handler_without_a_retry_topic_is_refused_at_start() {
        let h = PgHarness::new().await;
        let broker = <MockKafka as BrokerHarness>::new(1).await;
        BrokerHarness::publish(&broker, "t", Job::new("k", 1).message())
            .await
            .expect("publish");
        let source = KafkaSource::builder(
            broker.cluster.bootstrap(),
            broker.group("t"),
            broker.topics("t").without_retry_topic(),
        )
        .connect()
        .await
        .expect("source");
        let metrics = source.stats();
        let err = Consumer::new(source, h.store(), handlers::work_redeliver)
            .run_until(std::future::pending())
            .await
            .expect_err("must refuse");
        assert!(
            matches!(err, consumer::Error::RetryUnsupported { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("retry topic"), "{err}");
        assert!(err.to_string().contains("in_place"), "{err}");
        assert_eq!(metrics.snapshot().in_flight, 0, "no record was taken");
    }
}
