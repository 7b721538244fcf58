//! One campaign from start to report: a PostgreSQL server of its own (to
//! crash and start again) with a fresh schema, a queue (or topic), link
//! proxies to PostgreSQL for every process and to the broker where the
//! backend allows them (per process on RabbitMQ and SQS, per node on
//! Kafka), the workload's processes, the nemesis' schedule
//! applied to them, a wait until every committed event has settled, and
//! the checker's report on the history.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use consumer::testing::{FreshSchema, LinkProxy};

use super::checker::{self, Report};
use super::history::{self, JsonLines, Kind};
use super::schedule::{Fault, Menu, Targets, plan};
use super::workload::{self, AGGREGATES_PER_WRITER, Backend, HANDLER, Role, SPEC_ENV, Spec};
use crate::conformance::amqp::{
    StartAppOnDrop, connect, rabbitmqctl, through, unique_prefix, upstream,
};
use crate::conformance::kafka::{
    CLUSTER, bootstrap_through_proxies, check_proxied_listeners, delete_topics, kill_cluster_node,
    node_link_proxies,
};
use crate::conformance::private_postgres::PrivatePostgres;
use crate::conformance::scale_out::Child;

/// The test the children run.
pub const CHILD_TEST: &str = "child_campaign_process";

/// How long the settled-wait may last after the faults end before the
/// checker is run anyway (and reports what never settled as lost).
const SETTLE_LIMIT: Duration = Duration::from_secs(120);

/// What a campaign runs.
#[derive(Debug, Clone, Copy)]
pub struct Campaign {
    pub seed: u64,
    /// How long the nemesis injects faults; the writers' load spans it.
    pub faults_for: Duration,
    /// Pause between a writer's commits.
    pub every: Duration,
}

/// The outcome: the report, the history's directory, and how long it took.
pub struct Outcome {
    pub report: Report,
    /// How long after the last fault every committed event had settled
    /// (applied, or dead-lettered if poison); `None` if some had not
    /// within [`SETTLE_LIMIT`].
    pub settled_after: Option<Duration>,
    /// Where the run's database is: the schema, on a private server
    /// whose data directory is kept if it found anomalies.
    pub schema: String,
    pub dir: PathBuf,
    pub took: Duration,
}

struct Fleet {
    specs: BTreeMap<String, Spec>,
    children: BTreeMap<String, Child>,
    /// Each relay's and consumer's link to the broker, where the backend
    /// allows one.
    links: BTreeMap<String, LinkProxy>,
    /// Each process's link to PostgreSQL.
    database_links: BTreeMap<String, LinkProxy>,
    /// Every client's links to each broker node, where the backend
    /// allows them (Kafka: node 1 first).
    node_links: Vec<LinkProxy>,
    database: PrivatePostgres,
    backend: Backend,
    /// Writers that finished their load and exited by themselves.
    done: Vec<String>,
}

impl Fleet {
    fn spawn(spec: &Spec) -> Child {
        let json = serde_json::to_string(spec).expect("a spec serialises");
        let log = spec.dir.join(format!("{}.log", spec.name));
        Child::spawn_logging_to(CHILD_TEST, (SPEC_ENV, json), &spec.name, &log)
    }

    fn restart(&mut self, name: &str) {
        if let Some(mut c) = self.children.remove(name) {
            c.kill();
        }
        self.children
            .insert(name.to_owned(), Self::spawn(&self.specs[name]));
    }

    /// Restarts a relay or consumer that exited by itself (it panicked:
    /// its stderr says why), and says which.
    fn revive(&mut self) -> Vec<String> {
        let exited: Vec<(String, bool)> = self
            .children
            .iter_mut()
            .filter_map(|(n, c)| c.exited().map(|s| (n.clone(), s.success())))
            .collect();
        let mut revived = Vec::new();
        for (name, success) in exited {
            if success && self.specs[&name].role == Role::Writer {
                self.children.remove(&name);
                self.done.push(name);
            } else {
                self.restart(&name);
                revived.push(name);
            }
        }
        revived
    }

