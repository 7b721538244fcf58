//! What only SQS shows (needs an SQS emulator: `scripts/services sqs`
//! starts moto on 127.0.0.1:4566, `SQS_ENDPOINT` names another; and
//! PostgreSQL: `DATABASE_URL`): group blocking while a head retries by
//! visibility, the dead letter's packed context, faults moto cannot
//! produce (through the harness's fault-injecting client), the redrive
//! policy checked at start, and consumer processes SIGKILLed while an
//! outside producer (boto3) sends.

mod conformance;
mod suite;

type SuiteHarness = crate::conformance::support::PgHarness;
type SuiteTx = consumer::PgTx;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use consumer::sqs::attributes::DEAD_LETTER_CONTEXT;
use consumer::sqs::client::AwsSqs;
use consumer::sqs::{SqsClient, SqsSource, Topology};
use consumer::testing::LinkProxy;
use consumer::{Consumer, DeadLetterKind, Message, Store};
use rand::RngExt;

use crate::conformance::broker::BrokerHarness;
use crate::conformance::sqs::{SqsBroker, read_in_place};
use crate::conformance::support::{self, Harness, Job, PgHarness};
use crate::suite::handlers;

/// Runs `handler` on `topic` until SQS has nothing left to settle; the
/// runtime's and the source's counters.
async fn drain<H>(
    h: &PgHarness,
    broker: &SqsBroker,
    topic: &str,
    handler: H,
) -> (
    consumer::stats::StatsSnapshot,
    consumer::sqs::SqsStatsSnapshot,
)
where
    H: consumer::Handler<crate::suite::cases::SuiteStore>,
{
    let source = BrokerHarness::connect(broker, topic)
        .await
        .expect("an SQS source");
    let sqs_stats = source.stats();
    let consumer = Consumer::new(source, h.store(), handler).with_max_in_flight(64);
    let stats = consumer.stats();
    let drained = broker.clone();
    let topic_owned = topic.to_owned();
    support::within(consumer.run_until(async move {
        BrokerHarness::wait_drained(&drained, &topic_owned).await;
    }))
    .await
    .expect("consumer");
    (stats.snapshot(), sqs_stats.snapshot())
}

/// A FIFO group whose head fails twice, retried by visibility (mode
/// `redeliver`): the group's later messages wait (given back without
/// running, then received after the head), while another group flows; both
/// keep their order and everything runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_whose_head_is_retrying_blocks_only_that_group() {
    let h = PgHarness::new().await;
    let broker = <SqsBroker as BrokerHarness>::new(1).await;
    let head = Job {
        fail_times: 2,
        ..Job::new("slow", 0)
    };
    let mut all = vec![head.clone()];
    for seq in 1..4 {
        all.push(Job::new("slow", seq));
    }
    for seq in 0..6 {
        all.push(Job::new("fast", seq));
    }
    // Interleaved, as one receive of ten takes them.
    let mut order: Vec<&Job> = Vec::new();
    for i in 0..6 {
        for key in ["slow", "fast"] {
            if let Some(j) = all.iter().filter(|j| j.key == key).nth(i) {
                order.push(j);
            }
        }
    }
    for j in order {
        BrokerHarness::publish(&broker, "t", j.message())
            .await
            .expect("publish");
    }
    let (s, sqs) = drain(&h, &broker, "t", handlers::work_redeliver).await;
    for j in &all {
        assert_eq!(h.effects_of("work_redeliver", &j.id).await, 1, "{}", j.id);
    }
    let commits = h.effects_in_commit_order("work_redeliver").await;
    for key in ["slow", "fast"] {
        let seqs: Vec<i64> = commits.iter().filter(|e| e.0 == key).map(|e| e.1).collect();
        let expected: Vec<i64> = (0..seqs.len() as i64).collect();
        assert_eq!(seqs, expected, "order of {key}");
    }
    let fast_done = commits
        .iter()
        .position(|e| e == &("fast".to_owned(), 5))
        .expect("fast's last");
    let head_done = commits
        .iter()
        .position(|e| e == &("slow".to_owned(), 0))
        .expect("slow's head");
    assert!(
        fast_done < head_done,
        "the other group did not wait for the retrying head: {commits:?}"
    );
    for j in all.iter().filter(|j| j.key == "slow" && j.seq > 0) {
        assert_eq!(
            support::calls(&j.id),
            1,
            "{}: held back without running while the head retried",
            j.seq
        );
    }
    assert_eq!(s.retries, 2);
    assert_eq!(sqs.retried_by_visibility, 2);
    assert!(
        sqs.released >= 1,
        "the group's held messages were given back: {sqs:?}"
    );
    assert_eq!(s.dead_letters(), 0);
}

