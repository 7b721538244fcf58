//! Handlers that decode schema-registry payloads (`#[handler(codec = ..)]`)
//! against a real registry (Apicurio Registry's Confluent-compatible API,
//! `REGISTRY_URL`, from `scripts/services registry`):
//!
//! * what confluent-kafka's own serializers write (Avro with
//!   TopicNameStrategy, as the standard's example; Protobuf; JSON Schema),
//!   run by scripts/registry_clients.py on the python `scripts/tools
//!   registry-clients` makes (`REGISTRY_CLIENTS_PYTHON`), through Kafka
//!   (`KAFKA_BROKERS`) and RabbitMQ (`AMQP_URL`), read by handlers, a v1
//!   reader reading v2 records under BACKWARD;
//! * poison (an unknown schema id, no magic byte, a truncated payload, a
//!   schema that does not resolve into the reader's) dead-lettered with the
//!   schema id and the reason, the handler never called;
//! * the registry unreachable mid-run (a cut link): nothing dead-lettered,
//!   the backlog processed once it answers again.

mod conformance;
mod tools;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use consumer::codec::registry::{RegistryClient, RegistryConfig};
use consumer::codec::{Avro, JsonSchema, Protobuf};
use consumer::memory::MemoryBroker;
use consumer::testing::LinkProxy;
use consumer::{Consumer, MemoryStore, Message, handler};

use crate::conformance::support;

/// What every test's orders are: `{"id": "order-N", "amount": N}`.
#[derive(
    Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, apache_avro::AvroSchema,
)]
#[avro(namespace = "com.example.orders")]
struct OrderPlaced {
    id: String,
    amount: i64,
}

/// The same order as a `prost` message (`string id = 1; int64 amount = 2;`).
#[derive(Clone, PartialEq, prost::Message)]
struct OrderProto {
    #[prost(string, tag = "1")]
    id: String,
    #[prost(int64, tag = "2")]
    amount: i64,
}

/// What the handlers saw, by test (each test's orders have their own
/// amounts' range).
static SEEN: Mutex<BTreeMap<i64, Vec<String>>> = Mutex::new(BTreeMap::new());

fn saw(amount: i64, id: String) {
    SEEN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .entry(amount)
        .or_default()
        .push(id);
}

/// The orders seen with amounts in `range`, each with how many times.
fn seen(range: std::ops::Range<i64>) -> BTreeMap<i64, Vec<String>> {
    SEEN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .range(range)
        .map(|(k, v)| (*k, v.clone()))
        .collect()
}

/// Each of `range` seen once, as itself.
fn assert_each_once(range: std::ops::Range<i64>) {
    let got = seen(range.clone());
    for n in range {
        assert_eq!(
            got.get(&n),
            Some(&vec![format!("order-{n}")]),
            "order {n} seen once, as itself"
        );
    }
}

#[handler(codec = avro, retry = exponential(base = "10ms", max_delay = "50ms", attempts = 3))]
async fn avro_orders(order: OrderPlaced) -> Result<(), std::io::Error> {
    saw(order.amount, order.id);
    Ok(())
}

#[handler(codec = protobuf, retry = exponential(base = "10ms", max_delay = "50ms", attempts = 3))]
async fn protobuf_orders(order: OrderProto) -> Result<(), std::io::Error> {
    saw(order.amount, order.id);
    Ok(())
}

#[handler(codec = json_schema, retry = exponential(base = "10ms", max_delay = "50ms", attempts = 3))]
async fn json_orders(order: OrderPlaced) -> Result<(), std::io::Error> {
    saw(order.amount, order.id);
    Ok(())
}

/// The registry's Confluent-compatible API, checked to answer.
fn registry_url() -> String {
    let url = std::env::var("REGISTRY_URL")
        .unwrap_or_else(|_| "http://127.0.0.1:8081/apis/ccompat/v7".to_owned());
    let authority = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    let up = std::net::ToSocketAddrs::to_socket_addrs(&authority)
        .map(|mut a| {
            a.any(|a| std::net::TcpStream::connect_timeout(&a, Duration::from_secs(2)).is_ok())
        })
        .unwrap_or(false);
    assert!(
        up,
        "no schema registry answers at {url}: run `scripts/services registry` (it starts Apicurio Registry there) or set REGISTRY_URL"
    );
    url
}

