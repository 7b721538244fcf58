//! CloudEvents both ways with the official Python SDK (`cloudevents` 2.2,
//! run by scripts/cloudevents_sdk.py on the python `scripts/tools
//! cloudevents-sdk` makes; `CLOUDEVENTS_SDK_PYTHON` overrides it): what our
//! publishers send to Kafka (`KAFKA_BROKERS`, default 127.0.0.1:9092,
//! Apache Kafka from `scripts/services kafka`) and RabbitMQ (`AMQP_URL`) parses
//! with the SDK's kafka and rabbitmq bindings, and what the SDK produces,
//! binary and structured, reads in our consumers as the event it is.

mod tools;

use std::process::Command;
use std::time::Duration;

use consumer::amqp::AmqpPublisher;
use consumer::kafka::{KafkaPublisher, Topics};
use consumer::{Envelope, Message, Outgoing, Publisher};
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use serde_json::{Value, json};

const SDK_TYPE: &str = "com.example.sdk.OrderPlaced";
const SDK_SOURCE: &str = "/python-sdk";

/// The SDK's python: `CLOUDEVENTS_SDK_PYTHON`, else the venv
/// `scripts/tools cloudevents-sdk` makes.
fn sdk_python() -> String {
    tools::Venv {
        env: "CLOUDEVENTS_SDK_PYTHON",
        dir: "cloudevents-venv",
        tool: "cloudevents-sdk",
        imports: "import cloudevents.core.bindings.kafka, cloudevents.core.bindings.rabbitmq, confluent_kafka, pika",
        needs: "the CloudEvents SDK, confluent-kafka and pika",
    }
    .python()
}

