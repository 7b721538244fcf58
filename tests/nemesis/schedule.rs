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
    /// heartbeat, a zombie that wakes up with deliveries in hand.
    Pause(String, Duration),
    /// Reset every connection between the process and the broker.
    Cut(String),
    /// Let no byte through between the process and the broker for a
    /// while, connections left open.
    Stall(String, Duration),
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Kill(p) => write!(f, "kill {p}"),
            Self::Pause(p, d) => write!(f, "pause {p} for {:.1} s", d.as_secs_f64()),
            Self::Cut(p) => write!(f, "cut {p}"),
            Self::Stall(p, d) => write!(f, "stall {p} for {:.1} s", d.as_secs_f64()),
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

/// The schedule of `seed`: faults until their waits and durations add up
/// to `length`.
pub fn plan(seed: u64, length: Duration, targets: &Targets<'_>) -> Vec<Step> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut steps = Vec::new();
    let mut total = Duration::ZERO;
    let pick = |rng: &mut StdRng, among: &[String]| among[rng.random_range(0..among.len())].clone();
    loop {
        let after = Duration::from_millis(rng.random_range(300..1_500));
        let held = Duration::from_millis(rng.random_range(500..4_000));
        let fault = match rng.random_range(0..10u32) {
            0 => Fault::Kill(pick(&mut rng, targets.writers)),
            1 | 2 => Fault::Kill(pick(&mut rng, targets.relays)),
            3 | 4 => Fault::Kill(pick(&mut rng, targets.consumers)),
            5 => Fault::Pause(pick(&mut rng, targets.consumers), held),
            6 | 7 => {
                let among = if rng.random_bool(0.5) {
                    targets.relays
                } else {
                    targets.consumers
                };
                Fault::Cut(pick(&mut rng, among))
            }
            _ => {
                let among = if rng.random_bool(0.5) {
                    targets.relays
                } else {
                    targets.consumers
                };
                Fault::Stall(pick(&mut rng, among), held)
            }
        };
        total += after
            + match fault {
                Fault::Pause(_, d) | Fault::Stall(_, d) => d,
                _ => Duration::ZERO,
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

    #[test]
    fn a_seed_names_one_schedule() {
        let names = |p: &str| (1..=2).map(|i| format!("{p}-{i}")).collect::<Vec<_>>();
        let (w, r, c) = (names("writer"), names("relay"), names("consumer"));
        let t = Targets {
            writers: &w,
            relays: &r,
            consumers: &c,
        };
        let a = plan(7, Duration::from_secs(60), &t);
        assert_eq!(a, plan(7, Duration::from_secs(60), &t));
        assert_ne!(a, plan(8, Duration::from_secs(60), &t));
        assert!(a.len() > 10, "{a:?}");
    }
}