/// A poison message is dead-lettered on its first attempt, to the FIFO
/// dead-letter queue in its own group, with its context in one JSON
/// attribute, its original attributes beside it, within SQS's ten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_message_is_dead_lettered_on_its_first_attempt_with_its_context() {
    let h = PgHarness::new().await;
    let broker = <SqsBroker as BrokerHarness>::new(1).await;
    let mut poison = Message::raw(&b"{not json"[..])
        .with_key("order-7")
        .with_id("poison-7")
        .with_header("x-tenant", "acme");
    poison
        .headers
        .insert("traceparent", support::SAMPLE_TRACEPARENT);
    BrokerHarness::publish(&broker, "t", poison)
        .await
        .expect("publish");
    let after = Job::new("order-7", 1);
    BrokerHarness::publish(&broker, "t", after.message())
        .await
        .expect("publish");
    let (s, sqs) = drain(&h, &broker, "t", handlers::work).await;
    assert_eq!((s.dead_poison, s.retries, s.processed), (1, 0, 1));
    assert_eq!(sqs.dead_letters, 1);
    assert_eq!(support::calls("poison-7"), 0, "the handler never ran");

    let (_, dlq) = broker.urls("t").await;
    let raw = read_in_place(&*crate::conformance::sqs::real_api(), &dlq).await;
    assert_eq!(raw.len(), 1);
    let letter = &raw[0];
    assert_eq!(
        letter.group_id(),
        Some("order-7"),
        "same group as the original"
    );
    assert!(letter.attributes.len() <= 10);
    let context = letter
        .attributes
        .iter()
        .find(|(n, _)| n == DEAD_LETTER_CONTEXT)
        .expect("the context attribute");
    let json: serde_json::Value = serde_json::from_slice(context.1.bytes()).expect("JSON");
    assert_eq!(json["kind"], "poison");
    assert_eq!(json["attempts"], "1");
    assert_eq!(json["handler"], "work");
    assert_eq!(json["message-id"], "poison-7");
    assert_eq!(json["key"], "order-7");
    assert!(
        json["error"].as_str().is_some_and(|e| e.contains("JSON")),
        "{json}"
    );
    assert!(
        json["destination"]
            .as_str()
            .is_some_and(|d| d.ends_with(".fifo"))
    );
    assert!(letter.attributes.iter().any(|(n, _)| n == "traceparent"));
    assert!(letter.attributes.iter().any(|(n, _)| n == "x-tenant"));
    let dl = BrokerHarness::dead_letter_records(&broker, "t").await;
    assert_eq!(
        (dl[0].kind, dl[0].attempts, dl[0].message_id.as_str()),
        (DeadLetterKind::Poison, 1, "poison-7")
    );
    assert_eq!(&dl[0].payload[..], b"{not json");
}

