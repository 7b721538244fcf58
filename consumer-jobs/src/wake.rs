//! [`Wake`]: the in-process wake-up shared by a [`Jobs`](super::Jobs)
//! handle and the sources and publishers made from it.

use std::sync::Arc;

use tokio::sync::watch;

/// Rung after a job commits in this process; every source made from the
/// same [`Jobs`](super::Jobs) sees each ring (a watch: a ring while a
/// source is busy claiming is still seen when it next waits).
#[derive(Debug, Clone)]
pub(crate) struct Wake(Arc<watch::Sender<u64>>);

impl Default for Wake {
    fn default() -> Self {
        Self(Arc::new(watch::channel(0).0))
    }
}

impl Wake {
    /// Wakes every source waiting, or about to wait.
    pub(crate) fn ring(&self) {
        self.0.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// What a source waits on.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.subscribe()
    }
}
