//! A RabbitMQ restart in the middle of a run (needs a local RabbitMQ node
//! that `rabbitmqctl` controls, and PostgreSQL): on classic queues with
//! in-place retries, and on quorum queues with every message retried once
//! through the delay queues, so retry copies wait there when the node goes
//! down. A test binary of its own, its tests one at a time (cargo runs test
//! binaries one after another), so no other test talks to RabbitMQ while
//! the broker is down.

mod conformance;

use std::time::Duration;

use consumer::amqp::{AmqpPublisher, AmqpSource, QueueType};
use consumer::{Consumer, Handler, Outgoing, PgTx, Publisher, Store, handler};

use crate::conformance::amqp::{
    StartAppOnDrop, amqp_url, connect, rabbitmqctl, test_topology_of, unique_prefix,
};
use crate::conformance::support::{self, Harness, Job, JobError, PgHarness};

#[handler(idempotency_key = job.id, retry = exponential(base = "20ms", max_delay = "500ms", attempts = 50))]
async fn record(job: Job, tx: &mut PgTx, ctx: &consumer::MessageContext) -> Result<(), JobError> {
    // Slow enough that the restart lands mid-run.
    tokio::time::sleep(Duration::from_millis(20)).await;
    PgHarness::insert_effect(tx, "record", &job, ctx.message_id()).await?;
    Ok(())
}

/// `record`, with retries through the delay queues: jobs with `fail_times`
/// go there and come back (after up to 4 s, spread by the jitter, so most
/// copies of a run's first attempts still wait when the node stops).
#[handler(
    name = "record",
    idempotency_key = job.id,
    retry = exponential(base = "2s", max_delay = "4s", attempts = 50, mode = redeliver),
)]
async fn record_redelivered(
    job: Job,
    tx: &mut PgTx,
    ctx: &consumer::MessageContext,
) -> Result<(), JobError> {
    support::behave(&job, ctx).await?;
    tokio::time::sleep(Duration::from_millis(20)).await;
    PgHarness::insert_effect(tx, "record", &job, ctx.message_id()).await?;
    Ok(())
}

/// One restart at a time in this binary.
static RESTARTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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
    restart_mid_run(
        QueueType::Classic,
        1000,
        0,
        record,
        Duration::from_secs(120),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_quorum_queues_retry_copies_waiting_in_delay_queues_survive_a_broker_restart() {
    // Every job fails its first attempt: its retry copy goes through a
    // quorum delay queue, and those copies are in flight when the node
    // stops. Copies that expire while the work queue is not back yet stay
    // in their delay queue (at-least-once dead-lettering) until RabbitMQ's
    // dead-letter worker tries again, after its publisher confirm timeout
    // (`dead_letter_worker_publisher_confirm_timeout`, 2 min by default):
    // the run recovers in full, minutes later, which the wait allows.
    restart_mid_run(
        QueueType::Quorum,
        1000,
        1,
        record_redelivered,
        Duration::from_secs(300),
    )
    .await;
}

/// Publishes `n` jobs (failing `fail_times` first), consumes them with
/// `handler`, restarts RabbitMQ mid-run, and checks that every job has
/// exactly one effect, waiting up to `recovery` after the restart.
async fn restart_mid_run<H>(
    queue_type: QueueType,
    n: i64,
    fail_times: u32,
    handler: H,
    recovery: Duration,
) where
    H: Handler<Store<sqlx::Postgres>>,
{
    let _one_at_a_time = RESTARTS.lock().await;
    let h = PgHarness::new().await;
    let queue = unique_prefix("restart");
    let topology = || test_topology_of(&queue, queue_type);
    let conn = connect().await;
    topology()
        .declare(&conn.create_channel().await.expect("channel"))
        .await
        .expect("declare");
    let _ = conn.close(200, "declared".into()).await;
    let publisher = AmqpPublisher::builder(amqp_url())
        .connect()
        .await
        .expect("a RabbitMQ publisher");
    let batch: Vec<Outgoing> = (0..n)
        .map(|i| Outgoing {
            destination: format!("/{queue}"),
            message: Job {
                fail_times,
                ..Job::new(&format!("k{}", i % 4), i)
            }
            .message(),
        })
        .collect();
    for r in publisher.publish(&batch).await {
        r.expect("publish");
    }
    publisher.close().await;

    let source = AmqpSource::builder(amqp_url(), topology())
        .with_prefetch(32)
        .connect()
        .await
        .expect("source");
    let metrics = source.stats();
    let consumer = Consumer::new(source, h.store(), handler).with_max_in_flight(32);
    let stats = consumer.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));

    wait_effects(&h, 60, Duration::from_secs(60)).await;
    if fail_times > 0 {
        // The point of the run: copies wait in the delay queues when the
        // node stops (polled: RabbitMQ has no event for it).
        let waited = tokio::time::timeout(Duration::from_secs(30), async {
            while metrics.depths().await.map_or(0, |d| d.delayed) == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(waited.is_ok(), "no retry copy ever waited in a delay queue");
    }
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

    let restarted = std::time::Instant::now();
    wait_effects(&h, n, recovery).await;
    eprintln!(
        "{queue_type:?}: all {n} effects {:?} after the restart",
        restarted.elapsed()
    );
    let _ = stop.send(());
    support::within(run).await.expect("join").expect("consumer");

    let (total, duplicates) = counts(&h).await;
    assert_eq!(total, n, "zero lost");
    assert_eq!(duplicates, 0, "zero duplicate business effects");
    assert!(
        metrics.reconnects() >= 1,
        "the consumer noticed the restart"
    );
    let s = stats.snapshot();
    assert_eq!(s.dead_letters(), 0);
    assert!(
        s.retries >= u64::try_from(n).expect("n") * u64::from(fail_times),
        "every job went through the delay queues {fail_times} time(s): {s:?}"
    );
    let depths = metrics.depths().await.expect("depths after the restart");
    assert_eq!((depths.work, depths.delayed), (0, 0));
}