fn registry() -> RegistryClient {
    RegistryClient::new(RegistryConfig::new(registry_url())).expect("registry client")
}

/// Runs scripts/registry_clients.py; it prints the schema ids it wrote
/// with.
async fn produce(args: Vec<String>) -> Vec<u32> {
    let printed = clients(args).await;
    let ids = printed.first().map(|p| p["schema_ids"].clone());
    serde_json::from_value(ids.unwrap_or_default()).expect("schema ids")
}

/// Runs scripts/registry_clients.py; each line it prints, parsed.
async fn clients(args: Vec<String>) -> Vec<serde_json::Value> {
    let python = tools::Venv {
        env: "REGISTRY_CLIENTS_PYTHON",
        dir: "registry-venv",
        tool: "registry-clients",
        imports: "from confluent_kafka.schema_registry.avro import AvroSerializer; import pika",
        needs: "confluent-kafka's schema-registry serializers and pika",
    }
    .python();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/registry_clients.py");
    let shown = args.join(" ");
    let out =
        tokio::task::spawn_blocking(move || Command::new(python).arg(script).args(args).output())
            .await
            .expect("the producer's runner")
            .unwrap_or_else(|e| panic!("running {script}: {e}"));
    assert!(
        out.status.success(),
        "confluent-kafka's serializers ({script} {shown}) failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn args(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| (*s).to_owned()).collect()
}

/// Runs `consumer` until `done` holds of its stats, then stops it.
async fn run_until<Src, R>(
    consumer: Consumer<Src, MemoryStore, R>,
    done: impl Fn(&consumer::stats::StatsSnapshot) -> bool + Send + 'static,
) -> consumer::stats::StatsSnapshot
where
    Src: consumer::source::Source,
    R: consumer::router::Routes<MemoryStore> + 'static,
{
    let stats = consumer.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));
    support::within(stats.wait_for(done)).await;
    let _ = stop.send(());
    support::within(run).await.expect("join").expect("consumer");
    stats.snapshot()
}

mod kafka {
    use super::*;
    use crate::conformance::kafka::{check_external, delete_topics, external_brokers};
    use consumer::kafka::{KafkaSource, Topics};

    async fn topics() -> (String, Topics) {
        let brokers = external_brokers();
        check_external(&brokers);
        let topics =
            Topics::new(format!("ct.reg.{}", uuid::Uuid::now_v7().simple())).expect("name");
        topics.create(&brokers, 1, 1).await.expect("create topics");
        (brokers, topics)
    }

    async fn source(brokers: &str, topics: &Topics) -> KafkaSource {
        KafkaSource::builder(brokers, format!("g-{}", topics.topic()), topics.clone())
            .connect()
            .await
            .expect("Kafka source")
    }

    /// The standard's example: confluent-kafka's `AvroSerializer` with
    /// TopicNameStrategy; then a second version of the schema (a field
    /// with a default) under BACKWARD, which the v1 reader still reads.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn avro_from_confluent_serializers_v1_and_v2_reach_a_v1_handler() {
        let (brokers, topics) = topics().await;
        let topic = topics.topic().to_owned();
        let url = registry_url();
        let v1 = produce(args(&[
            "kafka", &brokers, &topic, "avro", &url, "1000", "20",
        ]))
        .await;
        registry()
            .set_compatibility(
                &format!("{topic}-value"),
                consumer::codec::registry::Compatibility::Backward,
            )
            .await
            .expect("BACKWARD on the subject");
        let v2 = produce(args(&[
            "kafka", &brokers, &topic, "avro", &url, "1020", "20", "v2",
        ]))
        .await;
        assert_ne!(v1, v2, "the second version has an id of its own");

