//! Saga transitions per second on PostgreSQL, against a hand-written loop
//! running the same SQL in the same transactions at the same concurrency.
//!
//! * `framework`: `Consumer` on a `MemoryBroker` running a `SagaHandler`:
//!   per message, `BEGIN`, the dedup claim, the saga's row loaded, the
//!   transition (a plain function), the row saved at the next version
//!   (`INSERT` for a start, `UPDATE ... WHERE version = <loaded>` after),
//!   one outbox event (`Outbox::enqueue`), `COMMIT`, ack.
//! * `hand`: K tokio tasks, each taking its sagas' messages in order:
//!   decode, `BEGIN`, the same claim, `SELECT version, state` of a
//!   hand-made saga table, the new state, `INSERT` or `UPDATE ... WHERE
//!   version = $v` (a conflict would be an error), the same outbox
//!   `enqueue`, `COMMIT`.
//!
//! S sagas of T events each (one start, then adds), published round by
//! round so the sagas move together; K = pool size = the hand loop's tasks
//! (the framework has up to 256 deliveries in flight, its transactions
//! limited by the same K connections). The framework's row carries more
//! than the hand table (pending timeouts, compensation log, step retries,
//! the history of the last transitions, status): that is part of the cost
//! measured. Each run gets a fresh schema; sides alternate in ABBA order and
//! the ratio is the median of the per-pair ratios.
//!
//! ```text
//! cargo bench --bench saga                              # S=500 T=6, K=8 then K=2
//! cargo bench --bench saga -- --sagas 200 --events 10 --keys 4 --rounds 6
//! cargo bench --bench saga -- --side framework --keys 2 --rounds 1  # one side (for callgrind)
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use consumer::saga::{NotFound, SagaBuilder, Step};
use consumer::testing::FreshSchema;
use consumer::{Consumer, MemoryBroker, Message, NewEvent, Outbox, PgStore, Saga};
use cpu_time::ProcessTime;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use tokio::task::JoinSet;

const TOPIC: &str = "accounts";
/// The framework's claim, verbatim (`consumer-core/src/store/postgres.rs`).
const CLAIM_SQL: &str = "INSERT INTO consumer_processed (handler, key, message_id) VALUES ($1, $2, $3) \
     ON CONFLICT (handler, key) DO NOTHING";
const HAND_TABLE: &str = "CREATE TABLE hand_sagas (saga_type TEXT NOT NULL, saga_id TEXT NOT NULL, \
     version BIGINT NOT NULL, state JSONB NOT NULL, PRIMARY KEY (saga_type, saga_id))";

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Deposit {
    account: String,
    cents: i64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Balance {
    cents: i64,
    deposits: u32,
}

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

struct Ledger;

impl Saga for Ledger {
    type State = Balance;
    type Error = Never;
    fn name(&self) -> &'static str {
        "ledger"
    }
}

/// The transition both sides run.
fn apply(b: &mut Balance, d: &Deposit) {
    b.cents += d.cents;
    b.deposits += 1;
}

fn deposit(_: &Ledger, b: &mut Balance, d: Deposit, step: &mut Step<'_>) -> Result<(), Never> {
    apply(b, &d);
    step.send("ledger-events", "Deposited", &d);
    Ok(())
}

fn messages(sagas: usize, events: usize) -> anyhow::Result<Vec<Message>> {
    let mut out = Vec::with_capacity(sagas * events);
    for e in 0..events {
        for s in 0..sagas {
            let d = Deposit {
                account: format!("acct-{s}"),
                cents: 100,
            };
            let kind = if e == 0 { "Opened" } else { "Deposit" };
            out.push(Message::json(kind, &d)?.with_key(d.account.clone()));
        }
    }
    Ok(out)
}

struct Measurement {
    wall: Duration,
    cpu: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Framework,
    Hand,
}

async fn fresh(keys: u32) -> anyhow::Result<FreshSchema> {
    let fresh = FreshSchema::create("bench", keys).await?;
    PgStore::new(fresh.pool.clone())
        .with_extension(consumer::saga::SagaTables)
        .migrate()
        .await?;
    sqlx::query(HAND_TABLE).execute(&fresh.pool).await?;
    let mut held = Vec::new();
    for _ in 0..keys {
        held.push(fresh.pool.acquire().await?);
    }
    drop(held);
    Ok(fresh)
}

