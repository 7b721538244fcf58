//! What one logical queue costs a RabbitMQ node: the queues, the Raft
//! groups (one per quorum queue) and the broker memory of each topology
//! layout, at the defaults before the delay queues were sized to the
//! handlers and shared by the partitions, and now. Each layout is declared
//! on a node that holds nothing else of this program's, measured, and
//! deleted.
//!
//! `cargo bench --bench amqp_footprint --features amqp` (needs a local
//! RabbitMQ at `AMQP_URL`, default amqp://guest:guest@127.0.0.1:5672/%2f,
//! and `rabbitmqctl`, which reads its queues and memory).
//!
//! The layouts, per logical queue `orders`:
//!
//! * plain, before: the work queue, 19 delay queues (16 ms to the bucket
//!   above the old 1 h default) and the dead-letter queue;
//! * plain, now, handlers whose longest delay is 200 ms: 5 delay queues;
//! * plain, now, handlers that retry in place: none;
//! * partitioned (8 partitions, quorum queues), before: 19 delay queues per
//!   partition;
//! * partitioned, now, 200 ms: 5 delay queues shared by the partitions;
//! * partitioned, now, in place: none.

use std::process::Command;
use std::time::{Duration, Instant};

use consumer::amqp::{PartitionedTopology, QueueType, Topology};
use lapin::options::ExchangeDeleteOptions;
use lapin::{Channel, Connection, ConnectionProperties};

const PARTITIONS: u32 = 8;
/// The delay queues' old default reach.
const OLD_MAX_DELAY: Duration = Duration::from_secs(3600);
/// The longest delay of the handlers in the "now" layouts.
const HANDLERS_LONGEST: Duration = Duration::from_millis(200);
/// The queues expire should the program die before deleting them.
const EXPIRES: Duration = Duration::from_secs(7200);

