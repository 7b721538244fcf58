//! What a router of ten handlers costs against one handler, on the same
//! messages.
//!
//! N JSON messages over 64 keys, their CloudEvents types cycling through
//! ten (`T0` .. `T9`), pre-published to the in-memory broker, consumed with
//! the `MemoryStore` claim (dedup in process memory) and spans off, two
//! tokio workers:
//!
//! * `single`: one no-op `#[handler]` that takes every message
//!   (`Consumer::new`);
//! * `router`: ten no-op `#[handler]`s, one per type, behind a `Router`
//!   (`Consumer::router`): each delivery is routed by its type and its
//!   attempt future is boxed.
//!
//! Printed: messages per second and CPU per message (best of 3 rounds,
//! sides alternating), then with `--callgrind` instructions per message:
//! each side under callgrind over N/5 and N messages, Ir/msg = (Ir(N) -
//! Ir(N/5)) / (N - N/5), which cancels the setup.
//!
//! ```text
//! cargo bench --bench router                      # rates and CPU
//! cargo bench --bench router -- --callgrind       # and instructions per message
//! BENCH_N=5000 cargo bench --bench router -- --callgrind
//! ```

use std::convert::Infallible;
use std::hint::black_box;
use std::process::Command;
use std::time::{Duration, Instant};

use consumer::{Consumer, MemoryBroker, MemoryStore, Message, Router, handler};
use cpu_time::ProcessTime;
use serde::{Deserialize, Serialize};

const TOPIC: &str = "orders";
const KEYS: usize = 64;
const TYPES: [&str; 10] = ["T0", "T1", "T2", "T3", "T4", "T5", "T6", "T7", "T8", "T9"];

#[derive(Debug, Serialize, Deserialize)]
struct Event {
    order: String,
    seq: u64,
    cents: i64,
}

/// Takes every message: what the single side runs.
#[handler(retry = none)]
async fn all(e: Event) -> Result<(), Infallible> {
    black_box(&e);
    Ok(())
}

/// Ten handlers of one shape, one per type.
macro_rules! per_type {
    ($($name:ident => $kind:tt),* $(,)?) => {
        $(
            #[handler(event_type = $kind, retry = none)]
            async fn $name(e: Event) -> Result<(), Infallible> {
                black_box(&e);
                Ok(())
            }
        )*

        fn router() -> anyhow::Result<Router<MemoryStore>> {
            Ok(Router::builder("bench")$(.route($name))*.build()?)
        }
    };
}

per_type! {
    t0 => "T0", t1 => "T1", t2 => "T2", t3 => "T3", t4 => "T4",
    t5 => "T5", t6 => "T6", t7 => "T7", t8 => "T8", t9 => "T9",
}

fn messages(n: usize) -> anyhow::Result<Vec<Message>> {
    (0..n)
        .map(|i| {
            let event = Event {
                order: format!("order-{}", i % KEYS),
                seq: i as u64,
                cents: 1_000 + i as i64,
            };
            Ok(Message::json(TYPES[i % TYPES.len()], &event)?.with_key(event.order.clone()))
        })
        .collect()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Single,
    Router,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Self::Single => "single",
            Self::Router => "router",
        }
    }

    fn parse(s: &str) -> anyhow::Result<Self> {
        match s {
            "single" => Ok(Self::Single),
            "router" => Ok(Self::Router),
            other => anyhow::bail!("unknown side {other:?}: single or router"),
        }
    }
}

