//! End to end over OTLP on Kafka: the external broker (`KAFKA_BROKERS`,
//! default 127.0.0.1:9092; `scripts/services kafka` starts Apache Kafka there),
//! PostgreSQL (`DATABASE_URL`) and the OTLP receiver
//! (`scripts/otlp_receiver.py`, python from `scripts/tools otlp-receiver`,
//! `OTLP_RECEIVER_PYTHON`). One trace from the request that enqueued an
//! outbox event, through the relay's `send` and the broker, to the
//! handler's `process` span; the messaging metrics with the topic and the
//! real Kafka group.

mod conformance;
mod otlp;
mod tools;

use conformance::kafka::{check_external, external_brokers};
use consumer::kafka::{KafkaPublisher, KafkaSource, Topics};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_and_the_messaging_metrics_reach_an_otlp_receiver_from_the_outbox_through_kafka()
{
    let brokers = external_brokers();
    check_external(&brokers);
    let receiver = otlp::Receiver::start();
    let telemetry = otlp::Telemetry::install(&receiver);

    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let topics = Topics::new(format!("ct.otlp.{run_id}")).expect("topic name");
    topics.create(&brokers, 1, 1).await.expect("create topics");
    let group = format!("ct-otlp-group-{run_id}");
    let publisher = KafkaPublisher::builder(&brokers)
        .connect()
        .await
        .expect("publisher");
    let expected = otlp::Expected {
        system: "kafka",
        send_destination: topics.topic().to_owned(),
        send_span_destination: topics.topic().to_owned(),
        process_destination: topics.topic().to_owned(),
        group: Some(group.clone()),
    };
    let connect = async {
        KafkaSource::builder(&brokers, &group, topics.clone())
            .with_property("session.timeout.ms", "6000")
            .with_property("heartbeat.interval.ms", "500")
            .connect()
            .await
            .expect("Kafka source")
    };
    let run = otlp::run(&telemetry, publisher, connect, &expected).await;
    otlp::check(&receiver, &telemetry, &run, &expected);
}
