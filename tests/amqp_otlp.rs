//! End to end over OTLP on RabbitMQ (`AMQP_URL`, default
//! amqp://guest:guest@127.0.0.1:5672/%2f), with PostgreSQL (`DATABASE_URL`)
//! and the OTLP receiver (`scripts/otlp_receiver.py`, python from
//! `scripts/tools otlp-receiver`, `OTLP_RECEIVER_PYTHON`). One trace from
//! the request that enqueued an outbox event, through the relay's `send`
//! and the broker, to the handler's `process` span; the messaging metrics
//! with the queue.

mod conformance;
mod otlp;
mod tools;

use conformance::amqp::{amqp_url, test_topology, unique_prefix};
use consumer::amqp::{AmqpPublisher, AmqpSource};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_and_the_messaging_metrics_reach_an_otlp_receiver_from_the_outbox_through_rabbitmq()
 {
    let receiver = otlp::Receiver::start();
    let telemetry = otlp::Telemetry::install(&receiver);

    let queue = format!("{}.orders", unique_prefix("otlp"));
    // Declared before the relay publishes to it: the source declares its
    // topology on connect.
    let source = AmqpSource::builder(amqp_url(), test_topology(&queue))
        .connect()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "RabbitMQ at {} ({e}): start it (scripts/services rabbitmq does) or set AMQP_URL",
                amqp_url()
            )
        });
    let expected = otlp::Expected {
        system: "rabbitmq",
        // The default exchange, straight to the queue.
        send_destination: format!("/{queue}"),
        // The conventions' {exchange}:{routing key}, the exchange empty.
        send_span_destination: queue.clone(),
        process_destination: queue.clone(),
        group: None,
    };
    let run = otlp::run(
        &telemetry,
        AmqpPublisher::builder(amqp_url()).build(),
        async { source },
        &expected,
    )
    .await;
    otlp::check(&receiver, &telemetry, &run, &expected);
}