/// One run of `side` over `n` messages; returns its wall time and CPU time.
fn run(side: Side, n: usize) -> anyhow::Result<(Duration, Duration)> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let broker = MemoryBroker::new(4);
        for m in messages(n)? {
            broker.publish(TOPIC, m).await?;
        }
        let drained = broker.clone();
        let until = async move { drained.wait_drained(TOPIC).await };
        let (wall, cpu) = (Instant::now(), ProcessTime::now());
        let stats = match side {
            Side::Single => {
                let c = Consumer::new(broker.source(TOPIC), MemoryStore::new(), all);
                let stats = c.stats();
                c.run_until(until).await?;
                stats
            }
            Side::Router => {
                let c = Consumer::router(broker.source(TOPIC), MemoryStore::new(), router()?);
                let stats = c.stats();
                c.run_until(until).await?;
                stats
            }
        };
        let (wall, cpu) = (wall.elapsed(), cpu.elapsed());
        let s = stats.snapshot();
        anyhow::ensure!(
            s.processed == n as u64,
            "{}: processed {} of {n}",
            side.name(),
            s.processed
        );
        Ok((wall, cpu))
    })
}

/// Instructions of one run of `side` over `n` messages, under callgrind.
fn instructions(side: Side, n: usize) -> anyhow::Result<u64> {
    let exe = std::env::current_exe()?;
    let output = Command::new("valgrind")
        .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
        .arg(&exe)
        .args(["--side", side.name(), "--n", &n.to_string()])
        .output()
        .map_err(|e| anyhow::anyhow!("valgrind could not run ({e}): apt-get install valgrind"))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(
        output.status.success(),
        "{} under callgrind failed:\n{stderr}",
        side.name()
    );
    stderr
        .lines()
        .find_map(|l| {
            l.split_once("Collected :")
                .and_then(|(_, v)| v.trim().parse().ok())
        })
        .ok_or_else(|| anyhow::anyhow!("no instruction count in callgrind's output:\n{stderr}"))
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let n: usize = match value("--n") {
        Some(v) => v.parse()?,
        None => std::env::var("BENCH_N")
            .ok()
            .map(|v| v.parse())
            .transpose()?
            .unwrap_or(20_000),
    };
    // One side once: what callgrind runs.
    if let Some(side) = value("--side") {
        run(Side::parse(&side)?, n)?;
        return Ok(());
    }

    println!(
        "router vs single handler: {n} messages, {KEYS} keys, 10 event types, MemoryStore, spans off\n"
    );
    let mut best = [(Duration::MAX, Duration::MAX); 2];
    for _ in 0..3 {
        for (i, side) in [Side::Single, Side::Router].into_iter().enumerate() {
            let (wall, cpu) = run(side, n)?;
            best[i].0 = best[i].0.min(wall);
            best[i].1 = best[i].1.min(cpu);
        }
    }
    println!("{:<8} {:>12} {:>16}", "side", "msg/s", "CPU µs/msg");
    for (i, side) in [Side::Single, Side::Router].into_iter().enumerate() {
        println!(
            "{:<8} {:>12.0} {:>16.2}",
            side.name(),
            n as f64 / best[i].0.as_secs_f64(),
            best[i].1.as_secs_f64() * 1e6 / n as f64
        );
    }
    println!(
        "router / single: {:.2}x msg/s, {:.2}x CPU per message",
        best[0].0.as_secs_f64() / best[1].0.as_secs_f64(),
        best[1].1.as_secs_f64() / best[0].1.as_secs_f64()
    );

    if args.iter().any(|a| a == "--callgrind") {
        let small = (n / 5).max(1);
        println!(
            "\ncallgrind: Ir/msg = (Ir({n}) - Ir({small})) / {}",
            n - small
        );
        let mut per_msg = [0f64; 2];
        for (i, side) in [Side::Single, Side::Router].into_iter().enumerate() {
            let (a, b) = (instructions(side, small)?, instructions(side, n)?);
            per_msg[i] = (b.saturating_sub(a)) as f64 / (n - small) as f64;
            println!(
                "{:<8} {:>14} {:>14} {:>10.0} Ir/msg",
                side.name(),
                a,
                b,
                per_msg[i]
            );
        }
        println!(
            "router / single: {:.3}x instructions per message (target: at most 1.05x)",
            per_msg[1] / per_msg[0]
        );
    }
    Ok(())
}
