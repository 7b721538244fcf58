//! What the endurance benchmarks (`backlog_memory`, `soak`) share: the
//! consumer runs in a child process of its own (this bench binary run
//! again), so its resident memory is read from `/proc/<pid>/status` apart
//! from the producer's and the broker's.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The variable that makes this binary the consumer child; its value is
/// the child's spec, read by the bench.
pub const CHILD_ENV: &str = "CONSUMER_ENDURANCE_CHILD";

/// Resident memory of a process: now (`VmRSS`) and its peak so far
/// (`VmHWM`), in KiB. `None` once the process is gone.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rss {
    pub now_kib: u64,
    pub peak_kib: u64,
}

impl Rss {
    pub fn of(pid: u32) -> Option<Self> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        };
        Some(Self {
            now_kib: field("VmRSS:")?,
            peak_kib: field("VmHWM:")?,
        })
    }

    pub fn of_self() -> Self {
        Self::of(std::process::id()).unwrap_or_default()
    }
}

pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The consumer child: spawned with `spec` in [`CHILD_ENV`], its stdout
/// read line by line on a thread. Lines `processed N` update
/// [`ChildConsumer::processed`]; the others are kept for the bench to read.
pub struct ChildConsumer {
    child: Child,
    pub processed: Arc<AtomicU64>,
    lines: std::sync::mpsc::Receiver<String>,
}

impl ChildConsumer {
    pub fn spawn(spec: &str) -> Self {
        let mut child = Command::new(std::env::current_exe().expect("this bench binary"))
            .env(CHILD_ENV, spec)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the consumer child");
        let stdout: ChildStdout = child.stdout.take().expect("piped stdout");
        let processed = Arc::new(AtomicU64::new(0));
        let (tx, lines) = std::sync::mpsc::channel();
        let count = Arc::clone(&processed);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(n) = line.strip_prefix("processed ") {
                    if let Ok(n) = n.trim().parse() {
                        count.store(n, Ordering::Relaxed);
                    }
                } else if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            processed,
            lines,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn rss(&self) -> Option<Rss> {
        Rss::of(self.pid())
    }

    /// The child's next line other than a progress line (blocks).
    pub fn line(&self) -> String {
        self.lines
            .recv()
            .expect("the consumer child ended before it said what was expected")
    }

    /// Every line the child prints from now on, other than progress lines
    /// (for a thread that prints them as they come).
    pub fn lines_handle(&mut self) -> std::sync::mpsc::Receiver<String> {
        std::mem::replace(&mut self.lines, std::sync::mpsc::channel().1)
    }

    /// Lines the child printed that were not read yet.
    pub fn pending_lines(&self) -> Vec<String> {
        self.lines.try_iter().collect()
    }

    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn wait(mut self) -> std::process::ExitStatus {
        self.child.wait().expect("wait for the consumer child")
    }
}

impl Drop for ChildConsumer {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Prints the child's progress: `processed N` every 500 ms while it runs.
pub fn report_progress(stats: Arc<consumer::Stats>) {
    tokio::spawn(async move {
        loop {
            println!("processed {}", stats.snapshot().processed);
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    });
}

pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The positional arguments after `cargo bench --bench NAME --`, without
/// the `--bench` flag cargo passes to every benchmark binary.
pub fn args() -> Vec<String> {
    std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect()
}

/// Deletes a benchmark's queues (work, dead-letter, delay), so a million
/// messages do not outlive the run on a shared RabbitMQ.
pub async fn delete_queues(url: &str, topology: &consumer::amqp::Topology) {
    let Ok(conn) = lapin::Connection::connect(url, lapin::ConnectionProperties::default()).await
    else {
        return;
    };
    if let Ok(channel) = conn.create_channel().await {
        let mut queues = vec![
            topology.queue().to_owned(),
            topology.dead_letter_queue().to_owned(),
        ];
        queues.extend(topology.delay_queues().into_iter().map(|(_, q)| q));
        for q in queues {
            let _ = channel
                .queue_delete(q.as_str().into(), Default::default())
                .await;
        }
    }
    let _ = conn.close(200, "benchmark done".into()).await;
}

/// Deletes a benchmark's topic and its dead-letter topic.
pub async fn delete_topics(brokers: &str, topic: &str) {
    use rdkafka::admin::{AdminClient, AdminOptions};
    if let Ok(admin) = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create::<AdminClient<rdkafka::client::DefaultClientContext>>()
    {
        let dlq = format!("{topic}.dlq");
        let _ = admin
            .delete_topics(&[topic, dlq.as_str()], &AdminOptions::new())
            .await;
    }
}

/// The RabbitMQ both benches use: `AMQP_URL`, else the local node.
pub fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

/// The Kafka both benches use: `KAFKA_BROKERS`, else the local broker.
pub fn kafka_brokers() -> String {
    std::env::var("KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".to_owned())
}

/// The RabbitMQ topology of a run's queue: short retry delays, queues that
/// outlive a long run by an hour at most.
pub fn amqp_topology(queue: &str) -> consumer::amqp::Topology {
    consumer::amqp::Topology::new(queue)
        .expect("queue name")
        .with_max_retry_delay(std::time::Duration::from_millis(256))
        .with_expires(std::time::Duration::from_secs(3600))
}

/// The Kafka topics of a run's topic: no retry topic (the handlers do not
/// fail).
pub fn kafka_topics(topic: &str) -> consumer::kafka::Topics {
    consumer::kafka::Topics::new(topic)
        .expect("topic name")
        .without_retry_topic()
}
