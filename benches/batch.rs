//! Batched against per-message consumption on PostgreSQL, with the same SQL.
//!
//! * `per message`: `Consumer` on a `MemoryBroker` running a `#[handler]`
//!   with `tx: &mut PgTx` that inserts one business row: one transaction,
//!   one dedup claim and one commit per message.
//! * `batched B`: the same business `INSERT` for each message, from a
//!   `BatchHandler` run as `Batched::new(..).with_max_batch(B)`: one
//!   transaction, one multi-row claim and one commit per batch.
//!
//! * `raw sqlx B` (the baseline for batched mode): a hand-written loop over
//!   the same messages on the same `MemoryBroker` (8 partitions, the same
//!   `Source::recv` and per-message `Acker::ack`), collecting up to B
//!   deliveries or what arrives within the same 2 ms, and running up to 4
//!   batches at once (the batcher's default) on the same pool: decode each
//!   payload, `BEGIN`, the framework's multi-row claim verbatim (`INSERT ...
//!   SELECT FROM unnest(..) ORDER BY key ON CONFLICT DO NOTHING RETURNING
//!   key`, rows in key order), the same business `INSERT` per fresh message,
//!   `COMMIT`, then ack each. It keeps no per-key order (no lanes): two
//!   running batches may hold messages of one account, which the
//!   framework's lanes never allow, so it is the cheaper side by
//!   construction.
//!
//! All run 256 keys with `max_in_flight` 256 over a pool of 8 connections
//! opened before the clock starts, on a fresh schema per run, in alternating
//! order, ABBA (the machine's disk makes commit rates drift within minutes).
//! Rates are the best of the rounds, CPU (this process, all threads) the
//! least; the mean batch size says how full the batches ran.
//!
//! ```text
//! cargo bench --bench batch                    # 20 000 messages, 4 rounds
//! BENCH_BATCH_N=5000 BENCH_BATCH_ROUNDS=2 cargo bench --bench batch
//! BENCH_BATCH_SIZES=50 BENCH_BATCH_PER_MESSAGE=0 BENCH_BATCH_KEYS=1024 cargo bench --bench batch
//! ```

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use consumer::batch::{Batch, BatchHandler, Batched};
use consumer::envelope::Envelope;
use consumer::source::{Acker, Source};
use consumer::{BoxError, Consumer, MemoryBroker, Message, PgStore, PgTx, RetryPolicy};
use cpu_time::ProcessTime;
use payments::{BUSINESS_SQL, Measurement, Payment, Schema, TOPIC, insert, record};
use sqlx::PgPool;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

#[path = "payments/mod.rs"]
mod payments;

/// Keys (accounts) the messages are spread over, and the framework's
/// `max_in_flight` (`BENCH_BATCH_KEYS` overrides it).
const KEYS: usize = 256;
const CONNECTIONS: u32 = 8;
/// The batch wait both batched sides use.
const MAX_WAIT: Duration = Duration::from_millis(2);
/// Batches running at once: `Batched`'s default, and the raw loop's.
const CONCURRENT_BATCHES: usize = 4;
/// The framework's multi-row claim, verbatim (`claim_many` in
/// `consumer-core/src/store/postgres.rs`).
const CLAIM_MANY_SQL: &str = "INSERT INTO consumer_processed (handler, key, message_id) \
     SELECT $1, c.key, c.message_id FROM unnest($2::text[], $3::text[]) AS c(key, message_id) \
     ORDER BY c.key \
     ON CONFLICT (handler, key) DO NOTHING RETURNING key";

/// Counts the batches it runs, for the mean batch size.
struct RecordBatch(Arc<AtomicU64>);

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
        self.0.fetch_add(1, Ordering::Relaxed);
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
    Raw(usize),
}

impl Side {
    fn label(self) -> String {
        match self {
            Self::PerMessage => "per message".to_owned(),
            Self::Batched(b) => format!("batched, up to {b}"),
            Self::Raw(b) => format!("raw sqlx, up to {b}"),
        }
    }
}

/// One run: what it took, and how many batches (transactions) it ran.
struct Run {
    measured: Measurement,
    batches: u64,
}

