//! Batched against per-message consumption on PostgreSQL, with the same SQL.
//!
//! * `per message`: `Consumer` on a `MemoryBroker` running a `#[handler]`
//!   with `tx: &mut PgTx` that inserts one business row: one transaction,
//!   one dedup claim and one commit per message.
//! * `batched B`: the same business `INSERT` for each message, from a
//!   `BatchHandler` run as `Batched::new(..).with_max_batch(B)`: one
//!   transaction, one multi-row claim and one commit per batch.
//!
//! Both run 256 keys with `max_in_flight` 256 over a pool of 8 connections
//! opened before the clock starts, on a fresh schema per run, in alternating
//! order (the machine's disk makes commit rates drift within minutes).
//!
//! ```text
//! cargo bench --bench batch                    # 20 000 messages, 2 rounds
//! BENCH_BATCH_N=5000 cargo bench --bench batch
//! ```

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use consumer::batch::{Batch, BatchHandler, Batched};
use consumer::{BoxError, Consumer, MemoryBroker, Message, PgStore, PgTx, RetryPolicy};
use cpu_time::ProcessTime;
use payments::{Measurement, Payment, Schema, TOPIC, insert, record};

#[path = "payments/mod.rs"]
mod payments;

const KEYS: usize = 256;
const CONNECTIONS: u32 = 8;

struct RecordBatch;

impl BatchHandler<PgStore> for RecordBatch {
    type Message = Payment;

    fn name(&self) -> &'static str {
        "record"
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::none()
    }

    fn idempotency_key(&self, payment: &Payment, _: &consumer::MessageContext) -> String {
        payment.id.clone()
    }

    async fn handle_batch(
        &self,
        batch: &mut Batch<Payment>,
        tx: &mut PgTx,
    ) -> Result<(), BoxError> {
        for (_, item) in batch.iter() {
            insert(item.message(), tx).await?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy)]
enum Side {
    PerMessage,
    Batched(usize),
}

impl Side {
    fn label(self) -> String {
        match self {
            Self::PerMessage => "per message".to_owned(),
            Self::Batched(b) => format!("batched, up to {b}"),
        }
    }
}

async fn run(side: Side, n: usize) -> anyhow::Result<Measurement> {
    let schema = Schema::create(CONNECTIONS).await?;
    let broker = MemoryBroker::new(8);
    for i in 0..n {
        let account = format!("acct-{:03}", i % KEYS);
        let payment = Payment {
            id: format!("pay-{i}"),
            account: account.clone(),
            seq: i64::try_from(i)?,
            cents: 1200,
        };
        broker
            .publish(
                TOPIC,
                Message::json("PaymentReceived", &payment)?.with_key(account),
            )
            .await?;
    }
    let drained = broker.clone();
    let store = PgStore::new(schema.pool.clone());
    let cpu = ProcessTime::try_now()?;
    let wall = Instant::now();
    let stats = match side {
        Side::PerMessage => {
            let c = Consumer::new(broker.source(TOPIC), store, record).with_max_in_flight(KEYS);
            let stats = c.stats();
            c.run_until(async move { drained.wait_drained(TOPIC).await })
                .await?;
            stats
        }
        Side::Batched(b) => {
            let handler = Batched::new(RecordBatch)
                .with_max_batch(b)
                .with_max_wait(Duration::from_millis(2));
            let c = Consumer::new(broker.source(TOPIC), store, handler).with_max_in_flight(KEYS);
            let stats = c.stats();
            c.run_until(async move { drained.wait_drained(TOPIC).await })
                .await?;
            stats
        }
    };
    let measured = Measurement {
        wall: wall.elapsed(),
        cpu: cpu.try_elapsed()?,
    };
    let s = stats.snapshot();
    if s.dead_letters() != 0 {
        bail!("{}: {s:?}", side.label());
    }
    schema.check(n).await.with_context(|| side.label())?;
    schema.drop_schema().await?;
    Ok(measured)
}

fn main() -> anyhow::Result<()> {
    let n: usize = std::env::var("BENCH_BATCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let rounds = 2;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let sides = [Side::PerMessage, Side::Batched(50), Side::Batched(10)];
    let mut results: Vec<(Side, Vec<Measurement>)> =
        sides.iter().map(|s| (*s, Vec::new())).collect();
    for round in 0..rounds {
        // Alternate the order between rounds.
        let order: Vec<usize> = if round % 2 == 0 {
            vec![0, 1, 2]
        } else {
            vec![2, 1, 0]
        };
        for i in order {
            let m = rt.block_on(run(results[i].0, n))?;
            results[i].1.push(m);
        }
    }
    println!(
        "batched vs per-message on PostgreSQL: {n} messages, {KEYS} keys, {CONNECTIONS} connections, best of {rounds}"
    );
    println!();
    println!("| side | messages/s | CPU per message | vs per message |");
    println!("|---|---:|---:|---:|");
    let rate = |ms: &[Measurement]| {
        ms.iter()
            .map(|m| n as f64 / m.wall.as_secs_f64())
            .fold(0.0_f64, f64::max)
    };
    let base = rate(&results[0].1);
    for (side, ms) in &results {
        let r = rate(ms);
        let cpu = ms
            .iter()
            .map(|m| m.cpu.as_secs_f64() * 1e6 / n as f64)
            .fold(f64::INFINITY, f64::min);
        println!(
            "| {} | {r:.0} | {cpu:.1} µs | {:.2}× |",
            side.label(),
            r / base
        );
    }
    Ok(())
}
