//! Kafka: how long a member's partitions wait when it ends and another
//! process takes its place, for each kind of membership: dynamic, static
//! with a given id (`with_static_membership`, KIP-345), and the derived
//! static id (`<hostname>-<slot>`, `with_derived_membership`).
//!
//! Each run: a consumer process (this program re-run as a child) joins a
//! fresh group on a fresh one-partition topic, receives and acks a first
//! record, lives on for 1.5 s (its offset is auto-committed every second),
//! and ends: SIGKILLed (no commit on close, no LeaveGroup: a crashed pod)
//! or SIGTERMed (it closes: commits, and leaves unless static with a given
//! id). A second record is produced, and a successor `KafkaSource` for the
//! same group connects in this process, with the same id (a restart on the
//! same host: the derived id comes back through its slot) or another (a
//! replaced pod). The time printed runs from that `connect` to the first
//! record its `recv` returns (acked at once, no handler: what is measured
//! is the group, not the runtime).
//!
//! `BENCH_MODES` picks the cases (names in `CASES`; all by default).
//! `BENCH_SESSION_TIMEOUT_MS` sets every member's `session.timeout.ms`
//! (unset: the source's default; it must stay unset under
//! `group.protocol=consumer`, KIP-848, where the broker's
//! `group.consumer.session.timeout.ms` rules). librdkafka's default
//! heartbeat (3 s). Brokers: librdkafka's mock cluster (in this process;
//! the child connects to it over TCP) and the out-of-process broker at
//! `KAFKA_BROKERS` (default 127.0.0.1:9092, Apache Kafka from
//! `scripts/services kafka`). `BENCH_REPS` runs of each (default 3);
//! `BENCH_BROKERS` (`mock,external`), `BENCH_RESTART_TIMEOUT_S` (how long
//! a successor may wait for a record, default 120),
//! `BENCH_CONSUMER_PROPERTIES` (`key=value ...` on every member, e.g.
//! `debug=cgrp` with `BENCH_LOG=debug`), `BENCH_LOG` (an `EnvFilter` for
//! the backend's log on stderr).
//!
//! ```sh
//! scripts/services kafka
//! cargo bench --profile dev --bench kafka_restart --features kafka
//! ```
//!
//! The timings are protocol waits of seconds, not CPU work: the dev
//! profile measures them as well as a release build.
//!
//! What the brokers do, read from their source: librdkafka's mock cluster
//! (2.12.1) finds classic-protocol members by member id only
//! (`rd_kafka_mock_cgrp_classic_member_add`), so a restarted static member
//! is a new member there, and every membership change holds the join for
//! `session.timeout.ms - 1 s`, whatever the case.
//! Apache Kafka 4.4 implements KIP-345: a restarted static member gets its
//! partitions back in well under a second (figures in benches/README.md).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use consumer::kafka::{KafkaSource, Topics};
use consumer::source::Acker as _;
use consumer::source::Source as _;
use rdkafka::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{FutureProducer, FutureRecord};

const CHILD: &str = "--restart-bench-child";

/// Every member's `session.timeout.ms`: `BENCH_SESSION_TIMEOUT_MS`, or
/// the source's default when unset (or `default`).
fn session_timeout_ms() -> Option<String> {
    std::env::var("BENCH_SESSION_TIMEOUT_MS")
        .ok()
        .filter(|v| v != "default")
}

/// How a member joins: `-` dynamic (the default), `+` the derived id,
/// anything else that static id.
async fn source(bootstrap: &str, topic: &str, group: &str, instance: &str) -> KafkaSource {
    let mut b = KafkaSource::builder(
        bootstrap,
        group,
        Topics::new(topic)
            .expect("topic name")
            .without_retry_topic(),
    );
    if let Some(ms) = session_timeout_ms() {
        b = b.with_property("session.timeout.ms", ms);
    }
    for kv in std::env::var("BENCH_CONSUMER_PROPERTIES")
        .unwrap_or_default()
        .split_whitespace()
    {
        let (k, v) = kv
            .split_once('=')
            .expect("BENCH_CONSUMER_PROPERTIES is `key=value ...`");
        b = b.with_property(k, v);
    }
    b = match instance {
        "-" => b.with_dynamic_membership(),
        "+" => b.with_derived_membership(),
        id => b.with_static_membership(id),
    };
    b.connect().await.expect("connect the source")
}

