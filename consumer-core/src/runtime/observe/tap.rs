//! A listener a test installs on one consumer (feature `testing`): the test
//! kit hears every [`Happened`] the other listeners hear, in the same
//! order, after them.
//!
//! Built only with `testing`, so a production build has no field, no branch
//! and no call for it. With `testing` and no tap installed, each emit costs
//! one load and one untaken branch on an `Option` the observer already
//! holds in cache.

use super::Happened;

/// Hears what the runtime emits, on the task that emits it: it must not
/// block, and it cannot fail the runtime.
pub(crate) trait Tap: Send + Sync + 'static {
    /// Called once per event, after the instruments, counters and logs.
    fn on(&self, what: &Happened<'_>);
}
