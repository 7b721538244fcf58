//! The outbox relay publishing to Kafka through `KafkaPublisher`, on the
//! mock cluster and on the out-of-process broker (`KAFKA_BROKERS`, default
//! 127.0.0.1:9092; `scripts/services kafka` starts Apache Kafka there), with the
//! outbox on PostgreSQL (`DATABASE_URL`): record key = aggregate id,
//! CloudEvents binary-mode headers, the writer's trace, per-aggregate order,
//! and a record the broker refuses reported as not retriable.

mod conformance;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use conformance::kafka::{MockHost, check_external, external_brokers};
use consumer::kafka::KafkaPublisher;
use consumer::{Message, NewEvent, Outbox, OutboxRelay, Outgoing, Publisher};
use opentelemetry::trace::TraceContextExt;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

const PARTITIONS: i32 = 3;

async fn pg_pool() -> sqlx::PgPool {
    consumer::testing::FreshSchema::create("ct", 4)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .pool
}

fn tracing_on() {
    consumer::testing::in_memory_spans();
}

use consumer::testing::trace_id_of as trace_id;

/// Every record of `topic`, per partition in offset order.
fn read_all(brokers: &str, topic: &str, expected: usize) -> Vec<consumer::Envelope> {
    let reader: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "kafka-outbox-reader")
        .set("enable.auto.commit", "false")
        .create()
        .expect("reader");
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("tpl");
    }
    reader.assign(&tpl).expect("assign");
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while out.len() < expected && std::time::Instant::now() < deadline {
        if let Some(Ok(r)) = reader.poll(Duration::from_millis(100)) {
            out.push(consumer::kafka::headers::to_envelope(&r));
        }
    }
    assert_eq!(out.len(), expected, "records of {topic} read back");
    out
}

async fn relay_to_kafka(brokers: &str, topic: &str, producer_props: &[(&str, &str)]) {
    tracing_on();
    let pool = pg_pool().await;
    let outbox = Outbox::new().with_default_destination(topic);
    let mut trace_of = HashMap::new();
    for n in 1..=4u32 {
        for agg in ["a", "b", "c", "d"] {
            let span = tracing::info_span!("place order");
            let _in = span.enter();
            let mut tx = pool.begin().await.expect("begin");
            let ev = NewEvent::new(
                "Order",
                agg,
                "OrderPlaced",
                &serde_json::json!({ "order": agg, "n": n }),
            )
            .expect("json");
            let id = outbox.enqueue(&mut tx, ev).await.expect("enqueue");
            tx.commit().await.expect("commit");
            trace_of.insert(id.to_string(), trace_id(&span));
        }
    }
    let mut publisher = KafkaPublisher::builder(brokers);
    for (k, v) in producer_props {
        publisher = publisher.with_property(*k, *v);
    }
    let relay = OutboxRelay::new(
        pool.clone(),
        outbox.clone(),
        publisher.connect().await.expect("publisher"),
    )
    .with_source("/tests/kafka-outbox");
    conformance::support::within(async {
        while outbox.pending(&pool).await.expect("pending") > 0 {
            relay.run_once().await.expect("relay round");
        }
    })
    .await;

    let records = tokio::task::spawn_blocking({
        let (brokers, topic) = (brokers.to_owned(), topic.to_owned());
        move || read_all(&brokers, &topic, 16)
    })
    .await
    .expect("reader");
    let mut per_agg: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for e in &records {
        let key = e.key.clone().expect("the record key is the aggregate id");
        let body: serde_json::Value = serde_json::from_slice(&e.payload).expect("payload");
        per_agg
            .entry(key)
            .or_default()
            .push(body["n"].as_u64().expect("n"));
        assert_eq!(e.kind.as_deref(), Some("OrderPlaced"));
        assert_eq!(e.source.as_deref(), Some("/tests/kafka-outbox"));
        assert!(e.time.is_some(), "ce_time");
        assert_eq!(e.headers.get("ce_specversion"), Ok(Some("1.0")));
        assert_eq!(e.headers.get("content-type"), Ok(Some("application/json")));
        assert!(
            e.headers.get("ce_partitionkey").ok().flatten().is_none(),
            "the key is the record key, not a header"
        );
        let cx = consumer::trace::extract(&e.headers)
            .expect("valid")
            .expect("traceparent present");
        assert_eq!(
            cx.span().span_context().trace_id().to_string(),
            trace_of[&e.id],
            "the trace of the enqueuing transaction"
        );
    }
    assert_eq!(per_agg.len(), 4);
    for (agg, ns) in per_agg {
        assert_eq!(
            ns,
            [1, 2, 3, 4],
            "order of aggregate {agg} within its partition"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_publishes_cloudevents_keyed_by_aggregate_in_order_on_the_mock_cluster() {
    let mock = MockHost::start(1);
    mock.create_topic("orders", PARTITIONS);
    relay_to_kafka(mock.bootstrap(), "orders", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_publishes_cloudevents_keyed_by_aggregate_in_order_on_the_external_broker() {
    let brokers = external_brokers();
    check_external(&brokers);
    let topics =
        consumer::kafka::Topics::new(format!("ct.outbox.{}", uuid::Uuid::now_v7().simple()))
            .expect("name");
    topics
        .create(&brokers, PARTITIONS, 1)
        .await
        .expect("create topics");
    relay_to_kafka(&brokers, topics.topic(), &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_the_broker_refuses_is_reported_as_not_retriable_and_the_rest_of_the_batch_lands()
{
    let mock = MockHost::start(1);
    mock.create_topic("orders", 1);
    let publisher = KafkaPublisher::builder(mock.bootstrap())
        .with_property("message.max.bytes", "10000")
        .connect()
        .await
        .expect("publisher");
    let ok = Outgoing {
        destination: "orders".into(),
        message: Message::raw(&b"small"[..]).with_key("k"),
    };
    let big = Outgoing {
        destination: "orders".into(),
        message: Message::raw(vec![b'x'; 20_000]).with_key("k"),
    };
    let results = Publisher::publish(&publisher, &[ok.clone(), big, ok]).await;
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    let err = results[1]
        .as_ref()
        .expect_err("an oversize record is refused");
    assert!(!err.is_retriable(), "{err}");
}
