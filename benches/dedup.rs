//! Throughput of handlers that write through the dedup transaction on
//! PostgreSQL, against a raw sqlx loop running the same SQL in the same
//! transactions at the same concurrency.
//!
//! * `framework`: `Consumer` on a `MemoryBroker` running a `#[handler]` with
//!   `tx: &mut PgTx` that inserts one business row; the expansion claims the
//!   dedup row first, in the same transaction.
//! * `raw`: one tokio task per key, each taking its key's messages in order:
//!   `serde_json` decode, `BEGIN`, the framework's claim (`INSERT INTO
//!   consumer_processed ... ON CONFLICT DO NOTHING`), the same business
//!   `INSERT`, `COMMIT`.
//!
//! With K distinct keys and `max_in_flight` (256) >= K, the framework can
//! run K lanes at once, so the raw side runs K tasks; both use a pool of K
//! connections, opened before the clock starts. Each run gets a fresh
//! schema, dropped afterwards. The machine's disk and load make tx/s drift
//! by a factor of two within minutes, so the sides alternate in ABBA order
//! and the ratio is taken per pair of back-to-back runs.
//!
//! ```text
//! cargo bench --bench dedup                          # 5000 messages; K=1 P=4, K=8 P=4, K=8 P=1
//! BENCH_DEDUP_N=2000 cargo bench --bench dedup       # a smaller run
//! cargo bench --bench dedup -- --keys 8 --partitions 1 --rounds 6
//! DATABASE_URL=postgres://... cargo bench --bench dedup
//! ```

use std::hint::black_box;
use std::time::Instant;

use anyhow::{Context as _, bail};
use consumer::{Consumer, MemoryBroker, Message, PgStore};
use cpu_time::ProcessTime;
use payments::{BUSINESS_SQL, Measurement, Payment, Schema, TOPIC, record};
use sqlx::PgPool;
use tokio::task::JoinSet;

#[path = "payments/mod.rs"]
mod payments;

const DEFAULT_N: usize = 5_000;
/// (keys, broker partitions). `MemoryBroker::default()` has 4 partitions;
/// the 8 keys hash onto them 4/0/1/3, and the source takes from partitions
/// in turn, so with `max_in_flight` messages held the keys of the crowded
/// partition wait for deliveries while the lone key's backlog fills the
/// window. One partition hands the keys out in publication order.
const CONFIGS: [(usize, usize); 3] = [(1, 4), (8, 4), (8, 1)];
/// The framework's claim, verbatim (`consumer-core/src/store/postgres.rs`).
const CLAIM_SQL: &str = "INSERT INTO consumer_processed (handler, key, message_id) VALUES ($1, $2, $3) \
     ON CONFLICT (handler, key) DO NOTHING";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Framework,
    Raw,
}

fn messages(n: usize, keys: usize) -> anyhow::Result<Vec<Message>> {
    (0..n)
        .map(|i| {
            let account = format!("acct-{:02}", i % keys);
            let payment = Payment {
                id: format!("pay-{i}"),
                account: account.clone(),
                seq: i64::try_from(i)?,
                cents: 1200,
            };
            Ok(Message::json("PaymentReceived", &payment)?.with_key(account))
        })
        .collect()
}

async fn run(side: Side, n: usize, keys: usize, partitions: usize) -> anyhow::Result<Measurement> {
    let schema = Schema::create(u32::try_from(keys)?).await?;
    let msgs = messages(n, keys)?;
    let measured = match side {
        Side::Framework => framework(&schema, msgs, partitions).await?,
        Side::Raw => raw(&schema, msgs, keys).await?,
    };
    schema.check(n).await?;
    schema.drop_schema().await?;
    Ok(measured)
}

async fn framework(
    schema: &Schema,
    msgs: Vec<Message>,
    partitions: usize,
) -> anyhow::Result<Measurement> {
    let broker = MemoryBroker::new(partitions);
    for m in msgs {
        broker.publish(TOPIC, m).await?;
    }
    let drained = broker.clone();
    let consumer = Consumer::new(
        broker.source(TOPIC),
        PgStore::new(schema.pool.clone()),
        record,
    );
    let stats = consumer.stats();

    let cpu = ProcessTime::try_now()?;
    let wall = Instant::now();
    consumer
        .run_until(async move { drained.wait_drained(TOPIC).await })
        .await?;
    let measured = Measurement {
        wall: wall.elapsed(),
        cpu: cpu.try_elapsed()?,
    };

    let s = stats.snapshot();
    if s.dead_letters() != 0 || s.retries != 0 {
        bail!("the framework run failed messages: {s:?}");
    }
    Ok(measured)
}

struct RawMessage {
    id: String,
    payload: bytes::Bytes,
}

