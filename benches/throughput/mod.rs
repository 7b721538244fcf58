//! What the broker throughput benches (`amqp`, `kafka`) share, so their
//! figures compare: the message they send (1 KiB of JSON over 64 keys), the
//! handler that does nothing with it, and the figure they print (messages
//! per second, client CPU per message), measured the same way on both.

#![allow(dead_code)]

use std::time::Duration;

use consumer::{Message, handler};

/// Keys the messages are spread over.
pub const KEYS: usize = 64;

/// The payload: a 1 KiB JSON document.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Pad {
    pub pad: String,
}

/// The framework's side of every consume run: decodes and does nothing.
#[handler(retry = none)]
pub async fn noop(_m: Pad) -> Result<(), std::io::Error> {
    Ok(())
}

/// `n` messages of 1 KiB, keyed over [`KEYS`] keys.
pub fn messages(n: usize) -> Vec<Message> {
    let pad = "x".repeat(1024 - 10);
    (0..n)
        .map(|i| {
            Message::json("Pad", &Pad { pad: pad.clone() })
                .expect("json")
                .with_key(format!("k{}", i % KEYS))
        })
        .collect()
}

/// One side's figure.
#[derive(Clone, Copy)]
pub struct Figure {
    /// Messages per second.
    pub rate: f64,
    /// Process CPU time per message, in microseconds.
    pub cpu_us: f64,
}

impl Figure {
    /// `n` messages in `wall`, costing `cpu` of process CPU time
    /// (`cpu_time::ProcessTime`).
    pub fn measure(n: usize, wall: Duration, cpu: Duration) -> Self {
        Self {
            rate: n as f64 / wall.as_secs_f64(),
            cpu_us: cpu.as_secs_f64() * 1e6 / n as f64,
        }
    }

    /// Prints this figure as `name`'s line, with its ratios to `base` (none:
    /// it is the baseline); `unit` names what is counted (`msg`, `rec`).
    pub fn line(&self, name: &str, base: Option<&Self>, unit: &str) {
        match base {
            None => println!(
                "  {name:<36} {:>9.0} {unit}/s  {:>6.1} µs CPU/{unit}  (baseline)",
                self.rate, self.cpu_us
            ),
            Some(b) => println!(
                "  {name:<36} {:>9.0} {unit}/s  {:>6.1} µs CPU/{unit}  {:.2}× throughput, {:.2}× CPU",
                self.rate,
                self.cpu_us,
                self.rate / b.rate,
                self.cpu_us / b.cpu_us
            ),
        }
    }

    /// The highest rate and the lowest CPU time of a side's runs, each on
    /// its own: on a shared machine, noise only ever makes a figure worse.
    pub fn best(runs: &[Self]) -> Self {
        Self {
            rate: runs.iter().map(|f| f.rate).fold(0.0, f64::max),
            cpu_us: runs.iter().map(|f| f.cpu_us).fold(f64::INFINITY, f64::min),
        }
    }
}