        let consumer = Consumer::new(
            source(&brokers, &topics).await,
            MemoryStore::new(),
            avro_orders,
        )
        .with_codec(Avro::new(registry()));
        let stats = run_until(consumer, |s| s.processed >= 40).await;
        assert_eq!(stats.dead_poison + stats.dead_exhausted, 0, "{stats:?}");
        assert_each_once(1000..1040);
        let _ = delete_topics(&brokers, &topics).await;
    }

    /// `count` orders from `first` written by the `format` serializer to a
    /// fresh topic, read by `handler` with `codec`: each once, none dead.
    async fn serialized_orders_reach<H, C>(format: &str, first: i64, handler: H, codec: C)
    where
        H: consumer::Handler<MemoryStore>,
        C: consumer::codec::Codec,
    {
        let (brokers, topics) = topics().await;
        let topic = topics.topic().to_owned();
        let from = first.to_string();
        produce(args(&[
            "kafka",
            &brokers,
            &topic,
            format,
            &registry_url(),
            &from,
            "10",
        ]))
        .await;
        let consumer = Consumer::new(source(&brokers, &topics).await, MemoryStore::new(), handler)
            .with_codec(codec);
        let stats = run_until(consumer, |s| s.processed >= 10).await;
        assert_eq!(
            stats.dead_poison + stats.dead_exhausted,
            0,
            "{format}: {stats:?}"
        );
        assert_each_once(first..first + 10);
        let _ = delete_topics(&brokers, &topics).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn protobuf_from_confluent_serializers_reaches_a_prost_handler() {
        serialized_orders_reach("protobuf", 2000, protobuf_orders, Protobuf::new(registry())).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn json_schema_from_confluent_serializers_reaches_a_serde_handler() {
        serialized_orders_reach("json", 3000, json_orders, JsonSchema::new(registry())).await;
    }

    /// The other way round: what our encoders write, published by our
    /// Kafka publisher with its content type and CloudEvents `dataschema`,
    /// confluent-kafka's `AvroDeserializer` and `ProtobufDeserializer` read.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn what_our_encoders_write_confluent_deserializers_read() {
        use consumer::codec::avro::AvroEncoder;
        use consumer::codec::protobuf::ProtobufEncoder;
        use consumer::codec::subject::{MessagePart, SubjectNameStrategy};
        use consumer::kafka::KafkaPublisher;
        use consumer::{Outgoing, Publisher};

        let url = registry_url();
        let (brokers, avro_topics) = topics().await;
        let (_, proto_topics) = topics().await;
        let publisher = KafkaPublisher::builder(&brokers)
            .connect()
            .await
            .expect("publisher");
        let schema = serde_json::to_string(&<OrderPlaced as apache_avro::AvroSchema>::get_schema())
            .expect("schema");
        let avro = AvroEncoder::for_topic(
            registry(),
            SubjectNameStrategy::TopicName,
            avro_topics.topic(),
            MessagePart::Value,
            &schema,
        )
        .expect("encoder")
        .with_auto_register(true);
        let proto = ProtobufEncoder::new(
            registry(),
            format!("{}-value", proto_topics.topic()),
            "syntax = \"proto3\";\npackage orders;\nmessage OrderPlaced {\n  string id = 1;\n  int64 amount = 2;\n}\n",
        )
        .with_auto_register(true);
        let mut batch = Vec::new();
        for n in 7000..7003 {
            let id = format!("order-{n}");
            let avro_bytes = avro
                .encode(&OrderPlaced {
                    id: id.clone(),
                    amount: n,
                })
                .await
                .expect("Avro");
            let avro_id = avro.schema_id().await.expect("id");
            batch.push(Outgoing {
                destination: avro_topics.topic().to_owned(),
                message: Message::raw(avro_bytes)
                    .with_key(format!("customer-{}", n % 7))
                    .with_header("content-type", "application/avro")
                    .with_header("ce_dataschema", format!("{url}/schemas/ids/{avro_id}")),
            });
            let proto_bytes = proto
                .encode(&OrderProto { id, amount: n })
                .await
                .expect("Protobuf");
            batch.push(Outgoing {
                destination: proto_topics.topic().to_owned(),
                message: Message::raw(proto_bytes)
                    .with_header("content-type", "application/protobuf"),
            });
        }
        for sent in publisher.publish(&batch).await {
            sent.expect("published");
        }
        let avro_id = avro.schema_id().await.expect("id");
        for (format, topics) in [("avro", &avro_topics), ("protobuf", &proto_topics)] {
            let read = clients(args(&[
                "read-kafka",
                &brokers,
                topics.topic(),
                format,
                &url,
                "3",
            ]))
            .await;
            assert_eq!(read.len(), 3, "{format}: {read:?}");
            for (record, n) in read.iter().zip(7000..) {
                assert_eq!(
                    record["value"]["id"],
                    format!("order-{n}"),
                    "{format}: {record}"
                );
                // Protobuf's JSON mapping writes an int64 as a string.
                let amount = &record["value"]["amount"];
                assert!(
                    amount == &serde_json::json!(n) || amount == &serde_json::json!(n.to_string()),
                    "{format}: {record}"
                );
                if format == "avro" {
                    assert_eq!(
                        record["headers"]["ce_dataschema"],
                        format!("{url}/schemas/ids/{avro_id}"),
                        "{record}"
                    );
                }
            }
            let _ = delete_topics(&brokers, topics).await;
        }
    }
}