async fn run(side: Side, n: usize, keys: usize) -> anyhow::Result<Run> {
    let schema = Schema::create_named("bench_batch_h", CONNECTIONS).await?;
    let broker = MemoryBroker::new(8);
    for i in 0..n {
        let account = format!("acct-{:03}", i % keys);
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
    let batches = Arc::new(AtomicU64::new(0));
    let cpu = ProcessTime::try_now()?;
    let wall = Instant::now();
    let stats = match side {
        Side::PerMessage => {
            let c = Consumer::new(broker.source(TOPIC), store, record).with_max_in_flight(keys);
            let stats = c.stats();
            c.run_until(async move { drained.wait_drained(TOPIC).await })
                .await?;
            batches.store(u64::try_from(n)?, Ordering::Relaxed);
            Some(stats)
        }
        Side::Batched(b) => {
            let handler = Batched::new(RecordBatch(Arc::clone(&batches)))
                .with_max_batch(b)
                .with_max_wait(MAX_WAIT)
                .with_max_concurrent_batches(CONCURRENT_BATCHES);
            let c = Consumer::new(broker.source(TOPIC), store, handler).with_max_in_flight(keys);
            let stats = c.stats();
            c.run_until(async move { drained.wait_drained(TOPIC).await })
                .await?;
            Some(stats)
        }
        Side::Raw(b) => {
            let ran = raw(broker.source(TOPIC), &schema.pool, n, b).await?;
            batches.store(ran, Ordering::Relaxed);
            None
        }
    };
    let measured = Measurement {
        wall: wall.elapsed(),
        cpu: cpu.try_elapsed()?,
    };
    if let Some(stats) = stats {
        let s = stats.snapshot();
        if s.dead_letters() != 0 {
            bail!("{}: {s:?}", side.label());
        }
    }
    if broker.depth(TOPIC) != 0 {
        bail!("{}: deliveries left unsettled", side.label());
    }
    schema.check(n).await.with_context(|| side.label())?;
    schema.drop_schema().await?;
    Ok(Run {
        measured,
        batches: batches.load(Ordering::Relaxed),
    })
}

/// The baseline: `n` deliveries of `source` in batches of up to
/// `max_batch` (or what arrived within [`MAX_WAIT`] of the first), up to
/// [`CONCURRENT_BATCHES`] at once; returns how many batches ran.
async fn raw<S: Source>(
    mut source: S,
    pool: &PgPool,
    n: usize,
    max_batch: usize,
) -> anyhow::Result<u64> {
    let running = Arc::new(Semaphore::new(CONCURRENT_BATCHES));
    let mut tasks = JoinSet::new();
    let mut received = 0;
    let mut batches = 0;
    while received < n {
        let first = source.recv().await?.context("the broker closed")?;
        received += 1;
        let deadline = tokio::time::Instant::now() + MAX_WAIT;
        let mut batch = vec![first];
        while batch.len() < max_batch && received < n {
            // `recv` takes a delivery in one step: a timeout loses none.
            match tokio::time::timeout_at(deadline, source.recv()).await {
                Ok(delivery) => {
                    batch.push(delivery?.context("the broker closed")?);
                    received += 1;
                }
                Err(_) => break,
            }
        }
        let permit = Arc::clone(&running).acquire_owned().await?;
        let pool = pool.clone();
        batches += 1;
        tasks.spawn(async move {
            let done = raw_batch(&pool, batch).await;
            drop(permit);
            done
        });
        while let Some(r) = tasks.try_join_next() {
            r??;
        }
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    Ok(batches)
}

/// One batch by hand: decode, `BEGIN`, the multi-row claim in key order,
/// the business `INSERT` of each fresh message, `COMMIT`, ack each.
async fn raw_batch<A: Acker>(pool: &PgPool, batch: Vec<(Arc<Envelope>, A)>) -> anyhow::Result<()> {
    let mut items = Vec::with_capacity(batch.len());
    let mut ackers = Vec::with_capacity(batch.len());
    for (envelope, acker) in batch {
        let payment: Payment = serde_json::from_slice(&envelope.payload)?;
        items.push((payment, envelope));
        ackers.push(acker);
    }
    items.sort_by(|a, b| a.0.id.cmp(&b.0.id));
    let keys: Vec<&str> = items.iter().map(|(p, _)| p.id.as_str()).collect();
    let ids: Vec<&str> = items.iter().map(|(_, e)| e.id.as_str()).collect();
    let mut tx = pool.begin().await?;
    let fresh: Vec<String> = sqlx::query_scalar(CLAIM_MANY_SQL)
        .bind("record")
        .bind(&keys)
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await?;
    let fresh: HashSet<&str> = fresh.iter().map(String::as_str).collect();
    for (payment, _) in &items {
        if fresh.contains(payment.id.as_str()) {
            sqlx::query(BUSINESS_SQL)
                .bind(&payment.id)
                .bind(&payment.account)
                .bind(payment.seq)
                .bind(payment.cents)
                .execute(&mut *tx)
                .await?;
        }
    }
    tx.commit().await?;
    for acker in ackers {
        acker.ack().await?;
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let var = |name: &str, default: usize| -> anyhow::Result<usize> {
        match std::env::var(name) {
            Ok(v) => v
                .parse()
                .with_context(|| format!("{name} must be a number, not {v:?}")),
            Err(_) => Ok(default),
        }
    };
    let n = var("BENCH_BATCH_N", 20_000)?;
    let rounds = var("BENCH_BATCH_ROUNDS", 4)?;
    let keys = var("BENCH_BATCH_KEYS", KEYS)?;
    let per_message = var("BENCH_BATCH_PER_MESSAGE", 1)? != 0;
    let sizes: Vec<usize> = match std::env::var("BENCH_BATCH_SIZES") {
        Ok(v) => v
            .split(',')
            .map(|b| b.trim().parse())
            .collect::<Result<_, _>>()
            .with_context(|| {
                format!("BENCH_BATCH_SIZES must be batch sizes like 50,10, not {v:?}")
            })?,
        Err(_) => vec![50, 10],
    };
    if n == 0 || rounds == 0 || keys == 0 || sizes.contains(&0) {
        bail!("BENCH_BATCH_N, _ROUNDS, _KEYS and _SIZES must be at least 1");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut sides = Vec::new();
    if per_message {
        sides.push(Side::PerMessage);
    }
    for b in sizes {
        sides.extend([Side::Batched(b), Side::Raw(b)]);
    }
    let mut results: Vec<(Side, Vec<Run>)> = sides.iter().map(|s| (*s, Vec::new())).collect();
    for round in 0..rounds {
        // ABBA: forward, then backward, so a drift favours no side.
        let order: Vec<usize> = if round % 2 == 0 {
            (0..sides.len()).collect()
        } else {
            (0..sides.len()).rev().collect()
        };
        for i in order {
            let r = rt.block_on(run(results[i].0, n, keys))?;
            results[i].1.push(r);
        }
    }
    println!(
        "batched vs per-message and raw sqlx on PostgreSQL: {n} messages, {keys} keys, \
         {CONNECTIONS} connections, {CONCURRENT_BATCHES} batches at once, best of {rounds} (ABBA)"
    );
    println!();
    println!(
        "| side | messages/s | CPU per message | mean batch | vs per message | vs raw sqlx, same batch |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let rate = |rs: &[Run]| {
        rs.iter()
            .map(|r| n as f64 / r.measured.wall.as_secs_f64())
            .fold(0.0_f64, f64::max)
    };
    let raw_rate = |b: usize| {
        results
            .iter()
            .find(|(s, _)| matches!(s, Side::Raw(x) if *x == b))
            .map(|(_, rs)| rate(rs))
    };
    let base = results
        .iter()
        .find(|(s, _)| matches!(s, Side::PerMessage))
        .map(|(_, rs)| rate(rs));
    for (side, rs) in &results {
        let r = rate(rs);
        let cpu = rs
            .iter()
            .map(|r| r.measured.cpu.as_secs_f64() * 1e6 / n as f64)
            .fold(f64::INFINITY, f64::min);
        let batches = rs.iter().map(|r| r.batches).sum::<u64>() as f64 / rs.len() as f64;
        let vs_raw = match side {
            Side::Batched(b) => {
                raw_rate(*b).map_or_else(String::new, |raw| format!("{:.2}×", r / raw))
            }
            Side::Raw(_) => "1.00×".to_owned(),
            Side::PerMessage => String::new(),
        };
        println!(
            "| {} | {r:.0} | {cpu:.1} µs | {:.1} | {} | {vs_raw} |",
            side.label(),
            n as f64 / batches,
            base.map_or_else(|| "-".to_owned(), |base| format!("{:.2}×", r / base)),
        );
    }
    println!();
    println!(
        "rates per round (msg/s): {}",
        results
            .iter()
            .map(|(side, rs)| format!(
                "{}: {}",
                side.label(),
                rs.iter()
                    .map(|r| format!("{:.0}", n as f64 / r.measured.wall.as_secs_f64()))
                    .collect::<Vec<_>>()
                    .join(" ")
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );
    Ok(())
}