/// Throttled receives are tried again, and a receive whose answer was lost
/// (SQS took the messages) is tried with the same `ReceiveRequestAttemptId`,
/// which on AWS returns the same messages and receipt handles (moto ignores
/// the id, so the fault plan answers as AWS would). Nothing is lost or run
/// twice, and the group runs in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_or_lost_receive_is_tried_again_with_its_attempt_id() {
    let h = PgHarness::new().await;
    let broker = <SqsBroker as BrokerHarness>::new(1).await;
    let jobs: Vec<Job> = (0..5).map(|i| Job::new("k", i)).collect();
    for j in &jobs {
        BrokerHarness::publish(&broker, "t", j.message())
            .await
            .expect("publish");
    }
    broker.plan().throttle_receives.store(2, Ordering::SeqCst);
    broker
        .plan()
        .lose_receive_answers
        .store(1, Ordering::SeqCst);
    let (s, sqs) = drain(&h, &broker, "t", handlers::work).await;
    for j in &jobs {
        assert_eq!(h.effects_of("work", &j.id).await, 1);
    }
    let seqs: Vec<i64> = h
        .effects_in_commit_order("work")
        .await
        .into_iter()
        .map(|e| e.1)
        .collect();
    assert_eq!(seqs, [0, 1, 2, 3, 4]);
    assert_eq!(sqs.receive_errors, 3, "{sqs:?}");
    let ids = broker.plan().attempt_ids.lock().expect("ids").clone();
    assert!(ids.iter().all(Option::is_some), "FIFO receives carry an id");
    // Two throttled, then one whose answer was lost, then its retry: one id.
    assert_eq!(ids[0], ids[1], "a throttled receive is tried with its id");
    assert_eq!(ids[1], ids[2], "a throttled receive is tried with its id");
    assert_eq!(
        ids[2], ids[3],
        "a receive whose answer was lost is tried with its id"
    );
    assert_ne!(ids[3], ids[4], "a receive that succeeded takes a new one");
    assert_eq!(s.dead_letters(), 0);
}

/// A `DeleteMessageBatch` that fails for one entry tries again that entry
/// only; one lost on the network is tried again whole; every message is
/// deleted once and runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partly_failed_or_lost_delete_retries_only_what_failed() {
    let h = PgHarness::new().await;
    let broker = <SqsBroker as BrokerHarness>::new(1).await;
    let jobs: Vec<Job> = (0..10).map(|i| Job::new(&format!("k{i}"), 0)).collect();
    for j in &jobs {
        BrokerHarness::publish(&broker, "t", j.message())
            .await
            .expect("publish");
    }
    broker.plan().partial_deletes.store(2, Ordering::SeqCst);
    broker.plan().failed_deletes.store(1, Ordering::SeqCst);
    let (s, sqs) = drain(&h, &broker, "t", handlers::work).await;
    for j in &jobs {
        assert_eq!(h.effects_of("work", &j.id).await, 1);
    }
    assert_eq!(
        (s.processed, s.duplicates),
        (10, 0),
        "no delete was lost: {s:?}"
    );
    assert_eq!((sqs.deleted, sqs.delete_failures), (10, 0));
    let deleted = broker.plan().deleted.lock().expect("deleted").clone();
    let mut unique = deleted.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        (deleted.len(), unique.len()),
        (10, 10),
        "each receipt sent to SQS once: the failed entries alone were tried again"
    );
}

