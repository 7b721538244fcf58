//! The fault campaign, short form (issue 35), once per backend. Needs the
//! local RabbitMQ node (`AMQP_URL`, which the campaign restarts with
//! `rabbitmqctl`), the three-broker Kafka cluster (`scripts/services
//! kafka-cluster`, one node of which it SIGKILLs and starts again), SQS
//! (moto at `SQS_ENDPOINT`), and Debian's PostgreSQL server binaries: each
//! campaign runs a PostgreSQL server of its own, which it crashes and
//! starts again.
//!
//! Two writers commit business rows with outbox events, two relays
//! publish them to the broker (RabbitMQ: a partitioned topology of quorum
//! queues; Kafka: a topic of 4 partitions, replicated three times; SQS: a
//! FIFO queue), three consumers apply them to state rows with their dedup
//! rows (on Kafka, one consumer group), every third effect opening a
//! settlement (a follow-up event through the outbox that starts a saga
//! with a reply timeout, answered by a participant in the same consumers):
//! each a process of its own (this
//! test binary again, on `child_campaign_process`), each behind a link
//! proxy to PostgreSQL, and on RabbitMQ to the broker too. A nemesis
//! SIGKILLs and restarts them, SIGSTOPs consumers past their heartbeat,
//! session or visibility timeout, cuts and stalls their links, crashes
//! PostgreSQL and restarts a broker node, on a schedule drawn from a fixed
//! seed. The history they record is checked for anything lost, applied
//! twice, reordered, applied without a cause, dead-lettered without being
//! poison, whose dedup row disagrees with its effects, or whose
//! settlement's saga ended in a status its events do not explain; the test fails
//! with the checker's report. CONTRIBUTING.md says how to run the long
//! form (`scripts/nemesis`) and read a report.

mod conformance;
mod nemesis;

use std::time::Duration;

use nemesis::run::{Campaign, Outcome, on_kafka, on_rabbitmq, on_sqs};
use nemesis::workload::{self, SPEC_ENV, Spec};

/// A campaign process: its [`Spec`] is in [`SPEC_ENV`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "entry point of the campaign's child processes"]
async fn child_campaign_process() {
    let spec = std::env::var(SPEC_ENV).unwrap_or_else(|_| {
        panic!(
            "{SPEC_ENV} is unset: this is a child process of the campaign, not a test of its own"
        )
    });
    let spec: Spec = serde_json::from_str(&spec).unwrap_or_else(|e| panic!("{SPEC_ENV}: {e}"));
    // Its output goes to `<history dir>/<name>.log`: the framework's logs
    // at the level CAMPAIGN_LOG says (an EnvFilter; `info` by default).
    let filter = tracing_subscriber::EnvFilter::try_from_env("CAMPAIGN_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .init();
    workload::run(spec).await;
}

/// One campaign at a time in this binary: two at once would share the
/// machine's cores (14 processes) and measure each other's load.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn assert_clean(outcome: &Outcome) {
    println!("{}", outcome.report);
    println!(
        "took {:.1} s; history in {}",
        outcome.took.as_secs_f64(),
        outcome.dir.display()
    );
    assert!(
        outcome.settled_after.is_some(),
        "every committed event settled after the faults (history in {}, schema {}):\n{}",
        outcome.dir.display(),
        outcome.schema,
        outcome.report
    );
    assert!(
        outcome.report.anomalies.is_empty(),
        "the campaign found anomalies (history in {}, schema {}):\n{}",
        outcome.dir.display(),
        outcome.schema,
        outcome.report
    );
}

/// The short campaign: a fixed seed, 40 s of faults, writers committing
/// every 10 ms each (about 4 000 events on an idle machine). Seed 6 is
/// one whose 40 s draw every kind of fault on each backend (on RabbitMQ:
/// a PostgreSQL restart, three faults of processes' links to it, two
/// broker restarts, besides kills, pauses and broker link faults).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_campaign_of_seed_6_finds_no_anomaly() {
    let _one = ONE_AT_A_TIME.lock().await;
    let outcome = on_rabbitmq(Campaign {
        seed: 6,
        faults_for: Duration::from_secs(40),
        every: Duration::from_millis(10),
    })
    .await;
    assert_clean(&outcome);
}

/// The short campaign on Kafka: the same seed, length and load; no link
/// faults to the brokers (see [`Menu`](nemesis::schedule::Menu)), pauses
/// of 1.5-12 s against a 6 s session timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_campaign_of_seed_6_finds_no_anomaly() {
    let _one = ONE_AT_A_TIME.lock().await;
    let outcome = on_kafka(Campaign {
        seed: 6,
        faults_for: Duration::from_secs(40),
        every: Duration::from_millis(10),
    })
    .await;
    assert_clean(&outcome);
}

/// The short campaign on SQS (moto): the same seed and length; writers
/// commit every 40 ms each (about 1 750 events: moto's FIFO queues slow
/// down as they fill, its deduplication scanning the queue per message);
/// no link faults to the broker, pauses of 1.5-12 s against a 6 s
/// visibility timeout, no broker restarts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqs_campaign_of_seed_6_finds_no_anomaly() {
    let _one = ONE_AT_A_TIME.lock().await;
    let outcome = on_sqs(Campaign {
        seed: 6,
        faults_for: Duration::from_secs(40),
        every: Duration::from_millis(40),
    })
    .await;
    assert_clean(&outcome);
}

/// The long form, on demand (`scripts/nemesis`): `CAMPAIGN_BACKEND`
/// (`rabbitmq`, the default, `kafka` or `sqs`), `CAMPAIGN_SEED`,
/// `CAMPAIGN_MINUTES`, and `CAMPAIGN_EVERY_MS` (each writer's pause
/// between commits, default 40).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the long campaign: run by scripts/nemesis"]
async fn long_campaign() {
    let var = |name: &str, default: u64| {
        std::env::var(name).ok().map_or(default, |v| {
            v.parse().unwrap_or_else(|e| panic!("{name}={v}: {e}"))
        })
    };
    let campaign = Campaign {
        seed: var("CAMPAIGN_SEED", 1),
        faults_for: Duration::from_secs(60 * var("CAMPAIGN_MINUTES", 10)),
        every: Duration::from_millis(var("CAMPAIGN_EVERY_MS", 40)),
    };
    let outcome = match std::env::var("CAMPAIGN_BACKEND").as_deref() {
        Ok("rabbitmq") | Err(_) => on_rabbitmq(campaign).await,
        Ok("kafka") => on_kafka(campaign).await,
        Ok("sqs") => on_sqs(campaign).await,
        Ok(other) => panic!("CAMPAIGN_BACKEND={other}: expected rabbitmq, kafka or sqs"),
    };
    assert_clean(&outcome);
}
