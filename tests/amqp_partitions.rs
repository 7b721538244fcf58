//! Several instances on one partitioned RabbitMQ queue (needs RabbitMQ:
//! `AMQP_URL`, and PostgreSQL: `DATABASE_URL`): the partition count is
//! checked, the instances share the partitions, and each key keeps its
//! order through hand-overs, a SIGKILLed instance and one added while
//! running, with no message lost or applied twice; several partitioned
//! queues on one node (read with `rabbitmqctl`, on the node's machine)
//! declare only what their handlers need and delete it all.

mod conformance;

use std::collections::BTreeMap;
use std::time::Duration;

use consumer::amqp::{AmqpPublisher, PartitionedSource, PartitionedTopology};
use consumer::{Consumer, Outgoing, PgTx, Publisher, handler};

use consumer::testing::LinkProxy;

use crate::conformance::amqp::{amqp_url, connect, listed, through, unique_prefix, upstream};
use crate::conformance::scale_out::{
    Child, assert_in_order_exactly_once, count, effects_table, instance, jobs, publish,
    record_in_order, wait_effects,
};
use crate::conformance::support::{self, Harness, Job, JobError, PgHarness};

/// The partitioned topology tests use: short delay buckets, expiring queues.
fn partitioned(queue: &str, partitions: u32) -> PartitionedTopology {
    PartitionedTopology::new(queue, partitions)
        .expect("valid test queue name")
        .with_max_retry_delay(Duration::from_millis(256))
        .with_expires(Duration::from_secs(600))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_count_other_than_the_brokers_is_refused_at_start() {
    drop(connect().await);
    let queue = unique_prefix("pcount");
    let first = PartitionedSource::builder(amqp_url(), partitioned(&queue, 4))
        .connect()
        .await
        .expect("the first start declares 4 partitions");
    for n in [3, 5, 1] {
        let err = PartitionedSource::builder(amqp_url(), partitioned(&queue, n))
            .connect()
            .await
            .expect_err("another count is refused");
        let text = err.to_string();
        assert!(
            text.contains("has 4 partition queues")
                && text.contains(&format!("configured with {n}")),
            "the refusal says what differs: {text}"
        );
    }
    let publisher = AmqpPublisher::builder(amqp_url())
        .with_partitions(partitioned(&queue, 8))
        .connect()
        .await
        .expect("a RabbitMQ publisher");
    let results = publisher
        .publish(&[Outgoing {
            destination: format!("/{queue}"),
            message: Job::new("k", 0).message(),
        }])
        .await;
    let err = results
        .into_iter()
        .next()
        .expect("one result")
        .expect_err("a publisher with another count is refused");
    assert!(!err.is_retriable(), "a mismatch does not heal: {err}");
    assert!(err.to_string().contains("has 4 partition queues"), "{err}");
    // The same count is accepted by a second instance and a publisher.
    let second = PartitionedSource::builder(amqp_url(), partitioned(&queue, 4))
        .connect()
        .await
        .expect("the same count starts");
    consumer::source::Source::close(second).await;
    consumer::source::Source::close(first).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_queues_are_quorum_and_a_classic_one_on_the_broker_is_refused_with_the_way_to_migrate()
 {
    drop(connect().await);
    // Partitions declared classic earlier (the default before quorum).
    let queue = unique_prefix("ptype");
    let classic = partitioned(&queue, 2).with_queue_type(consumer::amqp::QueueType::Classic);
    let first = PartitionedSource::builder(amqp_url(), classic)
        .connect()
        .await
        .expect("classic partitions, as asked");
    consumer::backend::Source::close(first).await;
    let topology = partitioned(&queue, 2);
    assert_eq!(
        topology.partition(0).queue_type(),
        consumer::amqp::QueueType::Quorum,
        "quorum unless told otherwise"
    );
    let err = PartitionedSource::builder(amqp_url(), topology.clone())
        .connect()
        .await
        .expect_err("classic queues on the broker, quorum configured: refused at start");
    assert!(
        matches!(err, consumer::amqp::Error::QueueTypeMismatch { .. }),
        "{err:?}"
    );
    let text = err.to_string();
    for needle in [
        "exists on the broker as a classic queue",
        "declares it as a quorum queue",
        &format!("`{queue}.p0` .. `{queue}.p1`"),
        &format!("`{queue}.dlq`"),
        "rabbitmqctl delete_queue",
        "drain",
    ] {
        assert!(text.contains(needle), "the refusal says {needle:?}: {text}");
    }
    let core: consumer::backend::Error = err.into();
    assert!(
        !core.is_retriable(),
        "a type mismatch does not heal: {core}"
    );
    // Publishers refuse it the same way.
    let publisher = AmqpPublisher::builder(amqp_url())
        .with_partitions(topology)
        .connect()
        .await
        .expect("a RabbitMQ publisher");
    let refused = publisher
        .publish(&[Outgoing {
            destination: format!("/{queue}"),
            message: Job::new("k", 0).message(),
        }])
        .await
        .into_iter()
        .next()
        .expect("one result")
        .expect_err("a publisher declaring quorum partitions is refused too");
    assert!(
        refused
            .to_string()
            .contains("exists on the broker as a classic queue"),
        "{refused}"
    );
}

/// Deliveries without a key, published straight to a partition queue by an
/// outside producer (no `ce-partitionkey`), run in queue order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_without_a_key_run_in_their_partition_queues_order() {
    let h = PgHarness::new().await;
    effects_table(&h).await;
    let queue = unique_prefix("punkeyed");
    let topology = partitioned(&queue, 2);
    let p0 = topology.partition_queue(0);
    // Declared, and a backlog waiting before any consumer runs, so that the
    // consumer holds many at once.
    let conn = connect().await;
    let channel = conn.create_channel().await.expect("channel");
    // Confirmed, so that the connection's close below drops nothing: without
    // confirms a publish returns once queued, and the close could cut off
    // the tail of the backlog (the test then waited for messages the broker
    // never had).
    channel
        .confirm_select(lapin::options::ConfirmSelectOptions::default())
        .await
        .expect("confirm.select");
    for p in 0..2 {
        topology
            .partition(p)
            .declare(&channel)
            .await
            .expect("declare");
    }
    let n = 300;
    for seq in 0..n {
        let job = Job {
            id: format!("unkeyed-{seq}"),
            ..Job::new("one-business-key", seq)
        };
        channel
            .basic_publish(
                "".into(),
                p0.as_str().into(),
                lapin::options::BasicPublishOptions::default(),
                &serde_json::to_vec(&job).expect("json"),
                lapin::BasicProperties::default().with_content_type("application/json".into()),
            )
            .await
            .expect("publish")
            .await
            .expect("confirmed");
    }
    let _ = conn.close(200, "published".into()).await;
    let source = PartitionedSource::builder(amqp_url(), topology)
        .with_heartbeat(Duration::from_millis(100))
        .build()
        .expect("a partitioned source");
    let consumer = Consumer::new(source, h.store(), record_in_order);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));
    wait_effects(&h, n).await;
    let _ = stop.send(());
    support::within(run).await.expect("join").expect("consumer");
    assert_in_order_exactly_once(&h, 1, n).await;
}