/// The child: consumes and acks, printing `got` per record, until killed;
/// on SIGTERM it closes (commits, and leaves the group unless static).
async fn child(args: &[String]) {
    let [bootstrap, topic, group, instance] = args else {
        panic!("{CHILD} bootstrap topic group instance|-|+");
    };
    let mut s = source(bootstrap, topic, group, instance).await;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    loop {
        tokio::select! {
            _ = term.recv() => break,
            next = s.recv() => {
                let Some((_, acker)) = next.expect("child recv") else { break };
                acker.ack().await.expect("child ack");
                println!("got");
                let _ = std::io::stdout().flush();
            }
        }
    }
    s.close().await;
}

/// How the first instance ends.
#[derive(Clone, Copy)]
enum End {
    /// SIGKILL: no commit on close, no LeaveGroup.
    Killed,
    /// SIGTERM: `close` commits and, for a dynamic member, leaves.
    Closed,
}

/// librdkafka's mock cluster on a thread of its own, alive until the end.
fn mock_cluster() -> (String, std_mpsc::Sender<(String, std_mpsc::Sender<()>)>) {
    let (tx, rx) = std_mpsc::channel::<(String, std_mpsc::Sender<()>)>();
    let (boot_tx, boot_rx) = std_mpsc::channel();
    std::thread::spawn(move || {
        let cluster = MockCluster::new(1).expect("mock cluster");
        let _ = boot_tx.send(cluster.bootstrap_servers());
        while let Ok((topic, done)) = rx.recv() {
            cluster.create_topic(&topic, 1, 1).expect("mock topic");
            let _ = done.send(());
        }
    });
    (boot_rx.recv().expect("mock bootstrap"), tx)
}

enum Broker {
    Mock(std_mpsc::Sender<(String, std_mpsc::Sender<()>)>),
    External,
}

impl Broker {
    async fn create(&self, bootstrap: &str, topic: &str) {
        match self {
            Self::Mock(tx) => {
                let (done, wait) = std_mpsc::channel();
                tx.send((topic.to_owned(), done)).expect("mock thread");
                wait.recv().expect("mock topic created");
            }
            Self::External => Topics::new(topic)
                .expect("topic")
                .without_retry_topic()
                .create(bootstrap, 1, 1)
                .await
                .expect("create the topic"),
        }
    }
}

async fn produce(bootstrap: &str, topic: &str, n: u32) {
    let p: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("producer");
    let payload = format!("record {n}");
    p.send(
        FutureRecord::<str, _>::to(topic).payload(&payload).key("k"),
        Duration::from_secs(10),
    )
    .await
    .expect("produce");
}

fn restart_timeout() -> Duration {
    Duration::from_secs(
        std::env::var("BENCH_RESTART_TIMEOUT_S")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(120),
    )
}

/// One end of an instance and its restart; the seconds from the new
/// `connect` to its first record, `None` past the restart timeout.
async fn run(broker: &Broker, bootstrap: &str, case: &Case, rep: usize) -> Option<f64> {
    let topic = format!("restart-{}-{}", case.name, uuid::Uuid::new_v4().simple());
    let group = format!("g-{topic}");
    let first = case.first.replace("{rep}", &rep.to_string());
    let next = case.next.replace("{rep}", &rep.to_string());
    broker.create(bootstrap, &topic).await;
    let mut child = spawn_child(bootstrap, &topic, &group, &first);
    produce(bootstrap, &topic, 1).await;
    let stdout = child.stdout.take().expect("child stdout");
    let (got_tx, got_rx) = std_mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line == "got" {
                let _ = got_tx.send(());
            }
        }
    });
    got_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the child received its first record within 60 s");
    std::thread::sleep(Duration::from_millis(1500));
    match case.end {
        End::Killed => child.kill().expect("SIGKILL the child"),
        End::Closed => {
            let status = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status()
                .expect("kill -TERM");
            assert!(status.success(), "kill -TERM the child: {status}");
        }
    }
    let _ = child.wait();
    produce(bootstrap, &topic, 2).await;

    let started = Instant::now();
    let mut s = source(bootstrap, &topic, &group, &next).await;
    let Ok(first) = tokio::time::timeout(restart_timeout(), s.recv()).await else {
        s.close().await;
        return None;
    };
    let took = started.elapsed().as_secs_f64();
    let (_, acker) = first.expect("recv").expect("a record");
    acker.ack().await.expect("ack");
    s.close().await;
    Some(took)
}

