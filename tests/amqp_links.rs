//! RabbitMQ links cut, stalled and slowed mid-run (needs RabbitMQ:
//! `AMQP_URL`, and PostgreSQL: `DATABASE_URL`).
//!
//! Writers enqueue outbox events at a steady pace; an `OutboxRelay`
//! publishes them to RabbitMQ through one [`LinkProxy`], and a consumer
//! records them in PostgreSQL (dedup row and effect in one transaction)
//! through another. Mid-run both links are cut (every connection reset),
//! stalled (no byte either way, connections left open, past the AMQP
//! heartbeat of 1 s) or slowed. Each case: every event's effect exactly
//! once, each aggregate's in order, both sides back by themselves, and
//! what happened in a metric (`consumer.reconnects`, the relay's failed
//! sends) and a log line. A slowed link loses nothing, so nothing
//! reconnects and no line says a link was lost: the relay's send duration
//! (`messaging.client.operation.duration`) is what shows it.

mod conformance;

use std::time::{Duration, Instant};

use consumer::amqp::{AmqpPublisher, AmqpSource};
use consumer::testing::metrics::total;
use consumer::testing::{LinkProxy, MetricsRecorder, captured_logs};
use consumer::{Consumer, Outbox, OutboxRelay};

use crate::conformance::amqp::{connect, test_topology, through, unique_prefix, upstream};
use crate::conformance::links::{
    Fault, RELAY_RETRY, assert_nothing_lost_twice_or_reordered, assert_sends_show_the_slow_link,
    effects, mean_send_between, recovered_after, write_events,
};
use crate::conformance::scale_out::{effects_table, record_in_order, wait_effects};
use crate::conformance::support::{self, Harness, PgHarness};

