//! The kit's virtual clock: Tokio's paused time, kept from jumping ahead
//! while the runtime waits for SQLite, and a wall-clock deadline for waits.
//!
//! With time paused, Tokio moves the clock to the next timer whenever the
//! runtime has nothing to run, which is what makes a retry backoff take
//! no wall time. But the runtime also has nothing to run while SQLite's
//! worker thread answers a query, and a jump then would fire a pool's
//! acquire timeout, or any timer far ahead, in the middle of a query. A
//! ticker (a timer every [`TICK`]) bounds each jump: the clock moves by ten
//! milliseconds at a time while a query runs, far less than any
//! timeout involved, and a backoff of seconds still takes milliseconds.
//!
//! A kit's waits are bounded by the wall clock instead ([`WallDeadline`]):
//! a virtual deadline would be the first thing an idle runtime jumps to.

use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The most the virtual clock moves at once while the runtime waits for
/// something outside it.
pub(super) const TICK: Duration = Duration::from_millis(10);

/// Pauses Tokio's clock (unless the test did, with `start_paused`) and
/// starts the ticker, which stops when the handle is dropped.
///
/// # Panics
///
/// When called outside a current-thread Tokio runtime, where time cannot
/// be paused.
pub(super) fn pause() -> Ticker {
    let flavor = Handle::try_current().map(|h| h.runtime_flavor());
    assert!(
        matches!(flavor, Ok(RuntimeFlavor::CurrentThread)),
        "the test kit runs on a virtual clock, which needs a current-thread Tokio runtime: \
         use `#[tokio::test]` (not `flavor = \"multi_thread\"`)"
    );
    if !is_paused() {
        tokio::time::pause();
    }
    Ticker(tokio::spawn(async {
        loop {
            tokio::time::sleep(TICK).await;
        }
    }))
}

/// Whether Tokio's clock is paused: a paused clock does not move while
/// this thread spins.
fn is_paused() -> bool {
    let before = tokio::time::Instant::now();
    let spin = std::time::Instant::now();
    while spin.elapsed() < Duration::from_micros(20) {
        std::hint::spin_loop();
    }
    tokio::time::Instant::now() == before
}

/// The ticker's task; aborted on drop.
pub(super) struct Ticker(JoinHandle<()>);

impl Drop for Ticker {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Completes once `after` of wall-clock time has passed, measured by a
/// thread of its own; dropping it ends that thread at once.
pub(super) struct WallDeadline {
    fired: oneshot::Receiver<()>,
    _cancel: mpsc::Sender<()>,
}

impl WallDeadline {
    pub(super) fn after(after: Duration) -> Self {
        let (fire, fired) = oneshot::channel();
        let (cancel, cancelled) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            // Dropping the sender ends the wait early, without firing.
            if let Err(mpsc::RecvTimeoutError::Timeout) = cancelled.recv_timeout(after) {
                let _ = fire.send(());
            }
        });
        Self {
            fired,
            _cancel: cancel,
        }
    }
}

impl Future for WallDeadline {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match Pin::new(&mut self.fired).poll(cx) {
            Poll::Ready(Ok(())) => Poll::Ready(()),
            // The thread ended without firing: only when cancelled, which
            // drops this future first.
            Poll::Ready(Err(_)) | Poll::Pending => Poll::Pending,
        }
    }
}