mod rabbitmq {
    use super::*;
    use crate::conformance::amqp::{amqp_url, test_topology, unique_prefix};
    use consumer::amqp::AmqpSource;

    async fn source(queue: &str) -> AmqpSource {
        AmqpSource::builder(amqp_url(), test_topology(queue))
            .connect()
            .await
            .expect("RabbitMQ source")
    }

    /// The wire format is payload bytes: the serializers' output published
    /// with pika reads as it does from Kafka.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn avro_protobuf_and_json_schema_from_confluent_serializers_through_rabbitmq() {
        serialized_orders_reach("avro", 4000, avro_orders, Avro::new(registry())).await;
        serialized_orders_reach("protobuf", 4100, protobuf_orders, Protobuf::new(registry())).await;
        serialized_orders_reach("json", 4200, json_orders, JsonSchema::new(registry())).await;
    }

    /// 10 orders from `first` written by the `format` serializer and
    /// published with pika to a fresh queue, read by `handler` with
    /// `codec`: each once, none dead. (The test topology's queues expire
    /// unused.)
    async fn serialized_orders_reach<H, C>(format: &str, first: i64, handler: H, codec: C)
    where
        H: consumer::Handler<MemoryStore>,
        C: consumer::codec::Codec,
    {
        let queue = unique_prefix("reg");
        let source = source(&queue).await;
        let from = first.to_string();
        produce(args(&[
            "rabbitmq",
            &amqp_url(),
            &queue,
            format,
            &registry_url(),
            &from,
            "10",
        ]))
        .await;
        let consumer = Consumer::new(source, MemoryStore::new(), handler).with_codec(codec);
        let stats = run_until(consumer, |s| s.processed >= 10).await;
        assert_eq!(
            stats.dead_poison + stats.dead_exhausted,
            0,
            "{format}: {stats:?}"
        );
        assert_each_once(first..first + 10);
    }
}

mod on_the_memory_broker {
    use super::*;
    use consumer::codec::avro::AvroEncoder;
    use consumer::codec::wire::encode_frame;

