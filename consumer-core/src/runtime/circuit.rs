//! A circuit per handler: when the thing behind a handler is down, stop
//! spending attempts on it.
//!
//! Retries are for one message's bad luck. When several different messages
//! in a row fail transiently, the cause is more likely behind the handler
//! (a database, a payment gateway) than in the messages, and retrying each
//! through its policy would turn the whole stream into dead letters. So the
//! circuit opens:
//!
//! * **Closed** (normal): a success clears the streak; a transient failure
//!   adds its message to it; [`CircuitPolicy::opens_after`] distinct
//!   messages in the streak open the circuit. One message failing again
//!   and again counts once: alone it cannot open the circuit, and it is
//!   retried and dead-lettered by its policy as before.
//! * **Open**: the consumer takes no new deliveries, and those it holds
//!   wait before their next attempt. A transient failure of an attempt that
//!   was already running spends no attempt: the delivery waits too. Its
//!   success does not close the circuit (only the probe's does): it says
//!   what was true before the failures that opened it.
//! * **Half-open**, after the open time: one delivery runs as the probe:
//!   of those with the most attempts left, the one that has waited longest
//!   (a probe risks an attempt; a failed probe waits again behind the
//!   others, so probes go round the waiting deliveries). Success
//!   closes the circuit; a transient failure opens it again for twice as
//!   long (at most [`CircuitPolicy::max_open_for`]) and counts as a failed
//!   attempt of the probe's message (so a message that only fails as the
//!   probe is dead-lettered in the end, as its policy says: nothing is
//!   retried for ever).
//!
//! Poison and terminal failures say nothing about what is behind the
//! handler and leave the circuit as it is.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::handler::CircuitPolicy;

/// What an attempt said about what is behind its handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// It worked (processed, or a duplicate).
    Worked,
    /// It failed transiently.
    FailedTransiently,
    /// Poison or terminal: nothing about what is behind the handler.
    Neither,
}

/// How a delivery was let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admission {
    /// The circuit was closed.
    Closed,
    /// The circuit is half-open and this attempt is its probe.
    Probe,
}

/// A change of a circuit's state, for the observer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transition {
    /// Opened (again, after a failed probe: `reopened`) for `open_for`.
    Opened { open_for: Duration, reopened: bool },
    /// Closed after being open for `was_open`.
    Closed { was_open: Duration },
}

#[derive(Debug)]
enum State {
    Closed {
        streak: HashSet<String>,
    },
    Open {
        until: Instant,
        open_for: Duration,
        since: Instant,
    },
    HalfOpen {
        open_for: Duration,
        since: Instant,
    },
    Probing {
        open_for: Duration,
        since: Instant,
        probe: String,
    },
}

/// One handler's circuit.
#[derive(Debug)]
pub(super) struct Circuit {
    policy: CircuitPolicy,
    /// The state, and the deliveries waiting to be let through (id and
    /// attempt number), longest waiting first.
    state: Mutex<(State, VecDeque<(String, u32)>)>,
    /// Closed with an empty streak: what every attempt of a healthy
    /// handler finds, read without the lock.
    quiet: AtomicBool,
    changed: watch::Sender<()>,
}

/// One delivery in a circuit's queue of waiting ones while it lives.
struct Waiting<'c>(&'c Circuit, String);

impl<'c> Waiting<'c> {
    fn new(circuit: &'c Circuit, id: &str, attempt: u32) -> Self {
        circuit.lock().1.push_back((id.to_owned(), attempt));
        Self(circuit, id.to_owned())
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut guard = self.0.lock();
        if let Some(at) = guard.1.iter().position(|(w, _)| *w == self.1) {
            guard.1.remove(at);
        }
        drop(guard);
        // The next in line may be the probe now.
        self.0.changed.send_replace(());
    }
}

/// What a waiting delivery does next.
enum Wait {
    Until(Instant),
    ForChange,
}

impl Circuit {
    fn new(policy: CircuitPolicy) -> Self {
        Self {
            policy,
            state: Mutex::new((
                State::Closed {
                    streak: HashSet::new(),
                },
                VecDeque::new(),
            )),
            quiet: AtomicBool::new(true),
            changed: watch::channel(()).0,
        }
    }