/// A connection dropped on the way without a reset (a NAT entry or a load
/// balancer's flow lost): the long poll waiting on it never gets its
/// answer, and the AWS SDK has no read timeout. The call is abandoned once
/// its poll and its limit have passed, counted as a receive error, and the
/// source goes on through a new connection: the message published after
/// the drop runs once. (Without the limit the source waits for ever.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_on_a_black_holed_connection_is_abandoned_within_its_limit_and_the_source_goes_on()
 {
    let h = PgHarness::new().await;
    let broker = <SqsBroker as BrokerHarness>::new(1).await;
    broker.urls("t").await;
    let endpoint = crate::conformance::sqs::endpoint();
    let moto = endpoint
        .split_once("://")
        .map_or(endpoint.as_str(), |(_, r)| r);
    let proxy = LinkProxy::start(moto.trim_end_matches('/'))
        .await
        .expect("a link proxy in front of moto");
    let api = AwsSqs::local(format!("http://{}", proxy.addr()))
        .with_answer_within(Duration::from_secs(2));
    let source = SqsSource::builder(SqsClient::from_api(Arc::new(api)), broker.topology("t"))
        .with_wait_time(Duration::from_secs(1))
        .with_visibility_timeout(Duration::from_secs(6))
        .connect()
        .await
        .expect("an SQS source through the proxy");
    let sqs_stats = source.stats();
    let consumer = Consumer::new(source, h.store(), handlers::work);
    let job = Job::new("k", 0);
    let id = job.id.clone();
    let drained = broker.clone();
    let run = consumer.run_until(async move {
        // The source long-polls through the proxy; the link stalls, so
        // the poll under way (the source always has one) cannot end; its
        // connection, with every other open one, is then black-holed, and
        // new connections go through again.
        while proxy.connections() == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        proxy.stall();
        // The fault's own pace: past the poll's 1 s wait.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        proxy.black_hole();
        proxy.restore();
        BrokerHarness::publish(&drained, "t", job.message())
            .await
            .expect("publish");
        BrokerHarness::wait_drained(&drained, "t").await;
        drop(proxy);
    });
    support::within(run).await.expect("consumer");
    assert_eq!(h.effects_of("work", &id).await, 1);
    let sqs = sqs_stats.snapshot();
    assert!(
        sqs.receive_errors >= 1,
        "the receive on the black-holed connection failed: {sqs:?}"
    );
}

/// Deletes that fail for good (every try lost): the message comes back
/// when its visibility ends, and dedup skips it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_that_never_reaches_sqs_is_redelivered_and_skipped_by_dedup() {
    let h = PgHarness::new().await;
    let broker = <SqsBroker as BrokerHarness>::new(1).await;
    let job = Job::new("k", 0);
    BrokerHarness::publish(&broker, "t", job.message())
        .await
        .expect("publish");
    broker.plan().failed_deletes.store(4, Ordering::SeqCst);
    let (s, sqs) = drain(&h, &broker, "t", handlers::work).await;
    assert_eq!(h.effects_of("work", &job.id).await, 1);
    assert_eq!(support::calls(&job.id), 1);
    assert_eq!((s.processed, s.duplicates), (1, 1), "{s:?}");
    assert_eq!(sqs.delete_failures, 1);
    assert_eq!(sqs.redelivered, 1);
}

/// A handler that runs three times the visibility timeout keeps its
/// message invisible (extended), even when an extension call is lost on
/// the network: it runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_handler_keeps_its_message_through_a_failed_extension() {
    let h = PgHarness::new().await;
    let broker = <SqsBroker as BrokerHarness>::new(1).await;
    let gate = support::Gate::new();
    let job = Job {
        gate: Some(gate.id()),
        ..Job::new("k", 0)
    };
    BrokerHarness::publish(&broker, "t", job.message())
        .await
        .expect("publish");
    broker
        .plan()
        .failed_visibility_changes
        .store(1, Ordering::SeqCst);
    let source = broker
        .builder("t")
        .with_visibility_timeout(Duration::from_secs(3))
        .connect()
        .await
        .expect("source");
    let sqs = source.stats();
    let consumer = Consumer::new(source, h.store(), handlers::work);
    let stats = consumer.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));
    support::within(gate.wait_entered(1)).await;
    // Held past three visibility timeouts: extended, never redelivered.
    support::within(async {
        while sqs.snapshot().extended < 4 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    gate.open();
    support::within(stats.wait_for(|s| s.processed == 1)).await;
    let _ = stop.send(());
    support::within(run).await.expect("join").expect("consumer");
    BrokerHarness::wait_drained(&broker, "t").await;
    assert_eq!(support::calls(&job.id), 1);
    let s = sqs.snapshot();
    assert_eq!((s.redelivered, s.extension_failures), (0, 1), "{s:?}");
}

/// A queue that does not exist, with creation refused, stops the consumer
/// at once with a sentence naming it, instead of a retry loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_queue_is_refused_with_a_sentence_and_never_retried() {
    let client = SqsClient::from_api(crate::conformance::sqs::real_api());
    let name = format!(
        "{}-missing.fifo",
        crate::conformance::sqs::unique_prefix("m")
    );
    let err = SqsSource::builder(
        client,
        Topology::new(&name)
            .expect("valid")
            .without_creating_queues(),
    )
    .connect()
    .await
    .expect_err("refused");
    assert!(!err.is_retriable(), "{err}");
    assert!(err.to_string().contains(&name), "{err}");
}