fn rabbitmqctl(args: &[&str]) -> String {
    let out = Command::new("timeout")
        .arg("120")
        .arg("rabbitmqctl")
        .args(args)
        .output()
        .expect("rabbitmqctl (this benchmark reads the local node's queues and memory with it)");
    assert!(
        out.status.success(),
        "rabbitmqctl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The node's memory after a garbage collection of every process, the
/// median of three readings.
fn memory() -> u64 {
    let mut readings: Vec<u64> = (0..3)
        .map(|_| {
            rabbitmqctl(&[
                "eval",
                "lists:foreach(fun erlang:garbage_collect/1, erlang:processes()), erlang:memory(total).",
            ])
            .trim()
            .parse()
            .expect("a byte count")
        })
        .collect();
    readings.sort_unstable();
    readings[1]
}

/// The node's Erlang process count.
fn processes() -> i64 {
    rabbitmqctl(&["eval", "erlang:system_info(process_count)."])
        .trim()
        .parse()
        .expect("a count")
}

/// Queues whose name starts with `prefix`: (all, quorum, the memory of
/// their processes as RabbitMQ reports it).
fn queues(prefix: &str) -> (usize, usize, u64) {
    let listing = rabbitmqctl(&[
        "-q",
        "list_queues",
        "--no-table-headers",
        "name",
        "type",
        "memory",
    ]);
    let ours: Vec<Vec<&str>> = listing
        .lines()
        .filter(|l| l.starts_with(prefix))
        .map(|l| l.split('\t').collect())
        .collect();
    let quorum = ours.iter().filter(|l| l.get(1) == Some(&"quorum")).count();
    let memory = ours
        .iter()
        .filter_map(|l| l.get(2).and_then(|m| m.trim().parse::<u64>().ok()))
        .sum();
    (ours.len(), quorum, memory)
}

fn sweep(prefix: &str) {
    rabbitmqctl(&[
        "eval",
        &format!(
            "length([rabbit_amqqueue:delete(Q, false, false, <<\"bench\">>) || Q <- rabbit_amqqueue:list(), \
             binary:longest_common_prefix([element(4, amqqueue:get_name(Q)), <<\"{prefix}\">>]) =:= {}]).",
            prefix.len()
        ),
    ]);
}

struct Row {
    layout: &'static str,
    queues: usize,
    quorum: usize,
    queue_memory: u64,
    node_memory: i64,
    processes: i64,
    declare: Duration,
}

/// One layout of a logical queue.
enum Layout {
    Plain(Topology),
    /// The partitioned layout before: a topology per partition.
    PartitionsBefore(Vec<Topology>, String),
    Partitioned(PartitionedTopology),
}

impl Layout {
    /// Declares it; the exchanges to delete after.
    async fn declare(&self, channel: &Channel) -> Vec<String> {
        match self {
            Self::Plain(t) => {
                t.declare(channel).await.expect("declare");
                vec![t.dead_letter_exchange().to_owned()]
            }
            Self::PartitionsBefore(parts, name) => {
                for t in parts {
                    t.declare(channel).await.expect("declare");
                }
                vec![format!("{name}.dlx")]
            }
            Self::Partitioned(t) => {
                t.declare(channel).await.expect("declare");
                let mut exchanges = vec![format!("{}.dlx", t.name())];
                exchanges.extend(t.delay_queues().into_iter().map(|(_, q)| q));
                exchanges
            }
        }
    }
}

/// Declares `layout` (its names start with `prefix`), measures it, deletes
/// it.
async fn measure(channel: &Channel, label: &'static str, prefix: &str, layout: Layout) -> Row {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (before, procs_before) = (memory(), processes());
    let t0 = Instant::now();
    let exchanges = layout.declare(channel).await;
    let declare_time = t0.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (after, procs_after) = (memory(), processes());
    let (queues, quorum, queue_memory) = queues(prefix);
    sweep(prefix);
    for e in exchanges {
        let _ = channel
            .exchange_delete(e.as_str().into(), ExchangeDeleteOptions::default())
            .await;
    }
    Row {
        layout: label,
        queues,
        quorum,
        queue_memory,
        node_memory: i64::try_from(after).unwrap_or(i64::MAX) - i64::try_from(before).unwrap_or(0),
        processes: procs_after - procs_before,
        declare: declare_time,
    }
}

fn plain(name: &str) -> Topology {
    Topology::new(name)
        .expect("a valid name")
        .with_expires(EXPIRES)
}

/// The partitioned layout before: each partition a topology with its own
/// delay queues up to the old default, sharing the dead-letter queue.
fn partitioned_before(name: &str) -> Vec<Topology> {
    (0..PARTITIONS)
        .map(|p| {
            Topology::new(format!("{name}.p{p}"))
                .expect("a valid name")
                .with_dead_letter_exchange(format!("{name}.dlx"))
                .with_dead_letter_queue(format!("{name}.dlq"))
                .with_queue_type(QueueType::Quorum)
                .with_single_active_consumer()
                .with_max_retry_delay(OLD_MAX_DELAY)
                .with_expires(EXPIRES)
        })
        .collect()
}

fn partitioned(name: &str) -> PartitionedTopology {
    PartitionedTopology::new(name, PARTITIONS)
        .expect("a valid name")
        .with_expires(EXPIRES)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let url = std::env::var("AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
    let conn = Connection::connect(&url, ConnectionProperties::default())
        .await
        .unwrap_or_else(|e| panic!("RabbitMQ at {url} (AMQP_URL): {e}"));
    let channel = conn.create_channel().await.expect("a channel");
    let run = uuid::Uuid::new_v4().simple().to_string();
    type Named = (&'static str, fn(&str) -> Layout);
    let layouts: [Named; 6] = [
        ("plain, before (1 h of delay queues)", |n| {
            Layout::Plain(plain(n).with_max_retry_delay(OLD_MAX_DELAY))
        }),
        ("plain, now, handlers to 200 ms", |n| {
            Layout::Plain(plain(n).with_max_retry_delay(HANDLERS_LONGEST))
        }),
        ("plain, now, handlers in place", |n| Layout::Plain(plain(n))),
        ("partitioned x8, before", |n| {
            Layout::PartitionsBefore(partitioned_before(n), n.to_owned())
        }),
        ("partitioned x8, now, handlers to 200 ms", |n| {
            Layout::Partitioned(partitioned(n).with_max_retry_delay(HANDLERS_LONGEST))
        }),
        ("partitioned x8, now, handlers in place", |n| {
            Layout::Partitioned(partitioned(n))
        }),
    ];
    let mut rows = Vec::new();
    for (i, (label, layout)) in layouts.into_iter().enumerate() {
        let name = format!("bench.fp.{}.{i}", &run[..8]);
        rows.push(measure(&channel, label, &name, layout(&name)).await);
    }
    let _ = conn.close(200, "footprint measured".into()).await;

    println!(
        "{:<42} {:>6} {:>6} {:>10} {:>10} {:>9} {:>8}",
        "layout (one logical queue)",
        "queues",
        "Raft",
        "queue mem",
        "node mem",
        "processes",
        "declare"
    );
    let mib = |b: f64| b / (1024.0 * 1024.0);
    for r in &rows {
        println!(
            "{:<42} {:>6} {:>6} {:>6.2} MiB {:>6.1} MiB {:>9} {:>6.2} s",
            r.layout,
            r.queues,
            r.quorum,
            mib(r.queue_memory as f64),
            mib(r.node_memory as f64),
            r.processes,
            r.declare.as_secs_f64()
        );
    }
    println!(
        "queue mem: the memory RabbitMQ reports for the queues' processes; node mem: the node's \
         total after a garbage collection, before and after declaring (noisy by about 1 MiB)"
    );
}