    /// The policy this circuit follows.
    pub(super) fn policy(&self) -> CircuitPolicy {
        self.policy
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (State, VecDeque<(String, u32)>)> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the circuit is open (no probe due yet).
    #[cfg(test)]
    fn is_open(&self) -> bool {
        matches!(self.lock().0, State::Open { .. })
    }

    /// Whether the circuit lets every attempt through.
    pub(super) fn is_closed(&self) -> bool {
        self.quiet.load(Ordering::Acquire) || matches!(self.lock().0, State::Closed { .. })
    }

    /// Waits until delivery `id` may run an attempt: at once while the
    /// circuit is closed; while it is open, until it is half-open and this
    /// delivery is the probe, or it closed.
    ///
    /// Cancel-safe: dropped while waiting, it has taken nothing.
    pub(super) async fn admit(&self, id: &str, attempt: u32) -> Admission {
        if self.is_closed() {
            return Admission::Closed;
        }
        let _waiting = Waiting::new(self, id, attempt);
        loop {
            let mut changed = self.changed.subscribe();
            let wait = match self.try_admit(id) {
                Ok(admission) => break admission,
                Err(wait) => wait,
            };
            match wait {
                Wait::Until(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        _ = changed.changed() => {}
                    }
                }
                Wait::ForChange => {
                    let _ = changed.changed().await;
                }
            }
        }
    }

    fn try_admit(&self, id: &str) -> Result<Admission, Wait> {
        let mut guard = self.lock();
        let (state, waiting) = &mut *guard;
        if let State::Open {
            until,
            open_for,
            since,
        } = state
        {
            if Instant::now() < *until {
                return Err(Wait::Until(*until));
            }
            *state = State::HalfOpen {
                open_for: *open_for,
                since: *since,
            };
        }
        match state {
            State::Closed { .. } => Ok(Admission::Closed),
            State::HalfOpen { open_for, since } => {
                // Of the deliveries with the most attempts left, the one
                // that has waited longest probes.
                let probe = waiting
                    .iter()
                    .enumerate()
                    .min_by_key(|(at, (_, attempt))| (*attempt, *at))
                    .map(|(_, (probe, _))| probe.as_str());
                if probe != Some(id) {
                    return Err(Wait::ForChange);
                }
                *state = State::Probing {
                    open_for: *open_for,
                    since: *since,
                    probe: id.to_owned(),
                };
                Ok(Admission::Probe)
            }
            State::Open { .. } | State::Probing { .. } => Err(Wait::ForChange),
        }
    }

    /// Records what an attempt of delivery `id`, let through as
    /// `admission`, said; the change of state, if any.
    pub(super) fn record(
        &self,
        id: &str,
        admission: Admission,
        verdict: Verdict,
    ) -> Option<Transition> {
        // A healthy handler's attempts change nothing: no lock for them.
        if admission == Admission::Closed
            && verdict != Verdict::FailedTransiently
            && self.quiet.load(Ordering::Acquire)
        {
            return None;
        }
        let mut guard = self.lock();
        let state = &mut guard.0;
        let now = Instant::now();
        let transition = self.step(state, id, admission, verdict, now);
        let quiet = matches!(&guard.0, State::Closed { streak } if streak.is_empty());
        self.quiet.store(quiet, Ordering::Release);
        drop(guard);
        if transition.is_some() || admission == Admission::Probe {
            self.changed.send_replace(());
        }
        transition
    }

    /// The state `verdict` on delivery `id` (let through as `admission`)
    /// leads `state` to at `now`, and the transition, if any.
    fn step(
        &self,
        state: &mut State,
        id: &str,
        admission: Admission,
        verdict: Verdict,
        now: Instant,
    ) -> Option<Transition> {
        match (verdict, &mut *state) {
            (Verdict::Neither, State::Probing { probe, .. })
                if admission == Admission::Probe && probe == id =>
            {
                rearm(state);
                None
            }
            (Verdict::Neither, _) => None,
            (Verdict::Worked, State::Closed { streak }) => {
                streak.clear();
                None
            }
            // Only the probe's success closes it: an attempt let through
            // before it opened may succeed after, with news from before
            // the failures that opened it.
            (Verdict::Worked, State::Probing { since, probe, .. })
                if admission == Admission::Probe && probe == id =>
            {
                let was_open = now.duration_since(*since);
                *state = State::Closed {
                    streak: HashSet::new(),
                };
                Some(Transition::Closed { was_open })
            }
            (Verdict::Worked, _) => None,
            (Verdict::FailedTransiently, State::Closed { streak }) => {
                streak.insert(id.to_owned());
                let opens_after = usize::try_from(self.policy.opens_after()).unwrap_or(usize::MAX);
                if opens_after > 0 && streak.len() >= opens_after {
                    let open_for = self.policy.open_for();
                    *state = State::Open {
                        until: now + open_for,
                        open_for,
                        since: now,
                    };
                    Some(Transition::Opened {
                        open_for,
                        reopened: false,
                    })
                } else {
                    None
                }
            }
            (
                Verdict::FailedTransiently,
                State::Probing {
                    open_for,
                    since,
                    probe,
                },
            ) if admission == Admission::Probe && probe == id => {
                let open_for = self.policy.after(*open_for);
                *state = State::Open {
                    until: now + open_for,
                    open_for,
                    since: *since,
                };
                Some(Transition::Opened {
                    open_for,
                    reopened: true,
                })
            }
            (Verdict::FailedTransiently, _) => None,
        }
    }
}

