//! The nemesis' schedule: which fault, on which process, after how long,
//! drawn from a seeded generator, so that a seed names a schedule.

use std::fmt;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// One fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL the process, then start it again.
    Kill(String),
    /// SIGSTOP a consumer, SIGCONT it after a while: past its 1 s AMQP
    /// heartbeat, or for some past its Kafka session timeout, a zombie
    /// that wakes up with deliveries in hand.
    Pause(String, Duration),
    /// Reset every connection between the process and the broker.
    Cut(String),
    /// Let no byte through between the process and the broker for a
    /// while, connections left open.
    Stall(String, Duration),
    /// Crash PostgreSQL (every process's connections break, new ones are
    /// refused), then start it again after a while; it recovers from its
    /// WAL.
    RestartDatabase(Duration),
    /// Reset every connection between the process and PostgreSQL.
    CutDatabase(String),
    /// Let no byte through between the process and PostgreSQL for a
    /// while.
    StallDatabase(String, Duration),
    /// Reset every connection to broker node `n` (Kafka: every client's,
    /// through the node's proxied listener).
    CutNode(u32),
    /// Let no byte through to broker node `n` for a while, connections
    /// left open.
    StallNode(u32, Duration),
    /// Stop a broker node (RabbitMQ: the node's application, quorum
    /// queues and all; Kafka: SIGKILL one node of three), then start it
    /// again after a while.
    RestartBroker(u32, Duration),
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Kill(p) => write!(f, "kill {p}"),
            Self::Pause(p, d) => write!(f, "pause {p} for {:.1} s", d.as_secs_f64()),
            Self::Cut(p) => write!(f, "cut {p}"),
            Self::Stall(p, d) => write!(f, "stall {p} for {:.1} s", d.as_secs_f64()),
            Self::RestartDatabase(d) => {
                write!(f, "restart PostgreSQL, down for {:.1} s", d.as_secs_f64())
            }
            Self::CutDatabase(p) => write!(f, "cut {p} from PostgreSQL"),
            Self::StallDatabase(p, d) => {
                write!(f, "stall {p} from PostgreSQL for {:.1} s", d.as_secs_f64())
            }
            Self::CutNode(n) => write!(f, "cut every link to broker node {n}"),
            Self::StallNode(n, d) => write!(
                f,
                "stall every link to broker node {n} for {:.1} s",
                d.as_secs_f64()
            ),
            Self::RestartBroker(n, d) => {
                write!(
                    f,
                    "restart broker node {n}, down for {:.1} s",
                    d.as_secs_f64()
                )
            }
        }
    }
}

/// A fault and the time to wait before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub after: Duration,
    pub fault: Fault,
}

/// The processes faults are drawn among.
pub struct Targets<'a> {
    pub writers: &'a [String],
    pub relays: &'a [String],
    pub consumers: &'a [String],
}

impl Targets<'_> {
    /// Every process: each has a link to PostgreSQL.
    fn all(&self) -> Vec<String> {
        [self.writers, self.relays, self.consumers].concat()
    }
}

/// What the nemesis can do on a backend.
#[derive(Debug, Clone, Copy)]
pub struct Menu {
    /// Cuts and stalls of a process's link to the broker, through its own
    /// proxy (RabbitMQ's AMQP, SQS's HTTP). Without them (Kafka: a client
    /// connects to the addresses the brokers advertise, not to a proxy of
    /// its own), a cut or stall is of every client's links to one node
    /// where [`node_links`](Self::node_links) allows it, else a cut
    /// becomes a kill and a stall a pause.
    pub links: bool,
    /// Cuts and stalls of every client's links to one broker node, through
    /// a proxy per node on the address it advertises (Kafka's PROXIED
    /// listeners).
    pub node_links: bool,
    /// A pause lasts a stall's 0.5-4 s times this: 1 where the 1 s AMQP
    /// heartbeat is the timeout to pass, 3 (1.5-12 s) on Kafka, so that
    /// about half the pauses outlast its 6 s session timeout.
    pub pause_stretch: f64,
    /// The broker's nodes a restart is drawn among (numbered from 1).
    /// With none (moto) the draw becomes a PostgreSQL restart.
    pub broker_nodes: u32,
}

