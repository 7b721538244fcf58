//! The header names `docs/guide/outbox.md` ("What goes out") gives for an
//! outbox event are the names on the wire, per backend: the relay publishes
//! one event through each real broker (RabbitMQ at `AMQP_URL`, Kafka at
//! `KAFKA_BROKERS`, SQS at `SQS_ENDPOINT`; `scripts/services` starts them),
//! each broker's own client reads the message back without the framework's
//! envelope, and the names it finds must be the page's table column, no
//! more and no fewer. A participant written in another language from that
//! page finds what the page says.

mod conformance;

use std::collections::BTreeSet;
use std::time::Duration;

use consumer::{NewEvent, Outbox, OutboxRelay, Publisher};

/// The page's table: per column (1 = Kafka, 2 = RabbitMQ, 3 = SQS), the
/// names every event carries, and those it carries only when (the row's
/// attribute says) it has them.
fn documented(column: usize) -> (BTreeSet<String>, BTreeSet<String>) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/guide/outbox.md");
    let page = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let section = page
        .split("## What goes out")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("outbox.md has a section \"What goes out\"");
    let (mut always, mut sometimes) = (BTreeSet::new(), BTreeSet::new());
    let rows = section
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| attribute"));
    for row in rows {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let Some(cell) = cells.get(column) else {
            panic!("outbox.md's table row has no column {column}: {row}")
        };
        let names = cell.split('`').skip(1).step_by(2).map(str::to_owned);
        if cells[0].contains(" when ") {
            sometimes.extend(names);
        } else {
            always.extend(names);
        }
    }
    assert!(
        always.len() >= 8,
        "outbox.md's table of names was not found (column {column}: {always:?})"
    );
    (always, sometimes)
}

/// Relays one event to `destination` through `publisher` and returns
/// once it is published.
async fn relay_one(publisher: impl Publisher + 'static, destination: &str) {
    consumer::testing::in_memory_spans();
    let pool = consumer::testing::FreshSchema::create("wn", 2)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .pool;
    let outbox = Outbox::new().with_default_destination(destination);
    {
        let span = tracing::info_span!("place order");
        let _in = span.enter();
        let mut tx = pool.begin().await.expect("begin");
        let event = NewEvent::new(
            "Order",
            "o-1",
            "OrderPlaced",
            &serde_json::json!({ "order": "o-1" }),
        )
        .expect("json");
        outbox.enqueue(&mut tx, event).await.expect("enqueue");
        tx.commit().await.expect("commit");
    }
    let relay = OutboxRelay::new(pool.clone(), outbox.clone(), publisher);
    conformance::support::within(async {
        while outbox.pending(&pool).await.expect("pending") > 0 {
            relay.run_once().await.expect("relay round");
        }
    })
    .await;
}

fn check(backend: &str, column: usize, on_wire: BTreeSet<String>) {
    let (always, sometimes) = documented(column);
    let missing: Vec<_> = always.difference(&on_wire).collect();
    let undocumented: Vec<_> = on_wire
        .iter()
        .filter(|n| !always.contains(*n) && !sometimes.contains(*n))
        .collect();
    assert!(
        missing.is_empty() && undocumented.is_empty(),
        "{backend}: outbox.md names {missing:?} that are not on the wire, and the wire carries {undocumented:?} that outbox.md does not name (on the wire: {on_wire:?})"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn rabbitmq_carries_the_names_the_outbox_page_gives() {
    use lapin::options::{BasicGetOptions, QueueDeclareOptions, QueueDeleteOptions};
    let queue = conformance::amqp::unique_prefix("wire-names");
    let conn = conformance::amqp::connect().await;
    let channel = conn.create_channel().await.expect("channel");
    channel
        .queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions::default(),
            Default::default(),
        )
        .await
        .expect("declare the queue");
    let publisher = consumer::amqp::AmqpPublisher::builder(conformance::amqp::amqp_url())
        .connect()
        .await
        .expect("publisher");
    relay_one(publisher, &format!("/{queue}")).await;
    let got = channel
        .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
        .expect("the relayed event is in the queue");
    let names = got
        .delivery
        .properties
        .headers()
        .as_ref()
        .map(|t| t.inner().keys().map(|k| k.as_str().to_owned()).collect())
        .unwrap_or_default();
    channel
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await
        .expect("delete the queue");
    check("RabbitMQ", 2, names);
}

#[tokio::test(flavor = "multi_thread")]
async fn kafka_carries_the_names_the_outbox_page_gives() {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Headers as _, Message as _};
    use rdkafka::{ClientConfig, Offset, TopicPartitionList};
    let brokers = conformance::kafka::external_brokers();
    conformance::kafka::check_external(&brokers);
    let topic = format!("wire-names-{}", std::process::id());
    let admin: AdminClient<_> = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .create()
        .expect("admin client");
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    admin
        .create_topics(
            &[NewTopic::new(&topic, 1, TopicReplication::Fixed(1))],
            &options,
        )
        .await
        .expect("create the topic");
    let publisher = consumer::kafka::KafkaPublisher::builder(&brokers)
        .connect()
        .await
        .expect("publisher");
    relay_one(publisher, &topic).await;
    let names = tokio::task::spawn_blocking({
        let (brokers, topic) = (brokers.clone(), topic.clone());
        move || {
            let reader: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", &brokers)
                .set("group.id", "wire-names-reader")
                .set("enable.auto.commit", "false")
                .create()
                .expect("reader");
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(&topic, 0, Offset::Beginning)
                .expect("tpl");
            reader.assign(&tpl).expect("assign");
            match reader.poll(Duration::from_secs(30)) {
                Some(Ok(record)) => {
                    assert_eq!(record.key(), Some(&b"o-1"[..]), "the key is the record key");
                    record
                        .headers()
                        .map(|h| h.iter().map(|h| h.key.to_owned()).collect())
                        .unwrap_or_default()
                }
                Some(Err(e)) => panic!("reading {topic}: {e}"),
                None => panic!("the relayed event did not reach {topic} within 30 s"),
            }
        }
    })
    .await
    .expect("reader");
    let _ = admin.delete_topics(&[&topic], &options).await;
    check("Kafka", 1, names);
}

#[tokio::test(flavor = "multi_thread")]
async fn sqs_carries_the_names_the_outbox_page_gives() {
    use consumer::sqs::{SqsClient, SqsPublisher};
    let api = conformance::sqs::real_api();
    let queue = conformance::sqs::unique_prefix("wire-names");
    let url = api
        .create_queue(&queue, Default::default())
        .await
        .expect("create the queue");
    let publisher = SqsPublisher::builder(SqsClient::from_api(api.clone()))
        .connect()
        .await
        .expect("publisher");
    relay_one(publisher, &queue).await;
    let got = conformance::sqs::read_in_place(&*api, &url).await;
    let _ = api.delete_queue(&url).await;
    let [message] = got.as_slice() else {
        panic!("one relayed event in {queue}, got {}", got.len())
    };
    let names = message.attributes.iter().map(|(n, _)| n.clone()).collect();
    check("SQS", 3, names);
}