/// Waits until `rx` shows an assignment `f` accepts.
async fn wait_assignment(
    rx: &mut tokio::sync::watch::Receiver<Option<Vec<u32>>>,
    f: impl Fn(&[u32]) -> bool,
) {
    support::within(rx.wait_for(|a| a.as_deref().is_some_and(&f)))
        .await
        .expect("the source is running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_share_the_partitions_and_hand_them_over_in_order() {
    let h = PgHarness::new().await;
    effects_table(&h).await;
    let queue = unique_prefix("pshare");
    let topology = partitioned(&queue, 4);
    let publisher = AmqpPublisher::builder(amqp_url())
        .with_partitions(topology.clone())
        .connect()
        .await
        .expect("a RabbitMQ publisher");

    let start = |id: &'static str| {
        let source = PartitionedSource::builder(amqp_url(), topology.clone())
            .with_instance_id(id)
            .with_heartbeat(Duration::from_millis(100))
            .build()
            .expect("a partitioned source");
        let assignment = source.assignment();
        let metrics = source.stats();
        let consumer = Consumer::new(source, h.store(), record_in_order);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(consumer.run_until(async move {
            let _ = stopped.await;
        }));
        (assignment, metrics, stop, run)
    };
    let (mut a, a_metrics, stop_a, run_a) = start("a");
    let (mut b, b_metrics, stop_b, run_b) = start("b");
    // Dealt in id order: a takes 0 and 2, b takes 1 and 3.
    if support::within(a.wait_for(|x| x.as_deref() == Some(&[0, 2])))
        .await
        .is_err()
    {
        panic!("instance a stopped: {:?}", run_a.await);
    }
    if support::within(b.wait_for(|x| x.as_deref() == Some(&[1, 3])))
        .await
        .is_err()
    {
        panic!("instance b stopped: {:?}", run_b.await);
    }

    let keys = 20;
    publish(&publisher, &format!("/{queue}"), &jobs(keys, 0..20)).await;
    wait_effects(&h, 400).await;
    assert!(
        a_metrics.delivered() > 0 && b_metrics.delivered() > 0,
        "both instances consumed: a {}, b {}",
        a_metrics.delivered(),
        b_metrics.delivered()
    );
    assert_eq!(
        a_metrics.delivered() + b_metrics.delivered(),
        400,
        "each message delivered once, to the instance holding its partition"
    );

    // B leaves: A takes its partitions (at once: B says goodbye) and the
    // keys go on in order.
    let _ = stop_b.send(());
    support::within(run_b)
        .await
        .expect("join")
        .expect("b stops");
    wait_assignment(&mut a, |p| p == [0, 1, 2, 3]).await;
    publish(&publisher, &format!("/{queue}"), &jobs(keys, 20..40)).await;
    wait_effects(&h, 800).await;
    assert_in_order_exactly_once(&h, keys, 40).await;
    let _ = stop_a.send(());
    support::within(run_a)
        .await
        .expect("join")
        .expect("a stops");
}