/// A probing circuit half-open again: the next waiting delivery probes.
fn rearm(state: &mut State) {
    if let State::Probing {
        open_for, since, ..
    } = state
    {
        *state = State::HalfOpen {
            open_for: *open_for,
            since: *since,
        };
    }
}

/// The circuits of a consumer's handlers, by handler name.
#[derive(Debug)]
pub(super) struct Circuits {
    policy: CircuitPolicy,
    /// The first handler's circuit, found without the lock (a consumer
    /// of one handler has no other).
    first: OnceLock<(&'static str, Arc<Circuit>)>,
    by_handler: Mutex<HashMap<&'static str, Arc<Circuit>>>,
    /// Told whenever a circuit opens or closes: the take loop waits on it.
    any: watch::Sender<()>,
    /// Circuits not closed now (the take loop's check without a lock).
    open: AtomicUsize,
}

impl Circuits {
    pub(super) fn new(policy: CircuitPolicy) -> Self {
        Self {
            policy,
            first: OnceLock::new(),
            by_handler: Mutex::default(),
            any: watch::channel(()).0,
            open: AtomicUsize::new(0),
        }
    }

    /// Handler `name`'s circuit, following `own` when the handler has a
    /// policy of its own and the consumer's otherwise.
    pub(super) fn of(&self, name: &'static str, own: Option<CircuitPolicy>) -> Arc<Circuit> {
        let (first, circuit) = self.first.get_or_init(|| (name, self.by_name(name, own)));
        if *first == name {
            return Arc::clone(circuit);
        }
        self.by_name(name, own)
    }

    fn by_name(&self, name: &'static str, own: Option<CircuitPolicy>) -> Arc<Circuit> {
        let mut all = self
            .by_handler
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Arc::clone(
            all.entry(name)
                .or_insert_with(|| Arc::new(Circuit::new(own.unwrap_or(self.policy)))),
        )
    }

    /// Says that a circuit went through `transition` (the take loop looks
    /// again).
    pub(super) fn changed(&self, transition: Transition) {
        match transition {
            Transition::Opened {
                reopened: false, ..
            } => {
                self.open.fetch_add(1, Ordering::AcqRel);
            }
            Transition::Opened { reopened: true, .. } => {}
            Transition::Closed { .. } => {
                self.open.fetch_sub(1, Ordering::AcqRel);
            }
        }
        self.any.send_replace(());
    }

    /// Whether some circuit is not closed.
    pub(super) fn any_open(&self) -> bool {
        self.open.load(Ordering::Acquire) > 0
    }

    /// The earliest time an open circuit is due for a probe, if one is
    /// open: the take loop takes nothing before then.
    fn open_until(&self) -> Option<Instant> {
        let all = self
            .by_handler
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        all.values()
            .filter_map(|c| match c.lock().0 {
                // Past its time it is half-open, whether or not a waiting
                // delivery has looked yet.
                State::Open { until, .. } if until > Instant::now() => Some(until),
                _ => None,
            })
            .min()
    }

    /// Waits while some handler's circuit is open: a consumer takes no new
    /// deliveries then (a router's other routes wait too: what was taken
    /// could be for the open one). Half-open, it takes again: the probe
    /// may need a delivery, and what comes waits behind it, bounded by
    /// the consumer's in-flight window.
    pub(super) async fn wait_until_none_open(&self) {
        loop {
            let mut changed = self.any.subscribe();
            let Some(until) = self.open_until() else {
                return;
            };
            tokio::select! {
                () = tokio::time::sleep_until(until) => {}
                _ = changed.changed() => {}
            }
        }
    }
}

#[cfg(test)]
mod tests;