    async fn apply(&mut self, fault: &Fault) {
        match fault {
            Fault::Kill(name) => {
                if self.done.contains(name) {
                    return;
                }
                self.restart(name);
            }
            Fault::Pause(name, d) => {
                if let Some(c) = self.children.get(name) {
                    c.signal("STOP");
                    tokio::time::sleep(*d).await;
                    c.signal("CONT");
                }
            }
            Fault::Cut(name) => self.links[name].cut(),
            Fault::Stall(name, d) => {
                self.links[name].stall();
                tokio::time::sleep(*d).await;
                self.links[name].restore();
            }
            Fault::RestartDatabase(d) => {
                self.database.crash().await;
                tokio::time::sleep(*d).await;
                self.database.restart().await;
            }
            Fault::CutNode(n) => self.node_link(*n).cut(),
            Fault::StallNode(n, d) => {
                self.node_link(*n).stall();
                tokio::time::sleep(*d).await;
                self.node_link(*n).restore();
            }
            Fault::CutDatabase(name) => self.database_links[name].cut(),
            Fault::StallDatabase(name, d) => {
                self.database_links[name].stall();
                tokio::time::sleep(*d).await;
                self.database_links[name].restore();
            }
            Fault::RestartBroker(node, d) => match self.backend {
                Backend::RabbitMq => restart_rabbitmq(*d).await,
                Backend::Kafka => restart_kafka_node(*node, *d).await,
                Backend::Sqs => unreachable!("SQS's menu has no broker nodes"),
            },
        }
    }
}

impl Fleet {
    fn node_link(&self, n: u32) -> &LinkProxy {
        let i = usize::try_from(n).expect("a node number") - 1;
        &self.node_links[i]
    }
}

/// SIGKILLs node `n` of the three-broker Kafka cluster, then starts it
/// again after `down` (started again even if this panics half-way).
async fn restart_kafka_node(n: u32, down: Duration) {
    let n = i32::try_from(n).expect("a node number");
    let mut restart = tokio::task::spawn_blocking(move || kill_cluster_node(n))
        .await
        .expect("SIGKILL a Kafka node");
    tokio::time::sleep(down).await;
    tokio::task::spawn_blocking(move || restart.now())
        .await
        .expect("start the Kafka node again");
}

/// Stops the local RabbitMQ node's application (its quorum queues with
/// it), then starts it again after `down`; started again even if this
/// panics half-way.
async fn restart_rabbitmq(down: Duration) {
    let _start = StartAppOnDrop;
    let ctl =
        |args: &'static [&'static str]| tokio::task::spawn_blocking(move || rabbitmqctl(args));
    ctl(&["stop_app"]).await.expect("rabbitmqctl stop_app ran");
    tokio::time::sleep(down).await;
    ctl(&["start_app"])
        .await
        .expect("rabbitmqctl start_app ran");
}

/// Runs `campaign` on the local RabbitMQ node (`AMQP_URL`, restarted with
/// `rabbitmqctl`), printing each fault as it is injected.
pub async fn on_rabbitmq(campaign: Campaign) -> Outcome {
    drop(connect().await);
    run(campaign, Backend::RabbitMq, unique_prefix("campaign")).await
}

/// Runs `campaign` on the three-broker Kafka cluster
/// (`scripts/services kafka-cluster`), on a topic of its own with
/// [`PARTITIONS`](workload::PARTITIONS) partitions replicated three
/// times, deleted at the end of a clean run.
pub async fn on_kafka(campaign: Campaign) -> Outcome {
    check_proxied_listeners();
    let brokers = CLUSTER.to_owned();
    let topic = format!("ct.campaign.{}", uuid::Uuid::now_v7().simple());
    let topics = workload::topics(&topic);
    let partitions = i32::try_from(workload::PARTITIONS).unwrap_or(i32::MAX);
    topics
        .create(&brokers, partitions, 3)
        .await
        .unwrap_or_else(|e| panic!("creating the campaign's topics on Kafka at {brokers}: {e}"));
    let outcome = run(campaign, Backend::Kafka, topic).await;
    if outcome.is_clean()
        && let Err(e) = delete_topics(&brokers, &topics).await
    {
        println!("the campaign's topics stay on the broker: {e}");
    }
    outcome
}