/// An instance holding no partition when its connection is cut joins
/// again, so it takes the partition once the other instance leaves. It used
/// to keep a session whose heartbeats had stopped: with no partition, no
/// subscription failed to tell it the connection was gone, and nobody
/// heard it any more (the fault campaign found it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_without_partitions_joins_again_after_its_connection_is_cut() {
    let h = PgHarness::new().await;
    effects_table(&h).await;
    let queue = unique_prefix("pidle");
    let topology = partitioned(&queue, 1);
    let link = LinkProxy::start(upstream()).await.expect("a link proxy");
    let start = |id: &'static str, url: String| {
        let source = PartitionedSource::builder(url, topology.clone())
            .with_instance_id(id)
            .with_heartbeat(Duration::from_millis(100))
            .build()
            .expect("a partitioned source");
        let assignment = source.assignment();
        let consumer = Consumer::new(source, h.store(), record_in_order);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(consumer.run_until(async move {
            let _ = stopped.await;
        }));
        (assignment, stop, run)
    };
    // Dealt in id order: a takes the one partition, b none.
    let (mut a, stop_a, run_a) = start("a", amqp_url());
    let (mut b, stop_b, run_b) = start("b", through(&link));
    wait_assignment(&mut a, |p| p == [0]).await;
    wait_assignment(&mut b, <[u32]>::is_empty).await;

    // b's connection is cut: it must join again, or it would never hear
    // a leave.
    link.cut();
    // a leaves, saying goodbye: b takes the partition and consumes.
    let _ = stop_a.send(());
    support::within(run_a)
        .await
        .expect("join")
        .expect("a stops");
    wait_assignment(&mut b, |p| p == [0]).await;
    let publisher = AmqpPublisher::builder(amqp_url())
        .with_partitions(topology.clone())
        .connect()
        .await
        .expect("a RabbitMQ publisher");
    publish(&publisher, &format!("/{queue}"), &jobs(3, 0..2)).await;
    wait_effects(&h, 6).await;
    assert_in_order_exactly_once(&h, 3, 2).await;
    let _ = stop_b.send(());
    support::within(run_b)
        .await
        .expect("join")
        .expect("b stops");
    publisher.close().await;
    let conn = connect().await;
    let channel = conn.create_channel().await.expect("channel");
    support::within(topology.delete(&channel))
        .await
        .expect("the topology deleted");
    let _ = conn.close(200, "done".into()).await;
}