async fn raw(schema: &Schema, msgs: Vec<Message>, keys: usize) -> anyhow::Result<Measurement> {
    let mut lanes: Vec<Vec<RawMessage>> = (0..keys).map(|_| Vec::new()).collect();
    for (i, m) in msgs.into_iter().enumerate() {
        let id = m
            .headers
            .get(consumer::envelope::names::ID)?
            .context("Message::json sets ce_id")?
            .to_owned();
        lanes[i % keys].push(RawMessage {
            id,
            payload: m.payload,
        });
    }

    let cpu = ProcessTime::try_now()?;
    let wall = Instant::now();
    let mut tasks = JoinSet::new();
    for lane in lanes {
        let pool = schema.pool.clone();
        tasks.spawn(async move {
            for m in lane {
                raw_process(&pool, &m).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    Ok(Measurement {
        wall: wall.elapsed(),
        cpu: cpu.try_elapsed()?,
    })
}

async fn raw_process(pool: &PgPool, m: &RawMessage) -> anyhow::Result<()> {
    let payment: Payment = serde_json::from_slice(&m.payload)?;
    let mut tx = pool.begin().await?;
    let claimed = sqlx::query(CLAIM_SQL)
        .bind("record")
        .bind(&payment.id)
        .bind(&m.id)
        .execute(&mut *tx)
        .await?;
    if claimed.rows_affected() == 1 {
        sqlx::query(BUSINESS_SQL)
            .bind(&payment.id)
            .bind(&payment.account)
            .bind(payment.seq)
            .bind(payment.cents)
            .execute(&mut *tx)
            .await?;
    }
    black_box(claimed.rows_affected());
    tx.commit().await?;
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    }
}

fn main() -> anyhow::Result<()> {
    let mut n = match std::env::var("BENCH_DEDUP_N") {
        Ok(v) => v
            .parse()
            .context("BENCH_DEDUP_N must be a number of messages")?,
        Err(_) => DEFAULT_N,
    };
    let mut rounds = 3;
    let mut workers = 2;
    let mut partitions: Option<usize> = None;
    let mut keys: Option<usize> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--n" => n = args.next().context("--n needs a value")?.parse()?,
            "--rounds" => rounds = args.next().context("--rounds needs a value")?.parse()?,
            "--workers" => workers = args.next().context("--workers needs a value")?.parse()?,
            "--partitions" => {
                partitions = Some(args.next().context("--partitions needs a value")?.parse()?);
            }
            "--keys" => keys = Some(args.next().context("--keys needs a value")?.parse()?),
            // `cargo bench` appends `--bench`.
            "--bench" => {}
            other => bail!(
                "unknown argument {other:?}; accepted: --n N, --rounds R, --workers W, --keys K, --partitions P"
            ),
        }
    }
    if n == 0 || rounds == 0 || workers == 0 || keys == Some(0) || partitions == Some(0) {
        bail!("--n, --rounds, --workers, --keys and --partitions must be at least 1");
    }

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()?;
    println!(
        "dedup: {n} messages per run on PostgreSQL at {}; {rounds} rounds per side, in ABBA order; \
         {workers} tokio workers",
        consumer::testing::database_url()
    );
    println!("  load average at start: {}", load_average());
    println!(
        "  framework  Consumer on MemoryBroker, #[handler] with tx: &mut PgTx: \
         BEGIN; claim INSERT ... ON CONFLICT DO NOTHING; business INSERT; COMMIT; ack"
    );
    println!(
        "  raw        K tokio tasks (one per key, in order), decode, the same BEGIN; claim; business INSERT; COMMIT"
    );
    println!(
        "  K keys = K concurrent transactions; pool of K connections on both sides; \
         P = partitions of the framework's MemoryBroker"
    );
    println!();
    println!(
        "{:>2} {:>2} | {:>15} {:>9} | {:>13} {:>9} | {:>9} | tx/s per round: framework / raw",
        "K", "P", "framework tx/s", "raw tx/s", "framework µs", "raw µs", "ratio"
    );
    let configs = match (keys, partitions) {
        (None, None) => CONFIGS.to_vec(),
        (k, p) => vec![(k.unwrap_or(8), p.unwrap_or(4))],
    };
    for (keys, partitions) in configs {
        let mut fw = Vec::new();
        let mut raw = Vec::new();
        for round in 0..rounds {
            // ABBA order, so a drift in the machine's load favours neither side.
            if round % 2 == 0 {
                fw.push(rt.block_on(run(Side::Framework, n, keys, partitions))?);
                raw.push(rt.block_on(run(Side::Raw, n, keys, partitions))?);
            } else {
                raw.push(rt.block_on(run(Side::Raw, n, keys, partitions))?);
                fw.push(rt.block_on(run(Side::Framework, n, keys, partitions))?);
            }
        }
        let tps = |m: &Measurement| n as f64 / m.wall.as_secs_f64();
        let cpu = |m: &Measurement| m.cpu.as_secs_f64() * 1e6 / n as f64;
        let rounds_of = |v: &[Measurement]| {
            v.iter()
                .map(|m| format!("{:.0}", tps(m)))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let ratio = median(fw.iter().zip(&raw).map(|(f, r)| tps(f) / tps(r)).collect());
        println!(
            "{:>2} {:>2} | {:>15.0} {:>9.0} | {:>13.1} {:>9.1} | {:>8.2}x | {} / {}",
            keys,
            partitions,
            median(fw.iter().map(tps).collect()),
            median(raw.iter().map(tps).collect()),
            median(fw.iter().map(cpu).collect()),
            median(raw.iter().map(cpu).collect()),
            ratio,
            rounds_of(&fw),
            rounds_of(&raw),
        );
    }
    println!();
    println!(
        "tx/s and client CPU µs per transaction: medians over rounds; ratio: median of the \
         per-round framework/raw tx/s (rounds run back to back); target >= 0.85x"
    );
    Ok(())
}

/// The machine is shared: a busy one moves every figure, so say how busy.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}