/// A redrive policy that would move a message before the framework's last
/// attempt (mode `redeliver`) is refused when the consumer starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redrive_policy_counting_too_few_receives_is_refused_at_start() {
    let h = PgHarness::new().await;
    let client = SqsClient::from_api(crate::conformance::sqs::real_api());
    let name = format!("{}-few.fifo", crate::conformance::sqs::unique_prefix("r"));
    let source = SqsSource::builder(
        client,
        Topology::new(&name)
            .expect("valid")
            .with_max_receive_count(5),
    )
    .connect()
    .await
    .expect("source");
    let err = Consumer::new(source, h.store(), handlers::work_redeliver)
        .run_until(std::future::pending())
        .await
        .expect_err("refused");
    assert!(
        matches!(err, consumer::Error::RetryUnsupported { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("maxReceiveCount"), "{err}");
}

// ---------------------------------------------------------------------------
// Consumer processes SIGKILLed while an outside producer sends.

const CHILD_ENV: &str = "CONSUMER_SQS_KILL_CHILD";
const KILLS: usize = 3;

/// The consumer process the kill test SIGKILLs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "entry point of the child processes of consumers_killed_while_an_outside_producer_sends_..."]
async fn child_consumer_process() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let [queue, schema] = spec.split(' ').collect::<Vec<_>>()[..] else {
        panic!("{CHILD_ENV} must be `queue schema`, got {spec:?}");
    };
    let pool = consumer::testing::FreshSchema::pool_on(schema, 8)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL: {e}"));
    let source = SqsSource::builder(
        SqsClient::from_api(crate::conformance::sqs::real_api()),
        Topology::new(queue).expect("queue"),
    )
    .with_wait_time(Duration::from_secs(1))
    .with_visibility_timeout(Duration::from_secs(3))
    .connect()
    .await
    .expect("child source");
    Consumer::new(source, Store::new(pool), handlers::work)
        .with_max_in_flight(16)
        .run_until(std::future::pending())
        .await
        .expect("child consumer");
}

struct ChildProcess(Child);

