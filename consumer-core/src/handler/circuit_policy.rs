//! [`CircuitPolicy`]: what a handler (or its consumer) declares about when
//! its circuit opens. The circuit itself is the runtime's
//! (`runtime/circuit.rs`).

use std::time::Duration;

/// When a handler's circuit opens and how long it stays open. Set with
/// [`Consumer::with_circuit`](crate::runtime::Consumer::with_circuit).
///
/// Closed, a success clears the streak and a transient failure adds its
/// message to it; [`opens_after`](Self::opens_after) different messages in
/// the streak open the circuit (one message failing again and again counts
/// once). Open, the consumer takes no new deliveries and those it holds
/// wait before their next attempt, spending none. After the open time the
/// delivery that waited longest runs as the probe: a success closes the
/// circuit; a failure opens it again for twice as long (at most
/// [`max_open_for`](Self::max_open_for)) and counts as an attempt of the
/// probe's message. Poison and terminal failures leave it as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircuitPolicy {
    opens_after: u32,
    open_for: Duration,
    max_open_for: Duration,
}

impl Default for CircuitPolicy {
    /// The recommended policy: opens after 5 different messages in a row
    /// failed transiently; open for 5 s, doubling after each failed probe
    /// up to 60 s. A consumer's circuits are [off](Self::off) unless set
    /// with [`Consumer::with_circuit`](crate::runtime::Consumer::with_circuit)
    /// or, for one handler, `#[handler(circuit = ..)]`
    /// ([`Handler::circuit_policy`](super::Handler::circuit_policy)).
    fn default() -> Self {
        Self::new(5, Duration::from_secs(5), Duration::from_secs(60))
    }
}

impl CircuitPolicy {
    /// Opens after `opens_after` different messages in a row failed
    /// transiently (0: never); open for `open_for` (at least 10 ms), twice
    /// as long after each failed probe, up to `max_open_for`.
    pub const fn new(opens_after: u32, open_for: Duration, max_open_for: Duration) -> Self {
        let open_for = if open_for.as_millis() < 10 {
            Duration::from_millis(10)
        } else {
            open_for
        };
        let max_open_for = if max_open_for.as_nanos() < open_for.as_nanos() {
            open_for
        } else {
            max_open_for
        };
        Self {
            opens_after,
            open_for,
            max_open_for,
        }
    }

    /// A circuit that never opens: every failure goes through the retry
    /// policy, as before circuits existed.
    pub const fn off() -> Self {
        Self::new(0, Duration::from_secs(5), Duration::from_secs(60))
    }

    /// How many different messages in a row fail before it opens.
    pub const fn opens_after(&self) -> u32 {
        self.opens_after
    }

    /// How long it stays open the first time.
    pub const fn open_for(&self) -> Duration {
        self.open_for
    }

    /// The longest it stays open before a probe.
    pub const fn max_open_for(&self) -> Duration {
        self.max_open_for
    }

    /// How long it stays open after a failed probe that followed
    /// `open_for`: twice as long, at most the longest.
    pub(crate) fn after(&self, open_for: Duration) -> Duration {
        open_for.saturating_mul(2).min(self.max_open_for)
    }
}
