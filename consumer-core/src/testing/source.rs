//! [`FaultySource`]: any source, with lost acks that crash and restart it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use super::{Faults, FaultyAcker};
use crate::envelope::Envelope;
use crate::source::Source;
use consumer_backend::Error;

/// Starts a fresh source after a simulated crash, as a restarted process
/// would (a new group member, a new connection).
pub type Restart<S> =
    Box<dyn FnMut() -> Pin<Box<dyn Future<Output = Result<S, Error>> + Send>> + Send>;

/// What the ackers of one incarnation of the inner source share with it.
#[derive(Debug, Default)]
struct Incarnation {
    /// Deliveries handed out whose [`Hold`] is not dropped yet.
    held: AtomicUsize,
    crashed: AtomicBool,
    changed: Notify,
}

/// Counts one delivery as held by its incarnation until dropped; the
/// acker drops it only once the inner settle has returned, so a restart
/// never closes the inner source under a settle still in progress.
#[derive(Debug)]
pub(super) struct Hold(Arc<Incarnation>);

impl Hold {
    fn new(incarnation: &Arc<Incarnation>) -> Self {
        incarnation.held.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(incarnation))
    }

    /// The process died holding this delivery; the restart waits for the
    /// others its incarnation still holds.
    pub(super) fn crash(&self) {
        self.0.crashed.store(true, Ordering::SeqCst);
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::SeqCst);
        // Only a crashed incarnation waits for its last delivery.
        if self.0.crashed.load(Ordering::SeqCst) {
            self.0.changed.notify_waiters();
        }
    }
}

/// Wraps a [`Source`]; its ackers inject the armed [`Faults`].
///
/// After a lost ack, nothing more is taken from the inner source (as from
/// a dead process); once every other delivery it handed out has settled,
/// it is closed and the [`Restart`] makes a new one. Without a restart,
/// the crashed delivery is dropped unsettled instead, which gives it back
/// to the broker, and the source goes on.
pub struct FaultySource<S> {
    inner: Option<S>,
    system: &'static str,
    faults: Faults,
    restart: Option<Restart<S>>,
    incarnation: Arc<Incarnation>,
    /// The policies told so far, told again to a restarted source.
    policies: Vec<crate::retry::RetryPolicy>,
    /// The body limit told, told again to a restarted source.
    max_body: Option<usize>,
}

impl<S> std::fmt::Debug for FaultySource<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultySource")
            .field("system", &self.system)
            .field("faults", &self.faults)
            .finish_non_exhaustive()
    }
}

impl<S: Source> FaultySource<S> {
    /// `inner` with the faults of `faults`.
    pub fn new(inner: S, faults: Faults) -> Self {
        Self {
            system: inner.system(),
            inner: Some(inner),
            faults,
            restart: None,
            incarnation: Arc::default(),
            policies: Vec::new(),
            max_body: None,
        }
    }

    /// How to start a fresh source after a crash.
    #[must_use]
    pub fn with_restart(mut self, restart: Restart<S>) -> Self {
        self.restart = Some(restart);
        self
    }

    /// The current inner source (`None` only during a restart).
    pub fn inner(&self) -> Option<&S> {
        self.inner.as_ref()
    }

    async fn restart(&mut self) -> Result<(), Error> {
        let Some(restart) = self.restart.as_mut() else {
            return Ok(());
        };
        if let Some(old) = self.inner.take() {
            old.close().await;
        }
        let mut fresh = restart().await?;
        for policy in &self.policies {
            if let Err(reason) = fresh.accept_retry_policy(policy) {
                return Err(Error::Config(reason));
            }
        }
        if let Some(max) = self.max_body {
            fresh.limit_body(max);
        }
        self.inner = Some(fresh);
        self.incarnation = Arc::default();
        Ok(())
    }
}

impl<S: Source> Source for FaultySource<S> {
    type Acker = FaultyAcker<S::Acker>;