const CHILD_ENV: &str = "CONSUMER_PARTITION_CHILD";

/// The body of the consumer processes `three_processes_...` starts, kills
/// and adds. Run only as those child processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "entry point of the child processes of three_processes_..."]
async fn child_partition_consumer_process() {
    let spec = std::env::var(CHILD_ENV).unwrap_or_else(|_| {
        panic!("{CHILD_ENV} is unset: this is a child process of the scale-out test, not a test of its own")
    });
    let mut parts = spec.split(' ');
    let (Some(queue), Some(schema)) = (parts.next(), parts.next()) else {
        panic!("{CHILD_ENV} is `queue schema`");
    };
    let pool = consumer::testing::FreshSchema::pool_on(schema, 8)
        .await
        .expect("child pool");
    let source = PartitionedSource::builder(amqp_url(), partitioned(queue, PARTITIONS))
        .with_instance_id(instance())
        .with_prefetch(32)
        .build()
        .expect("a partitioned source");
    let mut assignment = source.assignment();
    let log = pool.clone();
    tokio::spawn(async move {
        while assignment.changed().await.is_ok() {
            let now = assignment.borrow_and_update().clone();
            if let Some(p) = now {
                let _ = sqlx::query(
                    "INSERT INTO part_assignments (instance, partitions) VALUES ($1, $2)",
                )
                .bind(instance())
                .bind(format!("{p:?}"))
                .execute(&log)
                .await;
            }
        }
    });
    Consumer::new(source, consumer::Store::new(pool), record_in_order)
        .run_until(std::future::pending())
        .await
        .expect("child consumer");
}

const PARTITIONS: u32 = 8;

fn spawn(queue: &str, schema: &str, id: &str) -> Child {
    Child::spawn(
        "child_partition_consumer_process",
        (CHILD_ENV, format!("{queue} {schema}")),
        id,
    )
}