async fn links_fail_mid_run(fault: Fault) {
    let logs = captured_logs();
    drop(connect().await);
    let h = PgHarness::new().await;
    effects_table(&h).await;
    let queue = unique_prefix("links");
    let consumer_link = LinkProxy::start(upstream()).await.expect("proxy");
    let relay_link = LinkProxy::start(upstream()).await.expect("proxy");
    let recorder = MetricsRecorder::new();

    let source = AmqpSource::builder(through(&consumer_link), test_topology(&queue))
        .connect()
        .await
        .expect("the consumer connects through the proxy");
    let source_stats = source.stats();
    let consumer = Consumer::new(source, h.store(), record_in_order).with_meter(recorder.meter());
    let (stop_consumer, consumer_stopped) = tokio::sync::oneshot::channel::<()>();
    let consumer_run = tokio::spawn(consumer.run_until(async move {
        let _ = consumer_stopped.await;
    }));

    let relay_name = format!("relay {queue}");
    let outbox = Outbox::new().with_default_destination(format!("/{queue}"));
    let relay = OutboxRelay::new(
        h.pool().clone(),
        outbox.clone(),
        AmqpPublisher::builder(through(&relay_link))
            .with_connection_name(relay_name.clone())
            .build(),
    )
    .with_retry_policy(RELAY_RETRY)
    .with_meter(recorder.meter());
    let relay_stats = relay.stats();
    let (stop_relay, relay_stopped) = tokio::sync::oneshot::channel::<()>();
    let relay_run = tokio::spawn(relay.run_until(async move {
        let _ = relay_stopped.await;
    }));
    let writer = tokio::spawn(write_events(
        h.pool().clone(),
        outbox,
        Duration::from_millis(3),
    ));

    wait_effects(&h, 300).await;
    let relay_connections = relay_link.connections();
    let links = [&consumer_link, &relay_link];
    let at_fault = recorder.collect();
    let mut slow_sends = None;
    fault.apply(&links);
    let fault_began = Instant::now();
    let ended = match fault {
        Fault::Cut => {
            // Both sides notice at once (a reset) and open new connections.
            support::within(async {
                while source_stats.reconnects() == 0
                    || relay_link.connections() == relay_connections
                {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await;
            fault_began
        }
        Fault::Stall => {
            // Nothing is reset: the consumer's heartbeats stop coming, and
            // the relay's confirms with them. Restored once both gave up
            // on their connections.
            support::within(async {
                while source_stats.reconnects() == 0 || relay_stats.snapshot().retried == 0 {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await;
            println!(
                "stall noticed after {:?} (AMQP heartbeat 1 s)",
                fault_began.elapsed()
            );
            Fault::restore(&links);
            Instant::now()
        }
        Fault::Slow => {
            let before = effects(&h).await;
            wait_effects(&h, before + 200).await;
            Fault::restore(&links);
            slow_sends = Some(mean_send_between(&at_fault, &recorder.collect()));
            Instant::now()
        }
    };
    let from = effects(&h).await;
    let recovery = recovered_after(&h, from, ended).await;
    println!("{fault:?}: effects flow again {recovery:?} after the fault ended");

    support::within(writer).await.expect("writer");
    assert_nothing_lost_twice_or_reordered(&h).await;
    // Read while the consumer runs: its gauges go with it.
    let points = recorder.collect();
    let _ = stop_relay.send(());
    let _ = stop_consumer.send(());
    support::within(relay_run)
        .await
        .expect("join")
        .expect("relay");
    support::within(consumer_run)
        .await
        .expect("join")
        .expect("consumer");

    let reconnects = total(
        &points,
        "consumer.reconnects",
        &[("messaging.destination.name", queue.as_str())],
    );
    let failed_sends = total(
        &points,
        "messaging.client.sent.messages",
        &[("error.type", "unavailable")],
    );
    let channel_lost = logs.matching(&["lost the consuming connection", &queue]);
    let publisher_lost = logs.matching(&["lost the RabbitMQ publishing connection", &relay_name]);
    println!(
        "consumer.reconnects {reconnects}, relay sends failed (unavailable) {failed_sends}, relay {:?}",
        relay_stats.snapshot()
    );
    for line in channel_lost.iter().chain(&publisher_lost) {
        println!("log: {line}");
    }
    match fault {
        Fault::Cut | Fault::Stall => {
            assert!(
                reconnects >= 1.0,
                "consumer.reconnects counts the lost channel"
            );
            assert!(
                !channel_lost.is_empty(),
                "the consumer logs the lost channel"
            );
            assert!(
                !publisher_lost.is_empty(),
                "the relay's publisher logs the lost connection"
            );
            if fault == Fault::Stall {
                assert!(
                    failed_sends >= 1.0,
                    "the relay's sends that went unconfirmed are counted as failed"
                );
            }
        }
        Fault::Slow => {
            assert_eq!(
                source_stats.reconnects(),
                0,
                "a slow link is not a lost one"
            );
            assert!(channel_lost.is_empty(), "{channel_lost:?}");
            assert_sends_show_the_slow_link(slow_sends);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_cut_mid_run_lose_nothing_and_both_sides_reconnect() {
    links_fail_mid_run(Fault::Cut).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_stalled_past_the_heartbeat_lose_nothing_and_both_sides_reconnect() {
    links_fail_mid_run(Fault::Stall).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowed_links_lose_nothing_and_reorder_nothing() {
    links_fail_mid_run(Fault::Slow).await;
}

/// A RabbitMQ that takes connections but answers nothing (the link
/// stalled): a declare fails with `NoAnswer` naming the queue, and a
/// partitioned source's start fails the same way, each within the
/// topology's deadline, instead of hanging the service's start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_does_not_answer_fails_the_start_naming_what_it_did_not_answer() {
    use consumer::amqp::{Error, PartitionedSource, PartitionedTopology};

    drop(connect().await);
    let link = LinkProxy::start(upstream()).await.expect("proxy");
    let queue = unique_prefix("stuck");
    let conn = lapin::Connection::connect(&through(&link), lapin::ConnectionProperties::default())
        .await
        .expect("a connection through the proxy");
    let channel = conn.create_channel().await.expect("a channel");
    link.stall();
    let declared = support::within(
        test_topology(&queue)
            .with_declare_timeout(Duration::from_secs(2))
            .declare(&channel),
    )
    .await;
    match declared {
        Err(e @ Error::NoAnswer { .. }) => {
            let said = e.to_string();
            assert!(said.contains(&format!("`{queue}.dlx`")), "{said}");
            assert!(
                said.contains("did not answer the declare of exchange"),
                "{said}"
            );
        }
        other => panic!("expected NoAnswer for the first declare, got {other:?}"),
    }
    drop(conn);

    let stalled = LinkProxy::start(upstream()).await.expect("proxy");
    stalled.stall();
    let topology = PartitionedTopology::new(unique_prefix("stuckp"), 2)
        .expect("a valid name")
        .with_declare_timeout(Duration::from_secs(2))
        .with_expires(Duration::from_secs(600));
    let started =
        support::within(PartitionedSource::builder(through(&stalled), topology).connect()).await;
    match started {
        Err(e @ Error::NoAnswer { .. }) => {
            assert!(e.to_string().contains("within 2s"), "{e}");
        }
        Err(other) => panic!("expected NoAnswer, got {other}"),
        Ok(_) => panic!("a partitioned source started through a stalled link"),
    }
}