    /// A framed Avro order under a fresh subject, written by our encoder.
    async fn framed_order(registry: RegistryClient, n: i64) -> Vec<u8> {
        let schema = serde_json::to_string(&<OrderPlaced as apache_avro::AvroSchema>::get_schema())
            .expect("schema");
        let encoder = AvroEncoder::new(
            registry,
            format!("ct-reg-{}-value", uuid::Uuid::new_v4().simple()),
            &schema,
        )
        .expect("encoder")
        .with_auto_register(true);
        encoder
            .encode(&OrderPlaced {
                id: format!("order-{n}"),
                amount: n,
            })
            .await
            .expect("encoded")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn undecodable_payloads_are_dead_lettered_with_the_schema_id_and_the_reason() {
        let registry = registry();
        let other = AvroEncoder::new(
            registry.clone(),
            format!("ct-reg-{}-value", uuid::Uuid::new_v4().simple()),
            r#"{"type": "record", "name": "Other", "fields": [{"name": "x", "type": "int"}]}"#,
        )
        .expect("encoder")
        .with_auto_register(true);
        #[derive(serde::Serialize)]
        struct Other {
            x: i32,
        }
        let unresolvable = other.encode(&Other { x: 7 }).await.expect("encoded");
        let good = framed_order(registry.clone(), 5000).await;
        let mut truncated = good.clone();
        truncated.truncate(good.len() - 3);
        let cases: [(&str, Vec<u8>, &str); 4] = [
            (
                "unknown-id",
                encode_frame(2_000_000_000, b"\x02"),
                "2000000000",
            ),
            (
                "no-magic",
                br#"{"id": "order-1", "amount": 1}"#.to_vec(),
                "magic byte",
            ),
            ("truncated", truncated, "does not decode"),
            (
                "unresolvable",
                unresolvable,
                "Missing field in record: \"id\"",
            ),
        ];

        let broker = MemoryBroker::new(1);
        let topic = "orders";
        for (id, payload, _) in &cases {
            broker
                .publish(topic, Message::raw(payload.clone()).with_id(*id))
                .await
                .expect("published");
        }
        broker
            .publish(topic, Message::raw(good).with_id("good"))
            .await
            .expect("published");
        let consumer = Consumer::new(broker.source(topic), MemoryStore::new(), avro_orders)
            .with_codec(Avro::new(registry));
        let stats = run_until(consumer, |s| s.processed + s.dead_poison >= 5).await;
        assert_eq!(
            (stats.processed, stats.dead_poison, stats.retries),
            (1, 4, 0),
            "{stats:?}"
        );
        assert_each_once(5000..5001);

        let letters = broker.dead_letters(topic);
        for (id, _, says) in &cases {
            let letter = letters
                .iter()
                .find(|m| m.headers.get("x-dlq-message-id").ok().flatten() == Some(*id))
                .unwrap_or_else(|| panic!("{id} is dead-lettered"));
            let header = |name| letter.headers.get(name).ok().flatten().unwrap_or_default();
            let error = format!("{} | {}", header("x-dlq-error"), header("x-dlq-causes"));
            assert!(
                error.contains(says),
                "{id}: the letter's reason says {says:?}: {error}"
            );
            assert!(
                *id == "no-magic" || error.contains("schema id"),
                "{id}: the letter's reason names the schema id: {error}"
            );
            assert_eq!(
                letter.headers.get("x-dlq-kind").ok().flatten(),
                Some("poison"),
                "{id}"
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_registry_that_does_not_answer_dead_letters_nothing_and_the_backlog_drains_after() {
        let url = registry_url();
        let authority = url
            .trim_start_matches("http://")
            .split('/')
            .next()
            .expect("authority")
            .to_owned();
        let path = url
            .trim_start_matches("http://")
            .trim_start_matches(&authority)
            .to_owned();
        let link = LinkProxy::start(authority).await.expect("proxy");
        let through = RegistryClient::new(
            RegistryConfig::new(format!("http://{}{path}", link.addr()))
                .with_timeout(Duration::from_millis(500)),
        )
        .expect("client through the link");

        let broker = MemoryBroker::new(1);
        let topic = "orders";
        for n in 6000..6010 {
            // Each its own subject's first version: ids the codec has not
            // seen, so each needs the registry.
            let payload = framed_order(registry(), n).await;
            broker
                .publish(
                    topic,
                    Message::raw(payload)
                        .with_id(format!("order-{n}"))
                        .with_key(format!("customer-{}", n % 3)),
                )
                .await
                .expect("published");
        }
        link.down();
        let consumer = Consumer::new(broker.source(topic), MemoryStore::new(), avro_orders)
            .with_codec(Avro::new(through));
        let stats = consumer.stats();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(consumer.run_until(async move {
            let _ = stopped.await;
        }));
        // More tries than the handler's own policy allows (3 attempts):
        // the registry's outage does not spend them.
        support::within(stats.wait_for(|s| s.retries >= 9)).await;
        let held = stats.snapshot();
        assert_eq!(
            (held.processed, held.dead_poison, held.dead_exhausted),
            (0, 0, 0),
            "{held:?}"
        );
        link.restore();
        support::within(stats.wait_for(|s| s.processed == 10)).await;
        let _ = stop.send(());
        support::within(run).await.expect("join").expect("consumer");
        let end = stats.snapshot();
        assert_eq!(end.dead_poison + end.dead_exhausted, 0, "{end:?}");
        assert!(broker.dead_letters(topic).is_empty());
        assert_each_once(6000..6010);
    }
}

#[test]
fn a_consumer_without_the_codec_its_handler_names_refuses_to_start() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let broker = MemoryBroker::new(1);
    let error = runtime
        .block_on(
            Consumer::new(broker.source("orders"), MemoryStore::new(), avro_orders)
                .run_until(std::future::pending()),
        )
        .expect_err("refused");
    let text = error.to_string();
    assert!(
        text.contains("avro codec") && text.contains("with_codec"),
        "{text}"
    );
}