async fn run(side: Side, sagas: usize, events: usize, keys: usize) -> anyhow::Result<Measurement> {
    let schema = fresh(u32::try_from(keys)?).await?;
    let msgs = messages(sagas, events)?;
    let measured = match side {
        Side::Framework => framework(&schema.pool, msgs).await?,
        Side::Hand => hand(&schema.pool, msgs, keys).await?,
    };
    check(&schema.pool, side, sagas, events).await?;
    schema.drop_schema().await?;
    Ok(measured)
}

async fn check(pool: &PgPool, side: Side, sagas: usize, events: usize) -> anyhow::Result<()> {
    let table = match side {
        Side::Framework => "consumer_sagas",
        Side::Hand => "hand_sagas",
    };
    let (rows, versions, outbox): (i64, i64, i64) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT (SELECT count(*) FROM {table}), (SELECT coalesce(sum(version), 0)::bigint FROM {table}), \
         (SELECT count(*) FROM outbox_events)"
    )))
    .fetch_one(pool)
    .await?;
    let n = i64::try_from(sagas * events)?;
    if rows != i64::try_from(sagas)? || versions != n || outbox != n {
        bail!(
            "{side:?}: expected {sagas} sagas, {n} transitions and {n} outbox rows, found {rows}, {versions}, {outbox}"
        );
    }
    Ok(())
}