/// Waits until `id` has logged an assignment `f` accepts.
async fn wait_logged_assignment(h: &PgHarness, id: &str, f: impl Fn(&str) -> bool) {
    support::within(async {
        loop {
            let last: Option<String> = sqlx::query_scalar(
                "SELECT partitions FROM part_assignments WHERE instance = $1 ORDER BY at DESC LIMIT 1",
            )
            .bind(id)
            .fetch_optional(h.pool())
            .await
            .expect("assignments");
            if last.as_deref().is_some_and(&f) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    })
    .await;
}

fn share_of(partitions: &str) -> usize {
    partitions.matches(',').count() + usize::from(partitions != "[]")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_keep_each_keys_order_through_a_sigkill_and_an_added_instance() {
    let h = PgHarness::new().await;
    effects_table(&h).await;
    let queue = unique_prefix("pproc");
    let publisher = AmqpPublisher::builder(amqp_url())
        .with_partitions(partitioned(&queue, PARTITIONS))
        .connect()
        .await
        .expect("a RabbitMQ publisher");
    let (keys, per_key) = (100, 100);
    let all = jobs(keys, 0..per_key);
    let (first, rest) = all.split_at(4_000);
    let (second, third) = rest.split_at(3_000);

    let mut children: BTreeMap<&str, Child> = ["c1", "c2", "c3"]
        .into_iter()
        .map(|id| (id, spawn(&queue, &h.schema, id)))
        .collect();
    for id in ["c1", "c2", "c3"] {
        wait_logged_assignment(&h, id, |p| (2..=3).contains(&share_of(p))).await;
    }
    publish(&publisher, &format!("/{queue}"), first).await;
    wait_effects(&h, 2_000).await;

    // SIGKILL c1 in the middle of its work: another instance takes its
    // partitions once its heartbeats stop.
    let held: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT queue FROM part_effects WHERE instance = 'c1'")
            .fetch_all(h.pool())
            .await
            .expect("c1's partitions");
    assert!(!held.is_empty(), "c1 was consuming");
    if let Some(mut c1) = children.remove("c1") {
        c1.kill();
    }
    let killed_at: f64 = sqlx::query_scalar("SELECT extract(epoch FROM clock_timestamp())::float8")
        .fetch_one(h.pool())
        .await
        .expect("clock");
    publish(&publisher, &format!("/{queue}"), second).await;
    wait_effects(&h, 7_000).await;
    let taken_over: Option<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM min(at))::float8 FROM part_effects \
         WHERE queue = ANY($1) AND instance <> 'c1' AND at > to_timestamp($2)",
    )
    .bind(&held)
    .bind(killed_at)
    .fetch_one(h.pool())
    .await
    .expect("takeover");
    let taken_over = taken_over.expect("another instance took over c1's partitions");
    println!(
        "takeover after SIGKILL: {:.2} s (heartbeat 1 s, gone after 3 missed)",
        taken_over - killed_at
    );

    // An instance added while running takes a share.
    children.insert("c4", spawn(&queue, &h.schema, "c4"));
    wait_logged_assignment(&h, "c4", |p| (2..=3).contains(&share_of(p))).await;
    for id in ["c2", "c3"] {
        wait_logged_assignment(&h, id, |p| (2..=3).contains(&share_of(p))).await;
    }
    publish(&publisher, &format!("/{queue}"), third).await;
    wait_effects(&h, i64::try_from(all.len()).expect("fits")).await;
    drop(children);

    assert_eq!(
        count(&h, "SELECT count(*) FROM part_effects").await,
        i64::try_from(all.len()).expect("fits"),
        "0 lost, 0 duplicate effects"
    );
    assert_in_order_exactly_once(&h, keys, per_key).await;
    assert!(
        count(
            &h,
            "SELECT count(*) FROM part_effects WHERE instance = 'c4'"
        )
        .await
            > 0,
        "the added instance processed its share"
    );
}

