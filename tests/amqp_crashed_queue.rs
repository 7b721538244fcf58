//! A partition queue that RabbitMQ reports crashed (needs a local RabbitMQ
//! node that `rabbitmqctl` reaches, and PostgreSQL): the test crashes a
//! classic partition queue of its own for good, as rabbitmq-server#5460
//! does (its process killed more often than its supervisor restarts it),
//! and checks that the source says so once, in one ERROR line and the
//! `consumer.queue.crashed` gauge, keeps consuming its other partition,
//! tries the crashed one again with backoff, and consumes it again once an
//! operator has deleted it.

mod conformance;

use std::io::Write;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use consumer::amqp::{AmqpPublisher, PartitionedSource, PartitionedTopology, QueueType};
use consumer::testing::MetricsRecorder;
use consumer::testing::metrics::total;
use consumer::{Consumer, Outgoing, Publisher};

use crate::conformance::amqp::{amqp_url, connect, unique_prefix};
use crate::conformance::scale_out::{effects_table, record_in_order};
use crate::conformance::support::{self, Harness, Job, PgHarness};

/// What the source logged, line by line.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Log {
    fn lines(&self, f: impl Fn(&str) -> bool) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().expect("log"))
            .lines()
            .filter(|l| f(l))
            .map(str::to_owned)
            .collect()
    }
}

/// Kills the process of classic queue `queue` until its supervisor gives
/// up: RabbitMQ then answers every use of it with `NOT_FOUND … has crashed
/// and failed to restart`, as after the crash of rabbitmq-server#5460.
fn crash_for_good(queue: &str) {
    let script = format!(
        "Name = rabbit_misc:r(<<\"/\">>, queue, <<\"{queue}\">>), \
         Kill = fun() -> {{ok, Q}} = rabbit_amqqueue:lookup(Name), P = amqqueue:get_pid(Q), \
           R = erlang:monitor(process, P), exit(P, crash_for_test), \
           receive {{'DOWN', R, process, P, _}} -> ok after 5000 -> timeout end end, \
         [begin Kill(), timer:sleep(100) end || _ <- lists:seq(1, 8)], \
         {{ok, Q2}} = rabbit_amqqueue:lookup(Name), amqqueue:get_state(Q2)."
    );
    let out = Command::new("rabbitmqctl")
        .args(["eval", &script])
        .output()
        .unwrap_or_else(|e| {
            panic!("rabbitmqctl could not run ({e}): this test needs a local RabbitMQ node and its rabbitmqctl")
        });
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.trim() == "crashed",
        "rabbitmqctl eval did not leave {queue} crashed: {said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn publish_to(publisher: &AmqpPublisher, queue: &str, key: &str, seqs: std::ops::Range<i64>) {
    let batch: Vec<Outgoing> = seqs
        .map(|seq| Outgoing {
            destination: format!("/{queue}"),
            message: Job {
                id: format!("{key}-{seq}"),
                ..Job::new(key, seq)
            }
            .message(),
        })
        .collect();
    for r in support::within(publisher.publish(&batch)).await {
        r.expect("publish");
    }
}

async fn processed(h: &PgHarness, key: &str) -> i64 {
    sqlx::query_scalar("SELECT count(DISTINCT job_id) FROM part_effects WHERE key = $1")
        .bind(key)
        .fetch_one(h.pool())
        .await
        .expect("effects")
}

/// Polls the effects table until `key` has `n` effects.
async fn wait_processed(h: &PgHarness, key: &str, n: i64) {
    support::within(async {
        while processed(h, key).await < n {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_partition_queue_is_reported_once_retried_and_consumed_again() {
    let log = Log::default();
    let writer = log.clone();
    tracing_subscriber::fmt()
        .with_env_filter("consumer::amqp=debug")
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .init();
    drop(connect().await);
    let h = PgHarness::new().await;
    effects_table(&h).await;
    let queue = unique_prefix("crashed");
    let topology = PartitionedTopology::new(&queue, 2)
        .expect("valid")
        .with_queue_type(QueueType::Classic)
        .with_max_retry_delay(Duration::from_millis(64))
        .with_expires(Duration::from_secs(600));
    let (p0, p1) = (topology.partition_queue(0), topology.partition_queue(1));
    // A key of each partition, to publish to it through the logical queue.
    let key_of = |queue: &str| {
        (0..)
            .map(|i| format!("k{i}"))
            .find(|k| topology.queue_for_key(k.as_bytes()) == queue)
            .expect("some key lands there")
    };
    let (k0, k1) = (key_of(&p0), key_of(&p1));
    let publisher = AmqpPublisher::builder(amqp_url())
        .with_partitions(topology.clone())
        .connect()
        .await
        .expect("a RabbitMQ publisher");
    let recorder = MetricsRecorder::new();
    let source = PartitionedSource::builder(amqp_url(), topology.clone())
        .with_heartbeat(Duration::from_millis(100))
        .with_depth_interval(Duration::from_millis(50))
        .build()
        .expect("a partitioned source");
    let consumer = Consumer::new(source, h.store(), record_in_order).with_meter(recorder.meter());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));
    publish_to(&publisher, &queue, &k0, 0..5).await;
    publish_to(&publisher, &queue, &k1, 0..5).await;
    wait_processed(&h, &k0, 5).await;
    wait_processed(&h, &k1, 5).await;

    crash_for_good(&p0);
    let crashed = |points: &[consumer::testing::metrics::Point]| {
        total(
            points,
            "consumer.queue.crashed",
            &[("messaging.destination.name", p0.as_str())],
        )
    };
    // The gauge is read at each collection: poll it.
    support::within(async {
        while crashed(&recorder.collect()) != 1.0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // The other partition goes on.
    publish_to(&publisher, &queue, &k1, 5..10).await;
    wait_processed(&h, &k1, 10).await;
    assert_eq!(
        total(
            &recorder.collect(),
            "consumer.queue.crashed",
            &[("messaging.destination.name", p1.as_str())]
        ),
        0.0,
        "the healthy partition reads 0"
    );
    // It is tried again (a debug line each time), and said at ERROR once.
    let retried = || log.lines(|l| l.contains("queue still crashed") && l.contains(&p0));
    support::within(async {
        while retried().len() < 2 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let errors = log.lines(|l| l.contains("ERROR") && l.contains(&p0));
    assert_eq!(errors.len(), 1, "one ERROR line for the crash: {errors:#?}");
    assert!(
        errors[0].contains("has crashed and failed to restart"),
        "it quotes RabbitMQ: {}",
        errors[0]
    );

    // An operator deletes the crashed queue: the source declares it anew
    // and consumes it again.
    let conn = connect().await;
    let channel = conn.create_channel().await.expect("channel");
    channel
        .queue_delete(
            p0.as_str().into(),
            lapin::options::QueueDeleteOptions::default(),
        )
        .await
        .expect("a crashed queue can be deleted");
    let _ = conn.close(200, "deleted".into()).await;
    support::within(async {
        while crashed(&recorder.collect()) != 0.0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    publish_to(&publisher, &queue, &k0, 5..10).await;
    wait_processed(&h, &k0, 10).await;
    assert_eq!(
        log.lines(|l| l.contains("ERROR") && l.contains(&p0)).len(),
        1,
        "still one ERROR line"
    );
    assert!(
        !log.lines(|l| l.contains("consumed again after its crash") && l.contains(&p0))
            .is_empty(),
        "the recovery is said"
    );
    let _ = stop.send(());
    support::within(run).await.expect("join").expect("consumer");
}
