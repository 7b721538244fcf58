//! A RabbitMQ restart in the middle of a run (needs a local RabbitMQ node
//! that `rabbitmqctl` controls, and PostgreSQL). Its own test binary with a
//! single test: cargo runs test binaries one after another, so no other
//! test talks to RabbitMQ while the broker is down.

mod conformance;

use std::process::Command;
use std::time::Duration;

use consumer::amqp::{AmqpPublisher, AmqpSource};
use consumer::{Consumer, Outgoing, PgTx, Publisher, handler};

use crate::conformance::amqp::{amqp_url, connect, test_topology, unique_prefix};
use crate::conformance::support::{self, Harness, Job, JobError, PgHarness};

#[handler(idempotency_key = job.id, retry = exponential(base = "20ms", max_delay = "500ms", attempts = 50))]
async fn record(job: Job, tx: &mut PgTx, ctx: &consumer::MessageContext) -> Result<(), JobError> {
    // Slow enough that the restart lands mid-run.
    tokio::time::sleep(Duration::from_millis(20)).await;
    PgHarness::insert_effect(tx, "record", &job, ctx.message_id()).await?;
    Ok(())
}

fn rabbitmqctl(args: &[&str]) {
    let out = Command::new("rabbitmqctl")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("rabbitmqctl could not run ({e}): this test needs a local RabbitMQ node and its rabbitmqctl"));
    assert!(
        out.status.success(),
        "rabbitmqctl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Starts the app again even when the test fails half-way, so a failure
/// here does not take RabbitMQ away from everything that runs after it.
struct StartAppOnDrop;

impl Drop for StartAppOnDrop {
    fn drop(&mut self) {
        let _ = Command::new("rabbitmqctl").arg("start_app").output();
    }
}

async fn counts(h: &PgHarness) -> (i64, i64) {
    sqlx::query_as(
        "SELECT count(*), count(*) - count(DISTINCT job_id) FROM effects WHERE handler = 'record'",
    )
    .fetch_one(h.pool())
    .await
    .expect("count effects")
}

/// Polls the effects table (the database has no event to await).
async fn wait_effects(h: &PgHarness, at_least: i64, timeout: Duration) {
    let waited = tokio::time::timeout(timeout, async {
        while counts(h).await.0 < at_least {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "only {} of {at_least} effects after {timeout:?}: the consumer did not recover from the RabbitMQ restart",
        counts(h).await.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumer_recovers_from_a_broker_restart_unattended_losing_and_repeating_nothing() {
    let h = PgHarness::new().await;
    let queue = unique_prefix("restart");
    let n: i64 = 1000;
    let conn = connect().await;
    test_topology(&queue)
        .declare(&conn.create_channel().await.expect("channel"))
        .await
        .expect("declare");
    let _ = conn.close(200, "declared".into()).await;
    let publisher = AmqpPublisher::new(amqp_url());
    let batch: Vec<Outgoing> = (0..n)
        .map(|i| Outgoing {
            destination: format!("/{queue}"),
            message: Job::new(&format!("k{}", i % 4), i).message(),
        })
        .collect();
    for r in publisher.publish(&batch).await {
        r.expect("publish");
    }
    publisher.close().await;

    let source = AmqpSource::new(amqp_url(), test_topology(&queue))
        .expect("topology")
        .with_prefetch(32)
        .connect()
        .await
        .expect("source");
    let metrics = source.metrics();
    let consumer = Consumer::new(source, h.store(), record).with_max_in_flight(32);
    let stats = consumer.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));

    wait_effects(&h, 60, Duration::from_secs(60)).await;
    {
        let _restart = StartAppOnDrop;
        rabbitmqctl(&["stop_app"]);
        let while_down = counts(&h).await.0;
        assert!(
            while_down < n,
            "the restart came after the run had finished"
        );
        rabbitmqctl(&["start_app"]);
    }

    wait_effects(&h, n, Duration::from_secs(120)).await;
    let _ = stop.send(());
    support::within(run).await.expect("join").expect("consumer");

    let (total, duplicates) = counts(&h).await;
    assert_eq!(total, n, "zero lost");
    assert_eq!(duplicates, 0, "zero duplicate business effects");
    assert!(
        metrics.reconnects() >= 1,
        "the consumer noticed the restart"
    );
    assert_eq!(stats.snapshot().dead_letters(), 0);
    let depths = metrics.depths().await.expect("depths after the restart");
    assert_eq!(depths.work, 0);
}
