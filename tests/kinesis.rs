//! Consumer processes on Kinesis SIGKILLed while an outside producer sends
//! (needs moto's Kinesis and its python with boto3: `scripts/services
//! sqs`; `KINESIS_ENDPOINT` names another Kinesis, `SQS_PYTHON` another
//! python; and PostgreSQL: `DATABASE_URL`). The consumers' shard leases
//! and checkpoints are in PostgreSQL (`consumer::kinesis_store`), shared
//! by every process.

mod conformance;
mod suite;

type SuiteHarness = crate::conformance::support::PgHarness;
type SuiteTx = consumer::PgTx;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use consumer::kinesis::{KinesisClient, KinesisSource};
use consumer::kinesis_store::SqlLeaseStore;
use consumer::{Consumer, Store};
use rand::RngExt;

use crate::conformance::broker::BrokerHarness;
use crate::conformance::kinesis::{KinesisBroker, endpoint};
use crate::conformance::support::{self, Harness, PgHarness};
use crate::suite::handlers;

const CHILD_ENV: &str = "CONSUMER_KINESIS_KILL_CHILD";
const KILLS: usize = 3;

/// A source of `stream` with its leases in `schema`, and the store there.
async fn source_on(
    stream: &str,
    schema: &str,
    owner: &str,
) -> (
    KinesisSource<SqlLeaseStore<sqlx::Postgres>>,
    Store<sqlx::Postgres>,
) {
    let pool = consumer::testing::FreshSchema::pool_on(schema, 8)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL: {e}"));
    let leases = SqlLeaseStore::new(pool.clone(), "kill", stream);
    leases.migrate().await.expect("the lease table");
    let source = KinesisSource::builder(KinesisClient::local(endpoint()), stream, leases)
        .with_owner(owner)
        .with_lease_duration(Duration::from_secs(2))
        .with_poll_interval(Duration::from_millis(200))
        .with_checkpoint_interval(Duration::from_millis(50))
        .connect()
        .await
        .expect("a Kinesis source");
    (source, Store::new(pool))
}

/// The consumer process the kill test SIGKILLs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "entry point of the child processes of consumers_killed_while_an_outside_producer_sends_..."]
async fn child_consumer_process() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let [stream, schema, owner] = spec.split(' ').collect::<Vec<_>>()[..] else {
        panic!("{CHILD_ENV} must be `stream schema owner`, got {spec:?}");
    };
    let (source, store) = source_on(stream, schema, owner).await;
    Consumer::new(source, store, handlers::work)
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
        // SIGKILL: nothing is released, leases expire.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The python of moto's venv (boto3): `SQS_PYTHON`, else what
/// `scripts/services sqs-python` prints.
fn moto_python() -> String {
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

/// An outside producer (boto3 `put_record`, partition key = the job's key,
/// no envelope) sends 6 keys x 25 jobs to a two-shard stream while
/// consumer processes are SIGKILLed at random points; a last consumer
/// reads the rest. Every job ran once, each key's in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_killed_while_an_outside_producer_sends_lose_nothing_and_keep_key_order() {
    let h = PgHarness::new().await;
    let broker = <KinesisBroker as BrokerHarness>::new(2).await;
    BrokerHarness::prepare(&broker, "kill").await;
    let stream = broker.stream("kill");
    let (keys, per_key) = (6, 25);
    let mut producer = Command::new(moto_python())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/kinesis_producer.py"
        ))
        .args([
            endpoint(),
            stream.clone(),
            keys.to_string(),
            per_key.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the outside producer");
    let total = i64::from(keys * per_key);
    for round in 0..KILLS {
        let child = ChildProcess::spawn(&format!("{stream} {} child-{round}", h.schema));
        let step: i64 = rand::rng().random_range(10..35);
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

    let (source, store) = source_on(&stream, &h.schema, "last").await;
    let last = Consumer::new(source, store, handlers::work);
    support::within(last.run_until(async {
        while effects(&h).await < total {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }))
    .await
    .expect("last consumer");
    let commits = h.effects_in_commit_order("work").await;
    assert_eq!(commits.len() as i64, total, "every job ran exactly once");
    for k in 0..keys {
        let key = format!("k{k}");
        let seqs: Vec<i64> = commits.iter().filter(|e| e.0 == key).map(|e| e.1).collect();
        assert_eq!(
            seqs,
            (0..i64::from(per_key)).collect::<Vec<_>>(),
            "order of {key}"
        );
    }
    let letters = BrokerHarness::dead_letters(&broker, "kill").await;
    assert!(letters.is_empty(), "nothing dead-lettered: {letters:?}");
}