impl ChildProcess {
    fn spawn(spec: &str) -> Self {
        let child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--ignored",
                "--exact",
                "child_consumer_process",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, spec)
            .env("DATABASE_URL", support::database_url())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the child consumer");
        Self(child)
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The python of moto's venv (boto3): `SQS_PYTHON`, else what
/// `scripts/services sqs-python` prints.
fn sqs_python() -> String {
    if let Ok(p) = std::env::var("SQS_PYTHON") {
        return p;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/services");
    let out = Command::new(script)
        .arg("sqs-python")
        .output()
        .expect("scripts/services sqs-python");
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        out.status.success() && !path.is_empty(),
        "no python with boto3 for the outside producer: run `scripts/services sqs` (it installs moto's venv), or set SQS_PYTHON: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

async fn effects(h: &PgHarness) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM effects WHERE handler = 'work'")
        .fetch_one(h.pool())
        .await
        .expect("count effects")
}

/// An outside producer (boto3, with Number and Binary attributes) sends
/// 8 groups x 25 jobs while consumer processes are SIGKILLed at random
/// points; a last consumer drains the rest. Every job ran once, each
/// group's in order, and nothing was dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_killed_while_an_outside_producer_sends_lose_nothing_and_keep_group_order() {
    let h = PgHarness::new().await;
    let broker = <SqsBroker as BrokerHarness>::new(1).await;
    let (url, dlq) = broker.urls("kill").await;
    let queue = broker.queue("kill");
    let (groups, per_group) = (8, 25);
    let mut producer = Command::new(sqs_python())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/sqs_producer.py"
        ))
        .args([
            crate::conformance::sqs::endpoint(),
            url.clone(),
            groups.to_string(),
            per_group.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the outside producer");
    let spec = format!("{queue} {}", h.schema);
    let total = i64::from(groups * per_group);
    for round in 0..KILLS {
        let child = ChildProcess::spawn(&spec);
        let step: i64 = rand::rng().random_range(15..45);
        let target = effects(&h).await + step;
        support::within(async {
            while effects(&h).await < target.min(total - 1) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        drop(child);
        eprintln!("killed child {round} at {} effects", effects(&h).await);
    }
    let status = producer.wait().expect("the producer ran");
    assert!(status.success(), "the outside producer failed: {status}");

    let source = broker
        .builder("kill")
        .connect()
        .await
        .expect("the last consumer");
    let consumer = Consumer::new(source, h.store(), handlers::work);
    let stats = consumer.stats();
    let drained = broker.clone();
    support::within(consumer.run_until(async move {
        while effects_count(&drained).await {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        BrokerHarness::wait_drained(&drained, "kill").await;
    }))
    .await
    .expect("last consumer");
    let commits = h.effects_in_commit_order("work").await;
    assert_eq!(commits.len() as i64, total, "every job ran exactly once");
    let once: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT job_id FROM effects GROUP BY job_id HAVING count(*) > 1) d",
    )
    .fetch_one(h.pool())
    .await
    .expect("count doubles");
    assert_eq!(once, 0, "no job applied twice");
    if std::env::var("SQS_KILL_DEBUG").is_ok() {
        let rows: Vec<(i64, String, i64, String)> =
            sqlx::query_as("SELECT id, key, seq, message_id FROM effects ORDER BY id")
                .fetch_all(h.pool())
                .await
                .expect("rows");
        for r in rows {
            eprintln!("{r:?}");
        }
    }
    // moto records every receive that handed a group's message out while an
    // earlier one was still on the queue (SQS never does): a broken order
    // is the emulator's when it recorded one for this queue, the source's
    // when it did not.
    let emulator_broke = emulator_order_faults(&url);
    for g in 0..groups {
        let key = format!("g{g}");
        let seqs: Vec<i64> = commits.iter().filter(|e| e.0 == key).map(|e| e.1).collect();
        if seqs != (0..i64::from(per_group)).collect::<Vec<_>>() {
            assert!(
                emulator_broke.is_empty(),
                "order of {key}: {seqs:?}. The emulator handed out a group's message while an earlier one was still on the queue, which SQS never does (scripts/services.d/moto_server.py records it): {emulator_broke:#?}"
            );
            panic!(
                "order of {key}: {seqs:?}. The emulator handed every group out in order (it recorded no receive that broke one): the source broke it"
            );
        }
    }
    if !emulator_broke.is_empty() {
        eprintln!(
            "the emulator broke a group's order, though no commit shows it: {emulator_broke:#?}"
        );
    }
    let letters = read_in_place(&*crate::conformance::sqs::real_api(), &dlq).await;
    assert!(letters.is_empty(), "nothing dead-lettered: {letters:?}");
    eprintln!(
        "{KILLS} kills; the last consumer skipped {} redeliveries",
        stats.snapshot().duplicates
    );
}

/// The receives on the queue at `url` that the emulator recorded as handing
/// a FIFO group's message out ahead of an earlier one (one JSON line each,
/// in `SQS_EMULATOR_AUDIT`, by default where `scripts/services sqs` has
/// moto write it). Empty for an emulator that keeps no such record.
fn emulator_order_faults(url: &str) -> Vec<String> {
    let path = std::env::var("SQS_EMULATOR_AUDIT").unwrap_or_else(|_| {
        let tools = std::env::var("CONSUMER_TOOLS_DIR").unwrap_or_else(|_| {
            format!(
                "{}/.cache/consumer-rs/tools",
                std::env::var("HOME").unwrap_or_default()
            )
        });
        format!("{tools}/services/sqs/fifo-order.log")
    });
    let queue = url.rsplit('/').next().unwrap_or(url);
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&format!("\"queue\": \"{queue}\"")))
        .map(str::to_owned)
        .collect()
}

