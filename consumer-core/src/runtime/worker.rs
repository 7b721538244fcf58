//! What a consumer's lane tasks share while it runs, and the lane task
//! itself: take a lane's deliveries one at a time, process each (see
//! [`attempt`](super::attempt)), then wait idle for the next lane.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::TraceContextExt as _;
use tokio::task::JoinHandle;

use super::lanes::LaneTable;
use super::observe::{Happened, Observer};
use super::settle::Settler;
use super::{Ended, Job, Stopping};
use crate::router::Routes;
use crate::source::Acker;
use crate::store::DedupStore;
use crate::trace::SpanScope;

/// What every lane task of one consumer shares.
pub(super) struct Worker<S, R, A> {
    pub(super) routes: R,
    pub(super) store: S,
    pub(super) settler: Settler<S>,
    pub(super) lanes: LaneTable<A>,
    /// Where what happens to deliveries is told.
    pub(super) observer: Observer,
    /// What every span of this consumer carries.
    pub(super) spans: SpanScope,
    pub(super) max_payload_bytes: usize,
    /// Each handler's circuit.
    pub(super) circuits: super::circuit::Circuits,
    /// Which handlers an operator paused.
    pub(super) pauses: Arc<super::pause::Pauses>,
    /// The limited handlers' limits.
    pub(super) limits: super::limits::Limits,
    /// The payload codecs handlers decode with (`#[handler(codec = ..)]`).
    pub(super) codecs: crate::handler::Codecs,
    pub(super) stopping: Stopping,
}

impl<S, R, A> Worker<S, R, A>
where
    S: DedupStore,
    R: Routes<S>,
    A: Acker,
{
    /// Waits while the consumer takes nothing: until the open circuits'
    /// probe is due (half-open, it takes again), then until some handler
    /// is not paused.
    pub(super) async fn until_taking(&self) {
        self.circuits.wait_until_none_open().await;
        self.pauses.until_one_runs().await;
    }

    /// Reads which handlers are paused, then starts the task that reads
    /// them every `every` (see [`pause::watch`](super::pause::watch)).
    pub(super) async fn watch_pauses(&self, every: Duration) -> JoinHandle<()> {
        let store = self.store.clone();
        let pauses = Arc::clone(&self.pauses);
        super::pause::watch(store, pauses, self.observer.clone(), every).await
    }

    /// A lane task: runs its lane, then every lane it is handed while idle,
    /// until the idle tasks are closed.
    pub(super) async fn run_lanes(self: Arc<Self>, lane: u64, first: Job<A>) {
        let mut next = Some((lane, first));
        while let Some((lane, first)) = next {
            self.run_lane(lane, first).await;
            next = self.lanes.next_lane().await;
        }
    }

    /// Runs the lane's deliveries until its queue is empty; after shutdown
    /// began, releases them instead.
    async fn run_lane(&self, lane: u64, first: Job<A>) {
        let mut job = first;
        loop {
            // Everything done for the delivery continues the producer's
            // trace, whatever the subscriber records. Without one, the
            // lane's own (empty) context is the same thing, and attaching
            // it on every poll would cost for nothing.
            let cx = crate::trace::delivery_context(&job.envelope);
            let traced = cx.span().span_context().is_valid();
            // Each future is built in the branch that awaits it: one
            // built before the branch would be moved (copied) into it.
            if self.stopping.has_begun() {
                if traced {
                    let release = self.settler.release(&job.envelope, job.acker);
                    release.with_context(cx).await;
                } else {
                    self.settler.release(&job.envelope, job.acker).await;
                }
                self.observer.emit(Happened::Left {
                    envelope: &job.envelope,
                    took: None,
                });
            } else {
                let received = job.received;
                let envelope = Arc::clone(&job.envelope);
                let ended = if traced {
                    let process = self.process(job.envelope, job.acker);
                    process.with_context(cx).await
                } else {
                    self.process(job.envelope, job.acker).await
                };
                let took = (ended == Ended::Settled).then(|| received.elapsed());
                self.observer.emit(Happened::Left {
                    envelope: &envelope,
                    took,
                });
            }
            match self.lanes.next_in_lane(lane) {
                Some(j) => job = j,
                None => return,
            }
        }
    }
}
