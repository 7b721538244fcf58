//! [`Health`]: whether a service is live and ready, for its orchestrator.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::stats::Stats;

/// Where one part of a service is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartState {
    /// Started, not yet taking work (a consumer's start-time checks).
    Starting,
    /// Taking work.
    Running,
    /// Finishing what it holds; takes nothing new.
    Draining,
    /// Done, without an error.
    Stopped,
    /// Ended with an error; the service is stopping.
    Failed,
}

impl PartState {
    fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::Starting,
            1 => Self::Running,
            2 => Self::Draining,
            3 => Self::Stopped,
            _ => Self::Failed,
        }
    }

    /// A short name, for endpoints and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Running => "running",
            Self::Draining => "draining",
            Self::Stopped => "stopped",
            Self::Failed => "failed",
        }
    }
}

/// One part's health as a service reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartHealth {
    /// The part's name.
    pub name: String,
    /// Consumer, relay or task.
    pub kind: &'static str,
    /// Its state.
    pub state: PartState,
    /// Its error, once it failed.
    pub error: Option<String>,
    /// A consumer's handlers an operator has paused now (see
    /// [`PausedHandlers`](crate::store::paused::PausedHandlers)): a
    /// paused part is still ready.
    pub paused: Vec<&'static str>,
    /// A consumer's handlers whose circuit is open now (see
    /// [`CircuitPolicy`](crate::runtime::CircuitPolicy)): the consumer
    /// takes nothing until a probe works, and is still ready (what is down
    /// is behind it).
    pub circuits_open: Vec<&'static str>,
}

/// The state of one part, shared between the service and its health.
#[derive(Debug)]
pub(super) struct Part {
    pub(super) name: String,
    pub(super) kind: &'static str,
    state: AtomicU8,
    /// A consumer says itself when it runs and when it drains.
    stats: Option<Arc<Stats>>,
    error: Mutex<Option<String>>,
}

impl Part {
    pub(super) fn new(name: String, kind: &'static str, stats: Option<Arc<Stats>>) -> Self {
        Self {
            name,
            kind,
            state: AtomicU8::new(PartState::Starting as u8),
            stats,
            error: Mutex::new(None),
        }
    }

    pub(super) fn set(&self, state: PartState) {
        self.state.store(state as u8, Ordering::SeqCst);
    }

    /// Running to draining; any other state stays.
    pub(super) fn drain(&self) {
        let _ = self.state.compare_exchange(
            PartState::Running as u8,
            PartState::Draining as u8,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }

    pub(super) fn fail(&self, error: String) {
        *self.error.lock().unwrap_or_else(PoisonError::into_inner) = Some(error);
        self.set(PartState::Failed);
    }

    fn state(&self) -> PartState {
        let own = PartState::from_u8(self.state.load(Ordering::SeqCst));
        match (&self.stats, own) {
            (Some(stats), PartState::Starting | PartState::Running) => {
                let s = stats.snapshot();
                if s.draining {
                    PartState::Draining
                } else if s.running {
                    PartState::Running
                } else {
                    PartState::Starting
                }
            }
            _ => own,
        }
    }
}

/// Whether a service is live and ready; cheap to clone, read it from an
/// HTTP endpoint or a probe.
///
/// * **Live** while no part has failed: a failed part stops the service,
///   and the orchestrator may restart it.
/// * **Ready** while every part is running and the service is not
///   stopping: not while starting (a consumer still checking its handlers,
///   say), not while draining.
#[derive(Debug, Clone)]
pub struct Health {
    pub(super) parts: Arc<Vec<Arc<Part>>>,
    pub(super) stopping: Arc<AtomicBool>,
}

impl Health {
    /// Every part, in the order they were added.
    pub fn parts(&self) -> Vec<PartHealth> {
        self.parts
            .iter()
            .map(|p| PartHealth {
                name: p.name.clone(),
                kind: p.kind,
                state: p.state(),
                error: p
                    .error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone(),
                paused: p
                    .stats
                    .as_ref()
                    .map(|s| s.paused_handlers())
                    .unwrap_or_default(),
                circuits_open: p
                    .stats
                    .as_ref()
                    .map(|s| s.open_circuits())
                    .unwrap_or_default(),
            })
            .collect()
    }

    /// No part has failed.
    pub fn is_live(&self) -> bool {
        self.parts.iter().all(|p| p.state() != PartState::Failed)
    }

    /// Every part runs and the service is not stopping.
    pub fn is_ready(&self) -> bool {
        !self.stopping.load(Ordering::SeqCst)
            && self.parts.iter().all(|p| p.state() == PartState::Running)
    }
}