/// The emulator hands a FIFO group out again in order after its
/// visibility times out, checked with a plain client (boto3, no framework
/// code) against moto in the script's own process, on a clock that moves
/// at every read: moto 5.2.6 as published hands a group's last message out
/// first when the group times out during a receive (what broke the kill
/// test's group order in CI); the launcher the tests run it with does not.
#[test]
fn the_emulator_hands_a_timed_out_fifo_group_out_again_in_order() {
    let probe = |mode: &str| {
        let out = Command::new(sqs_python())
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/scripts/sqs_fifo_probe.py"
            ))
            .arg(mode)
            .output()
            .expect("scripts/sqs_fifo_probe.py runs on moto's python");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "sqs_fifo_probe.py {mode} failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let last = text.lines().last().unwrap_or_default().to_owned();
        let n: u32 = last
            .strip_prefix("inversions ")
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("sqs_fifo_probe.py {mode} printed no count: {text}"));
        (n, text)
    };
    let (moto, text) = probe("moto");
    assert!(
        moto > 0,
        "moto as published kept every group's order, so the launcher's clock fix may no longer be needed (see scripts/services.d/moto_server.py): {text}"
    );
    let (launcher, text) = probe("launcher");
    assert_eq!(
        launcher, 0,
        "the launcher handed a group's later message out first: {text}"
    );
}

/// Whether the queue still has messages (visible or in flight).
async fn effects_count(broker: &SqsBroker) -> bool {
    BrokerHarness::depth(broker, "kill").await > 0
}