impl Menu {
    /// RabbitMQ's: every fault, pauses of 0.5-4 s, restarts of its one
    /// node.
    pub const RABBITMQ: Self = Self {
        links: true,
        node_links: false,
        pause_stretch: 1.0,
        broker_nodes: 1,
    };
    /// Kafka's: link faults of every client to one node of three, pauses
    /// of 1.5-12 s, restarts of one node of three.
    pub const KAFKA: Self = Self {
        links: false,
        node_links: true,
        pause_stretch: 3.0,
        broker_nodes: 3,
    };
    /// SQS's (moto): link faults to its endpoint, pauses of 1.5-12 s
    /// (against a 6 s visibility timeout), no broker restarts.
    pub const SQS: Self = Self {
        links: true,
        node_links: false,
        pause_stretch: 3.0,
        broker_nodes: 0,
    };
}

/// The schedule of `seed`: faults until their waits and durations add up
/// to `length`. Of twelve draws, one kills a writer, two a relay, two a
/// consumer, one pauses a consumer, four cut or stall a relay's or
/// consumer's link to the broker, one faults PostgreSQL (a restart, or a
/// process's link to it cut or stalled) and one restarts the broker.
pub fn plan(seed: u64, length: Duration, targets: &Targets<'_>, menu: Menu) -> Vec<Step> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut steps = Vec::new();
    let mut total = Duration::ZERO;
    let pick = |rng: &mut StdRng, among: &[String]| among[rng.random_range(0..among.len())].clone();
    loop {
        let after = Duration::from_millis(rng.random_range(300..1_500));
        let held = Duration::from_millis(rng.random_range(500..4_000));
        let paused = held.mul_f64(menu.pause_stretch);
        let kind = rng.random_range(0..12u32);
        let fault = match kind {
            0 => Fault::Kill(pick(&mut rng, targets.writers)),
            1 | 2 => Fault::Kill(pick(&mut rng, targets.relays)),
            3 | 4 => Fault::Kill(pick(&mut rng, targets.consumers)),
            5 => Fault::Pause(pick(&mut rng, targets.consumers), paused),
            6..=9 => {
                let among = if rng.random_bool(0.5) {
                    targets.relays
                } else {
                    targets.consumers
                };
                let target = pick(&mut rng, among);
                let node = rng.random_range(1..=menu.broker_nodes.max(1));
                match (menu.links, menu.node_links, kind) {
                    (true, _, 6 | 7) => Fault::Cut(target),
                    (true, _, _) => Fault::Stall(target, held),
                    (false, true, 6 | 7) => Fault::CutNode(node),
                    (false, true, _) => Fault::StallNode(node, held),
                    (false, false, 6 | 7) => Fault::Kill(target),
                    (false, false, _) => Fault::Pause(pick(&mut rng, targets.consumers), paused),
                }
            }
            10 => {
                let all = targets.all();
                match rng.random_range(0..3u32) {
                    0 => Fault::RestartDatabase(held),
                    1 => Fault::CutDatabase(pick(&mut rng, &all)),
                    _ => Fault::StallDatabase(pick(&mut rng, &all), held),
                }
            }
            11 if menu.broker_nodes > 0 => {
                Fault::RestartBroker(rng.random_range(1..=menu.broker_nodes), held)
            }
            11 => Fault::RestartDatabase(held),
            _ => unreachable!("drawn from 0..12"),
        };
        total += after
            + match fault {
                Fault::Pause(_, d)
                | Fault::Stall(_, d)
                | Fault::RestartDatabase(d)
                | Fault::StallDatabase(_, d)
                | Fault::StallNode(_, d)
                | Fault::RestartBroker(_, d) => d,
                Fault::Kill(_) | Fault::Cut(_) | Fault::CutDatabase(_) | Fault::CutNode(_) => {
                    Duration::ZERO
                }
            };
        if total > length {
            return steps;
        }
        steps.push(Step { after, fault });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` writers, relays and consumers, named as a campaign names them.
    struct Processes([Vec<String>; 3]);

    impl Processes {
        fn of(n: usize) -> Self {
            let names = |p: &str| (1..=n).map(|i| format!("{p}-{i}")).collect();
            Self([names("writer"), names("relay"), names("consumer")])
        }

        fn targets(&self) -> Targets<'_> {
            let [writers, relays, consumers] = &self.0;
            Targets {
                writers,
                relays,
                consumers,
            }
        }
    }

    #[test]
    fn a_seed_names_one_schedule() {
        let processes = Processes::of(2);
        let t = processes.targets();
        for menu in [Menu::RABBITMQ, Menu::KAFKA, Menu::SQS] {
            let a = plan(7, Duration::from_secs(60), &t, menu);
            assert_eq!(a, plan(7, Duration::from_secs(60), &t, menu));
            assert_ne!(a, plan(8, Duration::from_secs(60), &t, menu));
            assert!(a.len() > 10, "{a:?}");
        }
    }

    #[test]
    fn on_kafka_links_are_faulted_by_node_and_some_pauses_outlast_a_session() {
        let processes = Processes::of(3);
        let t = processes.targets();
        let steps = plan(1, Duration::from_secs(600), &t, Menu::KAFKA);
        assert!(
            steps
                .iter()
                .all(|s| !matches!(s.fault, Fault::Cut(_) | Fault::Stall(..))),
            "{steps:?}"
        );
        let nodes = |f: fn(&Fault) -> Option<u32>| {
            steps
                .iter()
                .filter_map(|s| f(&s.fault))
                .collect::<std::collections::BTreeSet<u32>>()
        };
        let all: std::collections::BTreeSet<u32> = (1..=3).collect();
        assert_eq!(
            nodes(|f| match f {
                Fault::CutNode(n) => Some(*n),
                _ => None,
            }),
            all,
            "{steps:?}"
        );
        assert_eq!(
            nodes(|f| match f {
                Fault::StallNode(n, _) => Some(*n),
                _ => None,
            }),
            all,
            "{steps:?}"
        );
        assert!(
            steps
                .iter()
                .any(|s| matches!(s.fault, Fault::Pause(_, d) if d > Duration::from_secs(7))),
            "{steps:?}"
        );
    }

    #[test]
    fn every_menu_faults_postgres_and_restarts_only_the_broker_nodes_it_has() {
        let processes = Processes::of(3);
        let t = processes.targets();
        for menu in [Menu::RABBITMQ, Menu::KAFKA, Menu::SQS] {
            let steps = plan(1, Duration::from_secs(600), &t, menu);
            let has = |f: fn(&Fault) -> bool| steps.iter().any(|s| f(&s.fault));
            assert!(has(|f| matches!(f, Fault::RestartDatabase(_))), "{steps:?}");
            assert!(has(|f| matches!(f, Fault::CutDatabase(_))), "{steps:?}");
            assert!(has(|f| matches!(f, Fault::StallDatabase(..))), "{steps:?}");
            assert!(
                has(|f| matches!(f, Fault::CutDatabase(p) if p.starts_with("writer"))),
                "{steps:?}"
            );
            let nodes: std::collections::BTreeSet<u32> = steps
                .iter()
                .filter_map(|s| match s.fault {
                    Fault::RestartBroker(n, _) => Some(n),
                    _ => None,
                })
                .collect();
            assert_eq!(nodes, (1..=menu.broker_nodes).collect(), "{steps:?}");
        }
    }
}