/// moto's `host:port`, from `SQS_ENDPOINT`.
fn sqs_upstream() -> String {
    let endpoint = crate::conformance::sqs::endpoint();
    let rest = endpoint
        .split_once("://")
        .map_or(endpoint.as_str(), |(_, r)| r);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

/// Runs `campaign` on SQS (moto at `SQS_ENDPOINT`) and PostgreSQL, on a
/// FIFO queue of its own and its dead-letter queue, deleted at the end of
/// a clean run.
pub async fn on_sqs(campaign: Campaign) -> Outcome {
    let queue = format!(
        "{}.fifo",
        crate::conformance::sqs::unique_prefix("campaign")
    );
    let client = workload::sqs_client();
    let (url, dead_letters) = workload::sqs_topology(&queue)
        .declare(&client)
        .await
        .unwrap_or_else(|e| panic!("declaring the campaign's queues on SQS: {e}"));
    let outcome = run(campaign, Backend::Sqs, queue).await;
    if outcome.is_clean() {
        let api = client.api();
        for url in [url, dead_letters] {
            if let Err(e) = api.delete_queue(&url).await {
                println!("the campaign's queue {url} stays: {e}");
            }
        }
    }
    outcome
}

impl Outcome {
    /// Every committed event settled and the checker found no anomaly.
    pub fn is_clean(&self) -> bool {
        self.report.anomalies.is_empty() && self.settled_after.is_some()
    }
}

async fn run(campaign: Campaign, backend: Backend, queue: String) -> Outcome {
    let started = Instant::now();
    let database = PrivatePostgres::start().await;
    let fresh = FreshSchema::create_at(&database.url(), "ct", 4)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    workload::create_tables(&fresh.pool).await;
    let menu = match backend {
        Backend::RabbitMq => Menu::RABBITMQ,
        Backend::Kafka => Menu::KAFKA,
        Backend::Sqs => Menu::SQS,
    };
    let dir = workload::history_dir(&queue);
    let nemesis = JsonLines::open(&dir, "nemesis", true).expect("the nemesis' log");

    let names = |p: &str, n: usize| (1..=n).map(|i| format!("{p}-{i}")).collect::<Vec<_>>();
    let (writers, relays, consumers) =
        (names("writer", 2), names("relay", 2), names("consumer", 3));
    let faults_for_us = i64::try_from(campaign.faults_for.as_micros()).unwrap_or(i64::MAX);
    let write_until_us = history::now_us().saturating_add(faults_for_us);
    let grace_us = faults_for_us.max(300_000_000);
    let mut fleet = Fleet {
        specs: BTreeMap::new(),
        children: BTreeMap::new(),
        links: BTreeMap::new(),
        database_links: BTreeMap::new(),
        node_links: match backend {
            Backend::Kafka => node_link_proxies().await,
            Backend::RabbitMq | Backend::Sqs => Vec::new(),
        },
        database,
        backend,
        done: Vec::new(),
    };
    for (role, list) in [
        (Role::Consumer, &consumers),
        (Role::Relay, &relays),
        (Role::Writer, &writers),
    ] {
        for name in list {
            let url = match backend {
                _ if role == Role::Writer => String::new(),
                Backend::RabbitMq => {
                    let link = LinkProxy::start(upstream()).await.expect("a link proxy");
                    let url = through(&link);
                    fleet.links.insert(name.clone(), link);
                    url
                }
                Backend::Kafka => bootstrap_through_proxies(),
                Backend::Sqs => {
                    let link = LinkProxy::start(sqs_upstream())
                        .await
                        .expect("a link proxy");
                    let url = format!("http://{}", link.addr());
                    fleet.links.insert(name.clone(), link);
                    url
                }
            };
            let database_link = LinkProxy::start(fleet.database.addr())
                .await
                .expect("a link proxy to PostgreSQL");
            let database = PrivatePostgres::url_at(&database_link.addr().to_string());
            fleet.database_links.insert(name.clone(), database_link);
            let spec = Spec {
                role,
                name: name.clone(),
                database,
                schema: fresh.schema.clone(),
                backend,
                queue: queue.clone(),
                dir: dir.clone(),
                url,
                write_until_us,
                every_ms: u64::try_from(campaign.every.as_millis()).unwrap_or(u64::MAX),
            };
            fleet.children.insert(name.clone(), Fleet::spawn(&spec));
            fleet.specs.insert(name.clone(), spec);
        }
    }

    let steps = plan(
        campaign.seed,
        campaign.faults_for,
        &Targets {
            writers: &writers,
            relays: &relays,
            consumers: &consumers,
        },
        menu,
    );
    println!(
        "campaign seed {} on {}: {} faults over {:?}, {} aggregates, history in {}, schema {}",
        campaign.seed,
        backend.name(),
        steps.len(),
        campaign.faults_for,
        writers.len() * AGGREGATES_PER_WRITER,
        dir.display(),
        fresh.schema
    );
    for (i, step) in steps.iter().enumerate() {
        // The schedule's own pace, not a synchronisation.
        tokio::time::sleep(step.after).await;
        // Faults take longer than planned (a Kafka node's restart waits
        // 30 s for the JVM, and over a minute on a loaded machine): past
        // the time asked plus as much again, at least 5 minutes (the
        // writers stop at the time asked; the faults go on while their
        // backlog drains), the schedule's last faults are left.
        if history::now_us() >= write_until_us.saturating_add(grace_us) {
            println!(
                "the campaign's time is up: {i} of the schedule's {} faults injected",
                steps.len()
            );
            break;
        }
        let what = step.fault.to_string();
        println!("{:>8.3} s  {what}", started.elapsed().as_secs_f64());
        nemesis
            .append(Kind::Fault { what })
            .expect("the nemesis' log");
        fleet.apply(&step.fault).await;
        for name in fleet.revive() {
            nemesis
                .append(Kind::Fault {
                    what: format!("exited {name} (restarted)"),
                })
                .expect("the nemesis' log");
        }
    }
    for link in fleet
        .links
        .values()
        .chain(fleet.database_links.values())
        .chain(&fleet.node_links)
    {
        link.restore();
    }

    // The writers stop at the end of the faults (a writer restarted after
    // that exits at once), then every committed event settles: applied,
    // or dead-lettered if poison. Polled, as the database has no event to
    // await. Past the limit the checker runs anyway and says what never
    // settled.
    let faults_ended = Instant::now();
    let mut settled_after = None;
    while faults_ended.elapsed() < SETTLE_LIMIT {
        fleet.revive();
        let writing = writers.iter().any(|w| !fleet.done.contains(w));
        if !writing && workload::unsettled(&fresh.pool).await == 0 {
            settled_after = Some(faults_ended.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!("settled {settled_after:?} after the last fault");
    fleet.children.clear();
    let events = history::load(&fresh.pool, HANDLER, &dir).await;
    let report = checker::check(&events);
    let mut outcome = Outcome {
        report,
        settled_after,
        schema: fresh.schema.clone(),
        dir,
        took: started.elapsed(),
    };
    if !outcome.is_clean() {
        let kept = fleet.database.keep().display().to_string();
        outcome.schema = format!(
            "{} of the stopped server in {kept} (start it with pg_ctl start -D {kept})",
            fresh.schema
        );
    }
    outcome
}