/// Runs scripts/cloudevents_sdk.py; each line it prints is one event the
/// SDK parsed.
async fn sdk(args: &[&str]) -> Vec<Value> {
    let python = sdk_python();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/cloudevents_sdk.py");
    let owned: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let out = tokio::task::spawn_blocking({
        let python = python.clone();
        move || Command::new(python).arg(script).args(owned).output()
    })
    .await
    .expect("the SDK's runner")
    .unwrap_or_else(|e| panic!("running {python} {script}: {e}"));
    assert!(
        out.status.success(),
        "the CloudEvents SDK ({script} {args:?}) failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// What we publish: a `Message::json` with no source (the publisher names
/// it) and a bare typed message (id and specversion filled in too).
fn ours(destination: &str) -> (Vec<Outgoing>, String) {
    let json = Message::json("OrderPlaced", &json!({ "order": "o-1", "total": 7 }))
        .expect("json")
        .with_key("o-1");
    let id = json
        .headers
        .get("ce_id")
        .ok()
        .flatten()
        .expect("id")
        .to_owned();
    let bare = Message::raw(&b"{\"n\":2}"[..])
        .with_header("ce_type", "OrderShipped")
        .with_header("content-type", "application/json");
    let batch = [json, bare]
        .into_iter()
        .map(|message| Outgoing {
            destination: destination.to_owned(),
            message,
        })
        .collect();
    (batch, id)
}

/// The two events as the SDK parsed them, in publish order.
fn check_sdk_read(events: &[Value], id: &str, source: &str) {
    assert_eq!(events.len(), 2, "{events:?}");
    let (a, b) = (&events[0]["attributes"], &events[1]["attributes"]);
    assert_eq!(a["id"], id);
    assert_eq!(a["type"], "OrderPlaced");
    assert_eq!(a["source"], source, "the publisher's default source");
    assert_eq!(a["specversion"], "1.0");
    assert!(a["time"].is_string());
    assert_eq!(events[0]["data"], json!({ "order": "o-1", "total": 7 }));
    assert_eq!(b["type"], "OrderShipped");
    assert_eq!(b["source"], source);
    assert_eq!(b["specversion"], "1.0");
    let bare_id = b["id"].as_str().expect("an id was given");
    assert!(uuid::Uuid::parse_str(bare_id).is_ok(), "{bare_id}");
    assert_eq!(events[1]["data"], json!({ "n": 2 }));
}

/// The SDK's events (binary, then structured) as our consumer read them.
fn check_ours_read(envelopes: &[Envelope]) {
    assert_eq!(envelopes.len(), 2);
    for (e, id) in envelopes.iter().zip(["sdk-binary", "sdk-structured"]) {
        assert!(e.defects.is_empty(), "{id}: {:?}", e.defects);
        assert_eq!(e.id, id);
        assert_eq!(e.kind.as_deref(), Some(SDK_TYPE), "{id}");
        assert_eq!(e.source.as_deref(), Some(SDK_SOURCE), "{id}");
        assert_eq!(e.subject.as_deref(), Some("order-1"), "{id}");
        assert!(e.time.is_some(), "{id}");
        let data: Value = serde_json::from_slice(&e.payload).expect("JSON payload");
        assert_eq!(data, json!({ "order": id, "total": 42 }), "{id}");
    }
}

mod kafka {
    use super::*;

    fn brokers() -> String {
        let brokers =
            std::env::var("KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".to_owned());
        let first = brokers.split(',').next().unwrap_or(&brokers).to_owned();
        let up = std::net::ToSocketAddrs::to_socket_addrs(&first)
            .map(|mut a| {
                a.any(|a| std::net::TcpStream::connect_timeout(&a, Duration::from_secs(2)).is_ok())
            })
            .unwrap_or(false);
        assert!(
            up,
            "no Kafka broker answers at {brokers}: run `scripts/services kafka` (it starts Apache Kafka there) or set KAFKA_BROKERS to a running Kafka"
        );
        brokers
    }

    async fn topic(brokers: &str) -> String {
        let topics = Topics::new(format!("ct.ce.{}", uuid::Uuid::now_v7().simple())).expect("name");
        topics.create(brokers, 1, 1).await.expect("create topics");
        topics.topic().to_owned()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn what_our_kafka_publisher_sends_the_sdk_reads_as_cloudevents() {
        let brokers = brokers();
        let topic = topic(&brokers).await;
        let publisher = KafkaPublisher::builder(&brokers)
            .with_source("/tests/cloudevents")
            .connect()
            .await
            .expect("publisher");
        let (batch, id) = ours(&topic);
        for r in publisher.publish(&batch).await {
            r.expect("published");
        }
        let events = sdk(&["read-kafka", &brokers, &topic, "2"]).await;
        check_sdk_read(&events, &id, "/tests/cloudevents");
        assert_eq!(
            events[0]["attributes"]["partitionkey"], "o-1",
            "the record key"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn what_the_sdk_sends_to_kafka_binary_and_structured_our_consumer_reads() {
        let brokers = brokers();
        let topic = topic(&brokers).await;
        sdk(&["write-kafka", &brokers, &topic, "binary", "sdk-binary"]).await;
        sdk(&[
            "write-kafka",
            &brokers,
            &topic,
            "structured",
            "sdk-structured",
        ])
        .await;
        let envelopes = tokio::task::spawn_blocking(move || {
            let reader: BaseConsumer = rdkafka::ClientConfig::new()
                .set("bootstrap.servers", &brokers)
                .set(
                    "group.id",
                    format!("ce-reader-{}", uuid::Uuid::new_v4().simple()),
                )
                .set("enable.auto.commit", "false")
                .set("auto.offset.reset", "earliest")
                .create()
                .expect("reader");
            reader.subscribe(&[&topic]).expect("subscribe");
            let mut out = Vec::new();
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while out.len() < 2 && std::time::Instant::now() < deadline {
                if let Some(Ok(record)) = reader.poll(Duration::from_millis(200)) {
                    // What KafkaSource reads each record with.
                    out.push(consumer::kafka::headers::to_envelope(&record));
                }
            }
            out
        })
        .await
        .expect("reader");
        check_ours_read(&envelopes);
    }
}

mod rabbitmq {
    use super::*;
    use lapin::options::{BasicGetOptions, QueueDeclareOptions};
    use lapin::types::FieldTable;

    fn url() -> String {
        std::env::var("AMQP_URL")
            .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
    }

    async fn queue() -> (lapin::Channel, String) {
        let url = url();
        let conn = lapin::Connection::connect(&url, lapin::ConnectionProperties::default())
            .await
            .unwrap_or_else(|e| {
                panic!("RabbitMQ is not reachable at {url} ({e}): start it (scripts/services rabbitmq does) or set AMQP_URL")
            });
        let channel = conn.create_channel().await.expect("channel");
        let name = format!("ct.ce.{}", uuid::Uuid::now_v7().simple());
        let mut args = FieldTable::default();
        args.insert(
            "x-expires".into(),
            lapin::types::AMQPValue::LongInt(300_000),
        );
        channel
            .queue_declare(name.as_str().into(), QueueDeclareOptions::default(), args)
            .await
            .expect("declare queue");
        (channel, name)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn what_our_amqp_publisher_sends_the_sdk_reads_as_cloudevents() {
        let (_channel, queue) = queue().await;
        let publisher = AmqpPublisher::builder(url())
            .with_source("/tests/cloudevents")
            .connect()
            .await
            .expect("a RabbitMQ publisher");
        let (batch, id) = ours(&format!("/{queue}"));
        for r in publisher.publish(&batch).await {
            r.expect("published");
        }
        let events = sdk(&["read-rabbitmq", &url(), &queue, "2"]).await;
        check_sdk_read(&events, &id, "/tests/cloudevents");
        assert_eq!(events[0]["attributes"]["partitionkey"], "o-1");
        publisher.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn what_the_sdk_sends_to_rabbitmq_binary_and_structured_our_consumer_reads() {
        let (channel, queue) = queue().await;
        sdk(&["write-rabbitmq", &url(), &queue, "binary", "sdk-binary"]).await;
        sdk(&[
            "write-rabbitmq",
            &url(),
            &queue,
            "structured",
            "sdk-structured",
        ])
        .await;
        let mut envelopes = Vec::new();
        while let Some(got) = channel
            .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .expect("basic.get")
        {
            // What AmqpSource reads each delivery with.
            envelopes.push(consumer::amqp::headers::to_envelope(
                &queue,
                &got.delivery,
                got.delivery.data.clone().into(),
            ));
        }
        check_ours_read(&envelopes);
    }
}