async fn framework(pool: &PgPool, msgs: Vec<Message>) -> anyhow::Result<Measurement> {
    let account = |d: &Deposit| d.account.clone();
    let saga = SagaBuilder::new(Ledger, Outbox::new())
        .on("Opened", account, NotFound::Start, deposit)
        .on(
            "Deposit",
            account,
            NotFound::dead_letter("no account"),
            deposit,
        )
        .build()?;
    let broker = MemoryBroker::new(4);
    for m in msgs {
        broker.publish(TOPIC, m).await?;
    }
    let drained = broker.clone();
    let consumer = Consumer::new(broker.source(TOPIC), PgStore::new(pool.clone()), saga);
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

async fn hand(pool: &PgPool, msgs: Vec<Message>, keys: usize) -> anyhow::Result<Measurement> {
    let mut lanes: Vec<Vec<RawMessage>> = (0..keys).map(|_| Vec::new()).collect();
    for m in msgs {
        let id = m
            .headers
            .get(consumer::envelope::names::ID)?
            .context("Message::json sets ce_id")?
            .to_owned();
        let key = m.key.clone().context("keyed")?;
        let lane = key.trim_start_matches("acct-").parse::<usize>()? % keys;
        lanes[lane].push(RawMessage {
            id,
            payload: m.payload,
        });
    }
    let cpu = ProcessTime::try_now()?;
    let wall = Instant::now();
    let mut tasks = JoinSet::new();
    for lane in lanes {
        let pool = pool.clone();
        tasks.spawn(async move {
            let outbox = Outbox::new();
            for m in lane {
                hand_transition(&pool, &outbox, &m).await?;
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

/// Load, version check, update, outbox insert, dedup insert: one saga
/// transition written by hand.
async fn hand_transition(pool: &PgPool, outbox: &Outbox, m: &RawMessage) -> anyhow::Result<()> {
    let d: Deposit = serde_json::from_slice(&m.payload)?;
    let mut tx = pool.begin().await?;
    let claimed = sqlx::query(CLAIM_SQL)
        .bind("ledger")
        .bind(&m.id)
        .bind(&m.id)
        .execute(&mut *tx)
        .await?;
    if claimed.rows_affected() == 1 {
        let row: Option<(i64, String)> = sqlx::query_as(
            "SELECT version, state::text FROM hand_sagas WHERE saga_type = $1 AND saga_id = $2",
        )
        .bind("ledger")
        .bind(&d.account)
        .fetch_optional(&mut *tx)
        .await?;
        let (version, mut balance) = match row {
            Some((v, state)) => (v, serde_json::from_str::<Balance>(&state)?),
            None => (0, Balance::default()),
        };
        apply(&mut balance, &d);
        let state = serde_json::to_string(&balance)?;
        let saved = if version == 0 {
            sqlx::query(
                "INSERT INTO hand_sagas (saga_type, saga_id, version, state) VALUES ($1, $2, 1, $3::jsonb) \
                 ON CONFLICT DO NOTHING",
            )
            .bind("ledger")
            .bind(&d.account)
            .bind(&state)
            .execute(&mut *tx)
            .await?
        } else {
            sqlx::query(
                "UPDATE hand_sagas SET version = $3 + 1, state = $4::jsonb \
                 WHERE saga_type = $1 AND saga_id = $2 AND version = $3",
            )
            .bind("ledger")
            .bind(&d.account)
            .bind(version)
            .bind(&state)
            .execute(&mut *tx)
            .await?
        };
        if saved.rows_affected() != 1 {
            bail!("a version conflict in the hand loop: keys are not in order");
        }
        let event =
            NewEvent::new("ledger", &d.account, "Deposited", &d)?.with_destination("ledger-events");
        outbox.enqueue(&mut tx, event).await?;
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

/// The machine is shared: a busy one moves every figure, so say how busy.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

struct Args {
    sagas: usize,
    events: usize,
    keys: Vec<usize>,
    rounds: usize,
    /// Only this side (no ratio): for a profiler.
    side: Option<Side>,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        sagas: 500,
        events: 6,
        keys: vec![8, 2],
        rounds: 4,
        side: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || -> anyhow::Result<usize> { Ok(it.next().context("a value")?.parse()?) };
        match arg.as_str() {
            "--sagas" => a.sagas = value()?,
            "--events" => a.events = value()?,
            "--keys" => a.keys = vec![value()?],
            "--rounds" => a.rounds = value()?,
            "--side" => {
                a.side = match it.next().as_deref() {
                    Some("framework") => Some(Side::Framework),
                    Some("hand") => Some(Side::Hand),
                    other => bail!("--side takes framework or hand, not {other:?}"),
                }
            }
            "--bench" => {}
            other => bail!(
                "unknown argument {other:?}; accepted: --sagas S, --events T, --keys K, --rounds R, --side framework|hand"
            ),
        }
    }
    if a.sagas == 0 || a.events == 0 || a.rounds == 0 || a.keys.contains(&0) {
        bail!("--sagas, --events, --keys and --rounds must be at least 1");
    }
    Ok(a)
}

/// `side` alone, each round printed.
fn one_side(rt: &tokio::runtime::Runtime, side: Side, a: &Args) -> anyhow::Result<()> {
    let n = a.sagas * a.events;
    for &keys in &a.keys {
        for _ in 0..a.rounds {
            let m = rt.block_on(run(side, a.sagas, a.events, keys))?;
            println!(
                "{keys:>2} | {side:?}: {:.0} tx/s, {:.1} µs client CPU per transition",
                n as f64 / m.wall.as_secs_f64(),
                m.cpu.as_secs_f64() * 1e6 / n as f64
            );
        }
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let a = args()?;
    let n = a.sagas * a.events;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    println!(
        "saga: {} sagas x {} events = {n} transitions per run on PostgreSQL at {}; {} rounds per side, ABBA",
        a.sagas,
        a.events,
        consumer::testing::database_url(),
        a.rounds
    );
    println!("  load average at start: {}", load_average());
    println!(
        "  framework  Consumer + SagaHandler: claim, load, transition, save at the next version, outbox event"
    );
    println!(
        "  hand       K tasks: the same claim, SELECT version, INSERT/UPDATE ... WHERE version, the same outbox event"
    );
    println!();
    println!(
        "{:>2} | {:>15} {:>9} | {:>13} {:>9} | {:>7} | tx/s per round: framework / hand",
        "K", "framework tx/s", "hand tx/s", "framework µs", "hand µs", "ratio"
    );
    if let Some(side) = a.side {
        return one_side(&rt, side, &a);
    }
    for keys in a.keys {
        let mut fw = Vec::new();
        let mut hd = Vec::new();
        for round in 0..a.rounds {
            if round % 2 == 0 {
                fw.push(rt.block_on(run(Side::Framework, a.sagas, a.events, keys))?);
                hd.push(rt.block_on(run(Side::Hand, a.sagas, a.events, keys))?);
            } else {
                hd.push(rt.block_on(run(Side::Hand, a.sagas, a.events, keys))?);
                fw.push(rt.block_on(run(Side::Framework, a.sagas, a.events, keys))?);
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
        let ratio = median(fw.iter().zip(&hd).map(|(f, h)| tps(f) / tps(h)).collect());
        println!(
            "{:>2} | {:>15.0} {:>9.0} | {:>13.1} {:>9.1} | {:>6.2}x | {} / {}",
            keys,
            median(fw.iter().map(tps).collect()),
            median(hd.iter().map(tps).collect()),
            median(fw.iter().map(cpu).collect()),
            median(hd.iter().map(cpu).collect()),
            ratio,
            rounds_of(&fw),
            rounds_of(&hd),
        );
    }
    println!();
    println!(
        "tx/s and client CPU µs per transition: medians over rounds; ratio: median of the per-pair framework/hand tx/s; target >= 0.9x"
    );
    Ok(())
}
