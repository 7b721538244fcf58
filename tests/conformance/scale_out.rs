//! What the scale-out tests share on every backend: a handler that
//! records each job with the instance that ran it, the checks that each
//! key's effects ran in order and exactly once, and consumer processes to
//! start, kill and add.

use std::collections::BTreeMap;
use std::time::Duration;

use consumer::{Outgoing, PgTx, Publisher, handler};

use super::support::{self, Job, JobError, PgHarness};

/// The instance id a process records its effects under.
pub fn instance() -> String {
    std::env::var(INSTANCE_ENV).unwrap_or_else(|_| "test".to_owned())
}

pub const INSTANCE_ENV: &str = "CONSUMER_PARTITION_INSTANCE";

/// Records the job with the instance and partition queue that ran it.
#[handler(idempotency_key = job.id)]
pub async fn record_in_order(
    job: Job,
    tx: &mut PgTx,
    ctx: &consumer::MessageContext,
) -> Result<(), JobError> {
    sqlx::query(
        "INSERT INTO part_effects (job_id, key, seq, instance, queue) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(&job.id)
    .bind(&job.key)
    .bind(job.seq)
    .bind(instance())
    .bind(ctx.envelope().origin.channel.as_str())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

pub async fn effects_table(h: &PgHarness) {
    sqlx::query(
        "CREATE TABLE part_effects (id BIGSERIAL PRIMARY KEY, job_id TEXT NOT NULL, \
         key TEXT NOT NULL, seq BIGINT NOT NULL, instance TEXT NOT NULL, queue TEXT NOT NULL, \
         at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())",
    )
    .execute(h.pool())
    .await
    .expect("effects table");
    sqlx::query(
        "CREATE TABLE part_assignments (instance TEXT NOT NULL, partitions TEXT NOT NULL, \
         at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())",
    )
    .execute(h.pool())
    .await
    .expect("assignments table");
}

pub async fn count(h: &PgHarness, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(h.pool())
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Polls the effects table (the database has no event to await).
pub async fn wait_effects(h: &PgHarness, at_least: i64) {
    support::within(async {
        while count(h, "SELECT count(DISTINCT job_id) FROM part_effects").await < at_least {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    })
    .await;
}

/// Every key's sequence numbers, in the order their effects were written.
pub async fn sequences(h: &PgHarness) -> BTreeMap<String, Vec<i64>> {
    let rows: Vec<(String, i64)> = sqlx::query_as("SELECT key, seq FROM part_effects ORDER BY id")
        .fetch_all(h.pool())
        .await
        .expect("effects");
    let mut out: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for (key, seq) in rows {
        out.entry(key).or_default().push(seq);
    }
    out
}

/// Each key's effects ran in publish order, each message exactly once.
pub async fn assert_in_order_exactly_once(h: &PgHarness, keys: usize, per_key: i64) {
    let seqs = sequences(h).await;
    assert_eq!(seqs.len(), keys, "every key has effects");
    for (key, s) in &seqs {
        let expected: Vec<i64> = (0..per_key).collect();
        assert_eq!(
            s, &expected,
            "key {key}: its effects ran out of order, twice, or not at all"
        );
    }
}

pub fn jobs(keys: usize, seqs: std::ops::Range<i64>) -> Vec<Job> {
    let mut out = Vec::new();
    for seq in seqs {
        for k in 0..keys {
            let key = format!("k{k}");
            out.push(Job {
                id: format!("{key}-{seq}"),
                ..Job::new(&key, seq)
            });
        }
    }
    out
}

/// Publishes `jobs` to `destination` in batches, each confirmed.
pub async fn publish(publisher: &impl Publisher, destination: &str, jobs: &[Job]) {
    for chunk in jobs.chunks(500) {
        let batch: Vec<Outgoing> = chunk
            .iter()
            .map(|j| Outgoing {
                destination: destination.to_owned(),
                message: j.message(),
            })
            .collect();
        for r in support::within(publisher.publish(&batch)).await {
            r.expect("publish");
        }
    }
}

/// A consumer process: this test binary run again on one `#[ignore]`d
/// test, `test`, which reads its settings from `env`. Dropping it SIGKILLs it.
pub struct Child(std::process::Child);

impl Child {
    pub fn spawn(test: &str, env: (&str, String), id: &str) -> Self {
        Self::start(Self::command(test, env, id))
    }

    /// [`spawn`](Self::spawn), its output (stdout and stderr: its logs,
    /// and why it panicked) appended to `log`, which outlives the process.
    pub fn spawn_logging_to(
        test: &str,
        env: (&str, String),
        id: &str,
        log: &std::path::Path,
    ) -> Self {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let err = file
            .try_clone()
            .unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let mut command = Self::command(test, env, id);
        command.stdout(file).stderr(err);
        Self::start(command)
    }

    fn command(test: &str, env: (&str, String), id: &str) -> std::process::Command {
        let mut command = std::process::Command::new(std::env::current_exe().expect("test binary"));
        command
            .args([
                "--ignored",
                "--exact",
                test,
                "--nocapture",
                "--test-threads=1",
            ])
            .env(env.0, env.1)
            .env(INSTANCE_ENV, id)
            .stdout(std::process::Stdio::null());
        command
    }

    fn start(mut command: std::process::Command) -> Self {
        Self(command.spawn().expect("spawn a consumer process"))
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// How the process exited, if it has (reaped if so).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.0.try_wait().ok().flatten()
    }

    /// Sends `signal` (`STOP`, `CONT`) with kill(1).
    pub fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([format!("-{signal}"), self.pid().to_string()])
            .status()
            .expect("kill(1)");
        assert!(status.success(), "kill -{signal} {} failed", self.pid());
    }

    /// SIGKILL, then reap.
    pub fn kill(&mut self) {
        let _ = self.0.kill(); // SIGKILL on Unix
        let _ = self.0.wait();
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.kill();
    }
}