fn spawn_child(bootstrap: &str, topic: &str, group: &str, instance: &str) -> Child {
    Command::new(std::env::current_exe().expect("this program"))
        .args([CHILD, bootstrap, topic, group, instance])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the child consumer")
}

fn summary(xs: &[Option<f64>]) -> String {
    if xs.is_empty() {
        return "not run".to_owned();
    }
    let list: Vec<String> = xs
        .iter()
        .map(|x| {
            x.map_or_else(
                || format!(">{}", restart_timeout().as_secs()),
                |x| format!("{x:.2}"),
            )
        })
        .collect();
    let done: Vec<f64> = xs.iter().flatten().copied().collect();
    let mean = if done.len() == xs.len() {
        format!(
            "mean {:5.2} s",
            done.iter().sum::<f64>() / done.len() as f64
        )
    } else {
        format!(
            "{} of {} never got a record",
            xs.len() - done.len(),
            xs.len()
        )
    };
    format!("{mean} ({} s)", list.join(", "))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("BENCH_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    }
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == CHILD) {
        return child(&args[i + 1..]).await;
    }
    let reps: usize = std::env::var("BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let modes = std::env::var("BENCH_MODES")
        .unwrap_or_else(|_| CASES.iter().map(|c| c.name).collect::<Vec<_>>().join(","));
    let only = std::env::var("BENCH_BROKERS").unwrap_or_else(|_| "mock,external".to_owned());
    let external = std::env::var("KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".to_owned());
    let (mock_bootstrap, mock) = mock_cluster();
    let mut brokers = Vec::new();
    if only.contains("mock") {
        brokers.push(("mock cluster", mock_bootstrap, Broker::Mock(mock)));
    }
    if only.contains("external") {
        brokers.push(("KAFKA_BROKERS", external, Broker::External));
    }
    println!(
        "restart -> first record, session.timeout.ms={}, {reps} runs each",
        session_timeout_ms().unwrap_or_else(|| "the source's default".to_owned())
    );
    let cases: Vec<&Case> = CASES
        .iter()
        .filter(|c| modes.split(',').any(|m| m == c.name))
        .collect();
    for (label, bootstrap, broker) in &brokers {
        let mut times: Vec<Vec<Option<f64>>> = vec![Vec::new(); cases.len()];
        for rep in 0..reps {
            // Alternating, so a slow moment of the machine hits each.
            for (case, xs) in cases.iter().zip(&mut times) {
                xs.push(run(broker, bootstrap, case, rep).await);
            }
        }
        println!("{label} ({bootstrap}):");
        for (case, xs) in cases.iter().zip(&times) {
            println!("  {:<58} {}", case.label, summary(xs));
        }
    }
}

/// One way an instance ends and is followed: its membership, its
/// successor's (`-` dynamic, `+` derived, else a static id; `{rep}` is
/// the run's number), and the end.
struct Case {
    name: &'static str,
    label: &'static str,
    first: &'static str,
    next: &'static str,
    end: End,
}

/// Every case, by the name `BENCH_MODES` lists.
const CASES: &[Case] = &[
    Case {
        name: "dynamic",
        label: "SIGKILL, restart; dynamic",
        first: "-",
        next: "-",
        end: End::Killed,
    },
    Case {
        name: "static",
        label: "SIGKILL, restart; static, same given id",
        first: "bench-instance-{rep}",
        next: "bench-instance-{rep}",
        end: End::Killed,
    },
    Case {
        name: "derived",
        label: "SIGKILL, restart; derived id, same host",
        first: "+",
        next: "+",
        end: End::Killed,
    },
    Case {
        name: "derived-lost",
        label: "SIGKILL, successor on another host; derived id",
        first: "+",
        next: "other-host-{rep}",
        end: End::Killed,
    },
    Case {
        name: "closed",
        label: "SIGTERM, successor; dynamic",
        first: "-",
        next: "-",
        end: End::Closed,
    },
    Case {
        name: "static-replaced",
        label: "SIGTERM, successor with another id; static, given id",
        first: "bench-old-{rep}",
        next: "bench-new-{rep}",
        end: End::Closed,
    },
    Case {
        name: "derived-replaced",
        label: "SIGTERM, successor on another host; derived id",
        first: "+",
        next: "other-host-{rep}",
        end: End::Closed,
    },
];