/// The depths of every partition's queues and of the shared dead-letter
/// queue reach the metrics, each queue once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_sources_queue_depths_are_reported() {
    use consumer::testing::MetricsRecorder;
    use consumer::testing::metrics::total;

    let h = PgHarness::new().await;
    effects_table(&h).await;
    let queue = unique_prefix("pgauge");
    let topology = partitioned(&queue, 2);
    let publisher = AmqpPublisher::builder(amqp_url())
        .with_partitions(topology.clone())
        .connect()
        .await
        .expect("a RabbitMQ publisher");
    // Three poison pills: three dead letters in the shared queue.
    let poison: Vec<Outgoing> = (0..3)
        .map(|i| Outgoing {
            destination: format!("/{queue}"),
            message: consumer::Message::raw(&b"not json"[..])
                .with_key(format!("k{i}"))
                .with_id(format!("poison-{i}")),
        })
        .collect();
    for r in publisher.publish(&poison).await {
        r.expect("publish");
    }
    let recorder = MetricsRecorder::new();
    let source = PartitionedSource::builder(amqp_url(), topology.clone())
        .with_heartbeat(Duration::from_millis(100))
        .with_depth_interval(Duration::from_millis(20))
        .build()
        .expect("a partitioned source");
    let consumer = Consumer::new(source, h.store(), record_in_order).with_meter(recorder.meter());
    let stats = consumer.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));
    support::within(stats.wait_for(|s| s.dead_letters() == 3)).await;
    let dlq = topology.dead_letter_queue();
    // The depths are read in the background: poll the reading.
    let points = support::within(async {
        loop {
            let points = recorder.collect();
            let dl = total(
                &points,
                "consumer.dead_letter_queue.depth",
                &[("messaging.destination.name", dlq.as_str())],
            );
            if dl == 3.0 {
                return points;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let series = |name: &str| -> Vec<String> {
        let mut v: Vec<String> = points
            .iter()
            .filter(|p| p.name == name)
            .filter_map(|p| p.attributes.get("messaging.destination.name").cloned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        series("consumer.dead_letter_queue.depth"),
        std::slice::from_ref(&dlq),
        "the shared DLQ once"
    );
    let depths = series("consumer.queue.depth");
    for p in 0..2 {
        let part = topology.partition(p);
        assert!(depths.contains(&part.queue().to_owned()), "{depths:?}");
        for (_, delay) in part.delay_queues() {
            assert!(depths.contains(&delay), "{delay} in {depths:?}");
        }
    }
    let _ = stop.send(());
    support::within(run).await.expect("join").expect("consumer");
}

/// Records the job with the partition queue that ran it and the attempt
/// that succeeded; fails its first `fail_times` attempts, retried through
/// the broker's delay queues (up to 200 ms: the 16 ms to 256 ms buckets,
/// which the topology declares at its defaults).
#[handler(
    idempotency_key = job.id,
    retry = exponential(base = "10ms", max_delay = "200ms", attempts = 5, mode = redeliver),
)]
async fn record_after_delayed_retries(
    job: Job,
    tx: &mut PgTx,
    ctx: &consumer::MessageContext,
) -> Result<(), JobError> {
    if ctx.attempt() <= job.fail_times {
        return Err(JobError::Transient(ctx.attempt()));
    }
    sqlx::query(
        "INSERT INTO retried_effects (job_id, key, seq, queue, attempt) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(&job.id)
    .bind(&job.key)
    .bind(job.seq)
    .bind(ctx.envelope().origin.channel.as_str())
    .bind(i32::try_from(ctx.attempt()).unwrap_or(i32::MAX))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn retried_effects_table(h: &PgHarness) {
    sqlx::query(
        "CREATE TABLE retried_effects (id BIGSERIAL PRIMARY KEY, job_id TEXT NOT NULL, \
         key TEXT NOT NULL, seq BIGINT NOT NULL, queue TEXT NOT NULL, attempt INT NOT NULL)",
    )
    .execute(h.pool())
    .await
    .expect("effects table");
}

/// What `retried_effects` holds, in the order it was written:
/// `(job_id, key, seq, queue, attempt)`.
async fn retried_effects(h: &PgHarness) -> Vec<(String, String, i64, String, i32)> {
    sqlx::query_as("SELECT job_id, key, seq, queue, attempt FROM retried_effects ORDER BY id")
        .fetch_all(h.pool())
        .await
        .expect("effects")
}

/// Polls `retried_effects` until it holds `n` rows (the database has no
/// event to await).
async fn wait_retried_effects(h: &PgHarness, n: i64) {
    support::within(async {
        while count(h, "SELECT count(*) FROM retried_effects").await < n {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    })
    .await;
}

/// Several services' partitioned queues on one node, as the scale-out page
/// sets them up: three topologies of 8 quorum partitions at their defaults
/// (delay queues sized to a handler whose retries wait up to 200 ms), two
/// instances each, all six starting at once. Each declares 8 + 5 + 1 quorum
/// queues (at the old defaults, 161), every message runs once from its
/// key's partition (a retried one too, back through the shared delay
/// queues, on its second attempt), each key in order; then each topology
/// deletes what it declared and the node holds nothing of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_partitioned_topologies_declared_at_once_consume_and_delete_what_they_declared() {
    const PARTITIONS: u32 = 8;
    const KEYS: usize = 16;
    const PER_KEY: i64 = 8;
    let h = PgHarness::new().await;
    retried_effects_table(&h).await;
    let topologies: Vec<PartitionedTopology> = (0..3)
        .map(|t| {
            PartitionedTopology::new(unique_prefix(&format!("ptrio{t}")), PARTITIONS)
                .expect("valid test queue name")
                // Should the test die before deleting them.
                .with_expires(Duration::from_secs(600))
        })
        .collect();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut runs = Vec::new();
    let mut assignments = Vec::new();
    for topology in &topologies {
        for _ in 0..2 {
            let source = PartitionedSource::builder(amqp_url(), topology.clone())
                .with_heartbeat(Duration::from_millis(200))
                .build()
                .expect("a partitioned source");
            assignments.push(source.assignment());
            let consumer = Consumer::new(source, h.store(), record_after_delayed_retries);
            let mut stopped = stopped.clone();
            runs.push(tokio::spawn(consumer.run_until(async move {
                let _ = stopped.wait_for(|s| *s).await;
            })));
        }
    }
    // An instance hears the others only once it has declared.
    for rx in &mut assignments {
        wait_assignment(rx, |_| true).await;
    }

    let mut expected = 0;
    for (t, topology) in topologies.iter().enumerate() {
        let publisher = AmqpPublisher::builder(amqp_url())
            .with_partitions(topology.clone())
            .connect()
            .await
            .expect("a RabbitMQ publisher");
        let mut batch: Vec<Job> = jobs(KEYS, 0..PER_KEY)
            .into_iter()
            .map(|j| Job {
                id: format!("{t}-{}", j.id),
                ..j
            })
            .collect();
        // One message each on keys of their own that fails once: its retry
        // goes through the shared delay queues.
        batch.extend((0..KEYS).map(|k| Job {
            id: format!("{t}-r{k}"),
            fail_times: 1,
            ..Job::new(&format!("r{k}"), 0)
        }));
        publish(&publisher, &format!("/{}", topology.name()), &batch).await;
        publisher.close().await;
        expected += batch.len();
    }
    wait_retried_effects(&h, i64::try_from(expected).expect("fits")).await;

    // What each topology holds on the node while it runs.
    for topology in &topologies {
        assert_eq!(
            topology.delay_queues().len(),
            5,
            "delay queues sized to the handler's 200 ms: 16 ms to 256 ms"
        );
        let queues = listed("queues", &format!("{}.", topology.name()));
        assert_eq!(
            queues.len(),
            8 + 5 + 1,
            "partitions, shared delay queues, dead-letter queue: {queues:?}"
        );
        assert!(
            queues.iter().all(|(_, kind)| kind == "quorum"),
            "every queue is a quorum queue: {queues:?}"
        );
    }

    let effects = retried_effects(&h).await;
    let ids: std::collections::BTreeSet<&str> = effects.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(effects.len(), expected, "every message ran");
    assert_eq!(ids.len(), expected, "no message ran twice");
    let mut seqs: BTreeMap<(String, String), Vec<i64>> = BTreeMap::new();
    for (job_id, key, seq, queue, attempt) in &effects {
        let t: usize = job_id
            .split('-')
            .next()
            .and_then(|t| t.parse().ok())
            .expect("the job id starts with its topology");
        assert_eq!(
            *queue,
            topologies[t].queue_for_key(key.as_bytes()),
            "{job_id} ran from its key's partition"
        );
        let retried = key.starts_with('r');
        assert_eq!(
            *attempt,
            if retried { 2 } else { 1 },
            "{job_id}: a retried message runs on its second attempt, the others on their first"
        );
        seqs.entry((t.to_string(), key.clone()))
            .or_default()
            .push(*seq);
    }
    for ((t, key), s) in &seqs {
        assert!(
            s.windows(2).all(|w| w[0] < w[1]),
            "topology {t}, key {key}: out of order {s:?}"
        );
    }

    let _ = stop.send(true);
    for run in runs {
        support::within(run)
            .await
            .expect("join")
            .expect("the consumer stops cleanly");
    }
    let conn = connect().await;
    let channel = conn.create_channel().await.expect("channel");
    for topology in &topologies {
        let left = support::within(topology.delete(&channel))
            .await
            .expect("the topology deletes what it declared");
        assert_eq!(left, 0, "every message was consumed before the delete");
        for what in ["queues", "exchanges"] {
            let listed = listed(what, &format!("{}.", topology.name()));
            assert!(
                listed.is_empty(),
                "{what} of {} left on the node: {listed:?}",
                topology.name()
            );
        }
    }
    let _ = conn.close(200, "done".into()).await;
}

/// A retry copy waiting in a delay queue of the layout before the
/// partitions shared theirs (`<queue>.p1.retry.16ms`, declared as the
/// earlier version declared it) comes back to its partition after an
/// upgrade, with its attempt count, and runs once; the old queue is left on
/// the broker (for the operator, whom a WARN line at start tells).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_in_a_delay_queue_of_the_earlier_layout_comes_back_to_its_partition() {
    use lapin::types::{AMQPValue, FieldTable, LongString};

    let logs = consumer::testing::captured_logs();
    let h = PgHarness::new().await;
    retried_effects_table(&h).await;
    let queue = unique_prefix("pold");
    let topology = PartitionedTopology::new(&queue, 2)
        .expect("valid test queue name")
        .with_expires(Duration::from_secs(600));
    let conn = connect().await;
    let channel = conn.create_channel().await.expect("channel");
    topology
        .declare(&channel)
        .await
        .expect("the topology declared");

    let job = Job {
        id: "old-copy".to_owned(),
        ..Job::new("k-old", 0)
    };
    let partition = topology.queue_for_key(job.key.as_bytes());
    let old = format!("{partition}.retry.16ms");
    let long = |v: &str| AMQPValue::LongString(LongString::from(v.as_bytes().to_vec()));
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), long("quorum"));
    args.insert("x-dead-letter-exchange".into(), long(""));
    args.insert("x-dead-letter-routing-key".into(), long(&partition));
    args.insert("x-dead-letter-strategy".into(), long("at-least-once"));
    args.insert("x-overflow".into(), long("reject-publish"));
    args.insert("x-expires".into(), AMQPValue::LongLongInt(600_000));
    channel
        .queue_declare(
            old.as_str().into(),
            lapin::options::QueueDeclareOptions::durable(),
            args,
        )
        .await
        .expect("the earlier layout's delay queue");
    // As the earlier acker published a copy: to the default exchange, its
    // delay as expiration, the attempt it is for in its header.
    let publisher = AmqpPublisher::builder(amqp_url())
        .connect()
        .await
        .expect("a RabbitMQ publisher");
    publisher
        .republish_to(
            "",
            &old,
            &job.message().with_header("x-consumer-attempt", "2"),
            Some(Duration::from_millis(16)),
        )
        .await
        .expect("the copy confirmed");
    publisher.close().await;

    let source = PartitionedSource::builder(amqp_url(), topology.clone())
        .with_heartbeat(Duration::from_millis(100))
        .build()
        .expect("a partitioned source");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(
        Consumer::new(source, h.store(), record_after_delayed_retries).run_until(async move {
            let _ = stopped.await;
        }),
    );
    wait_retried_effects(&h, 1).await;
    let _ = stop.send(());
    support::within(run).await.expect("join").expect("consumer");

    let effects = retried_effects(&h).await;
    assert_eq!(
        effects,
        [(job.id.clone(), job.key.clone(), 0, partition.clone(), 2)],
        "the copy ran once, from its partition, as the attempt its header says"
    );
    assert_eq!(
        listed("queues", &old),
        [(old.clone(), "quorum".to_owned())],
        "the old delay queue is left for the operator"
    );
    let told = logs.matching(&[
        "WARN",
        &queue,
        "queues=1",
        "delay queues of the layout before the partitions shared theirs",
        "delete them when they are empty",
    ]);
    assert!(!told.is_empty(), "the operator is told at start");
    channel
        .queue_delete(
            old.as_str().into(),
            lapin::options::QueueDeleteOptions::default(),
        )
        .await
        .expect("the old delay queue deleted");
    support::within(topology.delete(&channel))
        .await
        .expect("the topology deleted");
    let _ = conn.close(200, "done".into()).await;
}