    fn system(&self) -> &'static str {
        self.system
    }

    fn consumer_group(&self) -> Option<&str> {
        self.inner.as_ref()?.consumer_group()
    }

    fn channels(&self) -> Option<crate::describe::SourceChannels> {
        self.inner.as_ref()?.channels()
    }

    fn server(&self) -> Option<(&str, u16)> {
        self.inner.as_ref()?.server()
    }

    /// The first inner source's (the runtime asks once, at start).
    fn gauges(&self) -> Option<std::sync::Arc<dyn crate::metrics::SourceGauges>> {
        self.inner.as_ref()?.gauges()
    }

    fn check_redelivery(&self, longest_delay: Duration) -> Result<(), String> {
        match &self.inner {
            Some(s) => s.check_redelivery(longest_delay),
            None => Ok(()),
        }
    }

    fn accept_retry_policy(&mut self, policy: &crate::retry::RetryPolicy) -> Result<(), String> {
        self.policies.push(*policy);
        match &mut self.inner {
            Some(s) => s.accept_retry_policy(policy),
            None => Ok(()),
        }
    }

    fn limit_body(&mut self, max_bytes: usize) {
        self.max_body = Some(max_bytes);
        if let Some(s) = &mut self.inner {
            s.limit_body(max_bytes);
        }
    }

    async fn recv(&mut self) -> Result<Option<(Arc<Envelope>, Self::Acker)>, Error> {
        let restarts = self.restart.is_some();
        loop {
            let incarnation = Arc::clone(&self.incarnation);
            let changed = incarnation.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if restarts && incarnation.crashed.load(Ordering::SeqCst) {
                // A dead process takes nothing more: what it still holds
                // settles, then it restarts.
                if incarnation.held.load(Ordering::SeqCst) == 0 {
                    self.restart().await?;
                } else {
                    changed.await;
                }
                continue;
            }
            let Some(inner) = self.inner.as_mut() else {
                return Ok(None);
            };
            let got = if restarts {
                tokio::select! {
                    biased;
                    () = &mut changed => continue,
                    r = inner.recv() => r?,
                }
            } else {
                inner.recv().await?
            };
            let Some((envelope, acker)) = got else {
                return Ok(None);
            };
            if restarts && incarnation.crashed.load(Ordering::SeqCst) {
                // It arrived as the process died, so it was never read:
                // dropped unsettled, the broker gives it back.
                drop(acker);
                continue;
            }
            let acker = FaultyAcker::new(
                acker,
                self.faults.clone(),
                Hold::new(&incarnation),
                restarts,
            );
            return Ok(Some((envelope, acker)));
        }
    }

    async fn close(self) {
        if let Some(inner) = self.inner {
            inner.close().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Mutex, PoisonError};

    use super::*;
    use crate::envelope::{Headers, Message, Origin};
    use crate::source::Acker;
    use consumer_backend::RetryCopy;

    type Log = Arc<Mutex<Vec<String>>>;

    fn push(log: &Log, line: String) {
        log.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(line);
    }

    fn lines(log: &Log) -> Vec<String> {
        log.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// An endless stream, always ready: deliveries `<incarnation>-<n>`.
    struct Stream {
        incarnation: usize,
        sent: usize,
        log: Log,
        /// Makes the next delivery's ack signal `entered`, then wait for
        /// `open`.
        gate: Option<Arc<Gate>>,
    }

    #[derive(Default)]
    struct Gate {
        entered: Notify,
        open: Notify,
    }

    struct StreamAcker {
        id: String,
        log: Log,
        gate: Option<Arc<Gate>>,
    }

    impl Source for Stream {
        type Acker = StreamAcker;

        fn system(&self) -> &'static str {
            "stream"
        }

        async fn recv(&mut self) -> Result<Option<(Arc<Envelope>, StreamAcker)>, Error> {
            self.sent += 1;
            let id = format!("{}-{}", self.incarnation, self.sent);
            let envelope = Envelope::from_parts(
                bytes::Bytes::new(),
                Headers::new(),
                None,
                Origin::default(),
                || id.clone(),
            );
            let acker = StreamAcker {
                id,
                log: Arc::clone(&self.log),
                gate: self.gate.take(),
            };
            Ok(Some((Arc::new(envelope), acker)))
        }

        async fn close(self) {
            push(&self.log, format!("close {}", self.incarnation));
        }
    }

    impl Acker for StreamAcker {
        async fn ack(self) -> Result<(), Error> {
            if let Some(gate) = &self.gate {
                gate.entered.notify_one();
                gate.open.notified().await;
            }
            push(&self.log, format!("ack {}", self.id));
            Ok(())
        }

        async fn release(self) -> Result<(), Error> {
            Ok(())
        }

        async fn publish_dead_letter(&mut self, _: &Message) -> Result<(), Error> {
            Ok(())
        }

        async fn publish_retry(&mut self, _: &RetryCopy) -> Result<(), Error> {
            Ok(())
        }
    }

    /// A faulty stream whose restarts number their incarnations.
    fn restarting(log: &Log) -> (FaultySource<Stream>, Faults) {
        let faults = Faults::new();
        let first = Stream {
            incarnation: 0,
            sent: 0,
            log: Arc::clone(log),
            gate: None,
        };
        let log = Arc::clone(log);
        let mut started = 0;
        let source = FaultySource::new(first, faults.clone()).with_restart(Box::new(move || {
            started += 1;
            let next = Stream {
                incarnation: started,
                sent: 0,
                log: Arc::clone(&log),
                gate: None,
            };
            Box::pin(async move { Ok(next) })
        }));
        (source, faults)
    }

    async fn recv(source: &mut FaultySource<Stream>) -> (String, FaultyAcker<StreamAcker>) {
        let (envelope, acker) = source.recv().await.expect("no error").expect("a delivery");
        (envelope.id.clone(), acker)
    }

    #[tokio::test]
    async fn after_a_crash_nothing_more_is_taken_and_the_restart_waits_for_what_is_held() {
        let log = Log::default();
        let (mut source, faults) = restarting(&log);
        let (_, lost) = recv(&mut source).await;
        let (_, held) = recv(&mut source).await;
        faults.lose_next_acks(1);
        lost.ack().await.expect("a lost ack looks fine");
        // The stream is always ready, yet the next delivery comes from the
        // restarted source, once the held one has settled.
        let ((next, _), acked) = tokio::join!(recv(&mut source), held.ack());
        acked.expect("ack");
        assert_eq!(next, "1-1");
        assert_eq!(lines(&log), ["ack 0-2", "close 0"]);
    }

    #[tokio::test]
    async fn the_restart_closes_the_crashed_source_only_after_its_last_ack_returned() {
        let log = Log::default();
        let gate = Arc::new(Gate::default());
        let (mut source, faults) = restarting(&log);
        let (_, lost) = recv(&mut source).await;
        source.inner.as_mut().expect("running").gate = Some(Arc::clone(&gate));
        let (_, held) = recv(&mut source).await;
        faults.lose_next_acks(1);
        lost.ack().await.expect("a lost ack looks fine");
        let acking = tokio::spawn(held.ack());
        gate.entered.notified().await;
        // The inner ack is under way; the restart must not close under it.
        let ((next, _), ()) = tokio::join!(recv(&mut source), async {
            gate.open.notify_one();
        });
        acking.await.expect("join").expect("ack");
        assert_eq!(next, "1-1");
        assert_eq!(lines(&log), ["ack 0-2", "close 0"]);
    }
}