/// The queue's counts reach the metrics the alert rules read: ready
/// messages as `consumer.queue.depth` (role `work`), held ones as role
/// `in_flight`, and the dead-letter queue's as
/// `consumer.dead_letter_queue.depth`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_and_dead_letter_queue_depths_are_reported() {
    use consumer::testing::MetricsRecorder;
    use consumer::testing::metrics::total;

    let h = PgHarness::new().await;
    let broker = <SqsBroker as BrokerHarness>::new(1).await;
    // Two poison pills (two letters), and a job held in its handler.
    for i in 0..2 {
        let poison = Message::raw(&b"not json"[..])
            .with_key(format!("p{i}"))
            .with_id(format!("poison-{i}"));
        BrokerHarness::publish(&broker, "t", poison)
            .await
            .expect("publish");
    }
    let gate = support::Gate::new();
    let held = Job {
        gate: Some(gate.id()),
        ..Job::new("held", 0)
    };
    BrokerHarness::publish(&broker, "t", held.message())
        .await
        .expect("publish");
    let recorder = MetricsRecorder::new();
    let source = broker
        .builder("t")
        .with_depth_interval(Duration::from_millis(50))
        .connect()
        .await
        .expect("source");
    let consumer = Consumer::new(source, h.store(), handlers::work).with_meter(recorder.meter());
    let stats = consumer.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(consumer.run_until(async move {
        let _ = stopped.await;
    }));
    support::within(stats.wait_for(|s| s.dead_letters() == 2)).await;
    support::within(gate.wait_entered(1)).await;
    let (queue, dlq) = (
        broker.queue("t"),
        format!("{}-dlq.fifo", broker.queue("t").trim_end_matches(".fifo")),
    );
    let points = support::within(async {
        loop {
            let points = recorder.collect();
            let letters = total(
                &points,
                "consumer.dead_letter_queue.depth",
                &[("messaging.destination.name", dlq.as_str())],
            );
            let in_flight = total(
                &points,
                "consumer.queue.depth",
                &[
                    ("messaging.destination.name", queue.as_str()),
                    ("consumer.queue.role", "in_flight"),
                ],
            );
            if letters == 2.0 && in_flight == 1.0 {
                return points;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let work = total(
        &points,
        "consumer.queue.depth",
        &[
            ("messaging.destination.name", queue.as_str()),
            ("consumer.queue.role", "work"),
        ],
    );
    assert_eq!(work, 0.0, "nothing else is ready");
    assert!(
        points
            .iter()
            .filter(|p| p.name.starts_with("consumer."))
            .all(|p| p.attributes.get("messaging.system").map(String::as_str) == Some("aws_sqs")),
        "every source series names the system"
    );
    gate.open();
    let _ = stop.send(());
    support::within(run).await.expect("join").expect("consumer");
}

/// The outbox relay publishing to a FIFO queue: each aggregate is a group,
/// its events arrive in the order they were committed, the event the relay
/// sends twice (a lost confirm) is stored once, and an aggregate id SQS
/// refuses as a group id (a space, an accent) keeps its order through its
/// hash and reaches the consumer as its key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_relay_keeps_each_aggregates_order_on_a_fifo_queue() {
    use consumer::testing::{Faults, FaultyPublisher};
    use consumer::{NewEvent, Outbox, OutboxRelay};

    let h = PgHarness::new().await;
    h.store().migrate().await.expect("migrations");
    let broker = <SqsBroker as BrokerHarness>::new(1).await;
    broker.urls("outbox").await;
    let outbox = Outbox::new().with_default_destination(broker.queue("outbox"));
    let aggregates = ["order-a", "order-b", "commande é 7"];
    for n in 0..6u32 {
        for agg in aggregates {
            let mut tx = h.pool().begin().await.expect("begin");
            outbox
                .enqueue(
                    &mut tx,
                    NewEvent::new("Order", agg, "Step", &Step { n }).expect("json"),
                )
                .await
                .expect("enqueue");
            tx.commit().await.expect("commit");
        }
    }
    let faults = Faults::new();
    faults.duplicate_next_publishes(1);
    let publisher = consumer::sqs::SqsPublisher::builder(broker.client())
        .connect()
        .await
        .expect("publisher");
    let relay = OutboxRelay::new(
        h.pool().clone(),
        outbox.clone(),
        FaultyPublisher::new(publisher, faults),
    );
    support::within(async {
        loop {
            relay.run_once().await.expect("relay round");
            if outbox.pending(h.pool()).await.expect("pending") == 0 {
                return;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;

    // Counted in place (the relay's duplicate stored once), then read in
    // order per group by the consumer: each aggregate's steps in order.
    assert_eq!(
        BrokerHarness::depth(&broker, "outbox").await,
        18,
        "the duplicated event was stored once"
    );
    // The consumer sees each aggregate id as the key, the hashed one too.
    let (s, _) = drain(&h, &broker, "outbox", record_key).await;
    assert_eq!(s.processed, 18);
    let seen = seen_keys();
    for agg in aggregates {
        let steps: Vec<u32> = seen
            .iter()
            .filter(|(k, _)| k == agg)
            .map(|(_, n)| *n)
            .collect();
        assert_eq!(steps, (0..6).collect::<Vec<_>>(), "{agg}: {seen:?}");
    }
}

/// An outbox event of the relay test.
#[derive(serde::Serialize, serde::Deserialize)]
struct Step {
    n: u32,
}

fn keys_log() -> &'static std::sync::Mutex<Vec<(String, u32)>> {
    static KEYS: std::sync::OnceLock<std::sync::Mutex<Vec<(String, u32)>>> =
        std::sync::OnceLock::new();
    KEYS.get_or_init(Default::default)
}

fn seen_keys() -> Vec<(String, u32)> {
    keys_log().lock().expect("keys").clone()
}

/// Records each delivery's key and step, in the order handled (an
/// aggregate's steps run one after the other in its lane).
#[consumer::handler(name = "record_key", retry = none)]
async fn record_key(step: Step, ctx: &consumer::MessageContext) -> Result<(), std::io::Error> {
    keys_log()
        .lock()
        .expect("keys")
        .push((ctx.key().unwrap_or_default().to_owned(), step.n));
    Ok(())
}
