//! [`JobSource`]: the workers' side of a queue, a backend
//! [`Source`](consumer_core::source::Source) like a broker's.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use consumer_core::Envelope;
use consumer_core::backend::{BrokerErrorKind, Error};
use sqlx::Pool;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::acker::JobAcker;
use super::deletes::Deletes;
use super::gauges::{Backlog, JobGauges, LastCount, count_every};
use super::lease::{Heartbeat, Held, millis};
use super::row::JobRow;
use super::wake::Wake;
use super::{JobDatabase, statements};

type Claimed = JoinHandle<Result<Vec<JobRow>, sqlx::Error>>;

/// Takes the jobs of one queue for a consumer.
///
/// Each claim takes up to [`with_batch_size`](Self::with_batch_size) due
/// jobs no worker holds, at most one per key (a key's next job waits while
/// an earlier one runs or waits to retry), and leases them for
/// [`with_lease`](Self::with_lease); a heartbeat renews the leases of the
/// jobs still running. A worker that dies stops renewing, and its jobs are
/// claimed again once their leases end.
///
/// An idle source waits for a wake-up: a job enqueued in this process
/// through the same [`Jobs`](super::Jobs), an announcement from another
/// process (PostgreSQL `LISTEN`), a job of its own settled (a key's next
/// job may now run), or the poll interval, whichever comes first.
pub struct JobSource<DB: JobDatabase> {
    pool: Pool<DB>,
    queue: Arc<str>,
    holder: Arc<str>,
    batch: i64,
    lease: Duration,
    poll: Duration,
    count_every: Duration,
    last_count: Arc<LastCount>,
    held: Held,
    ready: VecDeque<JobRow>,
    claiming: Option<Claimed>,
    idle: bool,
    /// Rung by this source's ackers and by the `LISTEN` task.
    nudge: Arc<Notify>,
    wake: watch::Receiver<u64>,
    /// Keeps the wake-up's sender alive: with every handle gone, a closed
    /// watch would end each wait at once.
    _hub: Wake,
    started: Option<Started>,
    /// The largest body whose attributes are read (`Source::limit_body`).
    max_body: usize,
}

/// What runs beside a source once it receives: the heartbeat and the
/// `LISTEN` task, both stopped with it.
struct Started {
    _heartbeat: Heartbeat,
    /// Where this source's ackers send finished jobs (deleted in groups).
    deletes: Deletes,
    listener: Option<JoinHandle<()>>,
    counter: JoinHandle<()>,
}

impl Drop for Started {
    fn drop(&mut self) {
        if let Some(task) = &self.listener {
            task.abort();
        }
        self.counter.abort();
    }
}

impl<DB: JobDatabase> std::fmt::Debug for JobSource<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobSource")
            .field("queue", &self.queue)
            .field("holder", &self.holder)
            .field("batch", &self.batch)
            .field("lease", &self.lease)
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

impl<DB: JobDatabase> JobSource<DB> {
    pub(crate) fn new(pool: Pool<DB>, queue: Arc<str>, wake: Wake) -> Self {
        Self {
            pool,
            queue,
            holder: uuid::Uuid::new_v4().to_string().into(),
            batch: 16,
            lease: Duration::from_secs(30),
            poll: Duration::from_millis(500),
            count_every: Duration::from_secs(15),
            last_count: Arc::default(),
            held: Held::default(),
            ready: VecDeque::new(),
            claiming: None,
            idle: false,
            nudge: Arc::new(Notify::new()),
            wake: wake.subscribe(),
            _hub: wake,
            started: None,
            max_body: usize::MAX,
        }
    }

    /// Jobs claimed per round (default 16, at least 1).
    #[must_use]
    pub fn with_batch_size(mut self, n: u32) -> Self {
        self.batch = i64::from(n.max(1));
        self
    }

    /// How long a claim holds a job without a heartbeat (default 30 s,
    /// at least 30 ms): how long a dead worker's jobs wait before another
    /// worker takes them. The heartbeat renews it every third of it.
    #[must_use]
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease.max(Duration::from_millis(30));
        self
    }

    /// The longest an idle source waits before it looks again without a
    /// wake-up (default 500 ms): how late a job enqueued without one is
    /// seen at worst.
    #[must_use]
    pub fn with_poll_interval(mut self, poll: Duration) -> Self {
        self.poll = poll.max(Duration::from_millis(1));
        self
    }

    /// How often the source counts its queue's jobs for the gauges
    /// (ready, waiting, running: one indexed count; default every 15 s).
    #[must_use]
    pub fn with_count_interval(mut self, every: Duration) -> Self {
        self.count_every = every.max(Duration::from_millis(10));
        self
    }

    /// Counts the queue's jobs by state now, and hands the count to the
    /// gauges (the source does this every count interval while it runs).
    pub async fn read_backlog(&self) -> Result<Backlog, consumer_core::Error> {
        let mut conn = self.pool.acquire().await?;
        let backlog = statements::backlog::<DB>(&mut conn, &self.queue).await?;
        self.last_count.record(backlog);
        Ok(backlog)
    }

    /// Starts what runs beside the source (once); the deleter's handle.
    async fn start(&mut self) -> Deletes {
        if let Some(started) = &self.started {
            return started.deletes.clone();
        }
        let heartbeat = Heartbeat::start(
            self.pool.clone(),
            Arc::clone(&self.holder),
            self.held.clone(),
            self.lease,
        );
        let listener = DB::listen(&self.pool, Arc::clone(&self.nudge)).await;
        let deletes = Deletes::start(self.pool.clone());
        self.started = Some(Started {
            _heartbeat: heartbeat,
            deletes: deletes.clone(),
            listener,
            counter: count_every(
                self.pool.clone(),
                Arc::clone(&self.queue),
                Arc::clone(&self.last_count),
                self.count_every,
            ),
        });
        deletes
    }

    /// Claims in a task of its own, so that a `recv` dropped mid-claim
    /// loses nothing: the next `recv` (or `close`) takes the result.
    fn spawn_claim(&self) -> Claimed {
        let (pool, queue, holder) = (
            self.pool.clone(),
            Arc::clone(&self.queue),
            Arc::clone(&self.holder),
        );
        let (held, lease_ms, batch) = (self.held.clone(), millis(self.lease), self.batch);
        tokio::spawn(async move {
            let mut conn = pool.acquire().await?;
            let rows = statements::claim::<DB>(&mut conn, &queue, &holder, lease_ms, batch).await?;
            for row in &rows {
                held.hold(row.seq, row.claims);
            }
            Ok(rows)
        })
    }

    /// Waits for a wake-up or the poll interval. Cancel-safe.
    async fn wait(&mut self) {
        tokio::select! {
            () = self.nudge.notified() => {}
            _ = self.wake.changed() => {}
            () = tokio::time::sleep(self.poll) => {}
        }
    }

    fn deliver(&self, row: JobRow, deletes: Deletes) -> (Arc<Envelope>, JobAcker<DB>) {
        let acker = JobAcker::new(
            self.pool.clone(),
            deletes,
            row.seq,
            row.claims,
            self.held.clone(),
            Arc::clone(&self.nudge),
        );
        (row.envelope(&self.queue, self.max_body), acker)
    }

    async fn next(&mut self) -> Result<(Arc<Envelope>, JobAcker<DB>), Error> {
        let deletes = self.start().await;
        loop {
            if let Some(row) = self.ready.pop_front() {
                return Ok(self.deliver(row, deletes));
            }
            if let Some(claiming) = &mut self.claiming {
                let claimed = claiming.await;
                self.claiming = None;
                let rows = claimed
                    .map_err(|e| claim_failed(&e.to_string()))?
                    .map_err(|e| claim_failed(&e.to_string()))?;
                self.idle = rows.is_empty();
                self.ready.extend(rows);
                continue;
            }
            if self.idle {
                self.wait().await;
                self.idle = false;
            }
            self.claiming = Some(self.spawn_claim());
        }
    }

    /// Releases what was claimed and never handed out.
    async fn release_unhanded(&mut self) {
        if let Some(claiming) = self.claiming.take()
            && let Ok(Ok(rows)) = claiming.await
        {
            self.ready.extend(rows);
        }
        let Ok(mut conn) = self.pool.acquire().await else {
            return; // their leases end by themselves
        };
        for row in self.ready.drain(..) {
            self.held.forget(row.seq, row.claims);
            if let Err(e) = statements::release::<DB>(&mut conn, row.seq, row.claims).await {
                tracing::debug!(target: "consumer::jobs", error = %e, "releasing a job at close failed");
            }
        }
    }
}

fn claim_failed(why: &str) -> Error {
    Error::broker(
        BrokerErrorKind::Unavailable,
        format!("claiming jobs: {why}"),
        None,
    )
}

impl<DB: JobDatabase> consumer_core::source::Source for JobSource<DB> {
    type Acker = JobAcker<DB>;

    fn limit_body(&mut self, max_bytes: usize) {
        self.max_body = max_bytes;
    }

    fn system(&self) -> &'static str {
        super::SYSTEM
    }

    fn gauges(&self) -> Option<Arc<dyn consumer_core::backend::SourceGauges>> {
        Some(Arc::new(JobGauges {
            queue: Arc::clone(&self.queue),
            last: Arc::clone(&self.last_count),
        }))
    }

    /// The queue, for the service's AsyncAPI document: a retry comes back
    /// on it (its row rescheduled); dead letters go to the store's table,
    /// which is no channel.
    fn channels(&self) -> Option<consumer_core::backend::SourceChannels> {
        use consumer_core::backend::{ChannelDescription, SourceChannels};
        Some(SourceChannels {
            input: ChannelDescription::new(super::SYSTEM, String::from(&*self.queue)),
            retry: None,
            retries_return_on_input: true,
            dead_letter: None,
        })
    }

    /// A retry reschedules the job's row: any delay can be held.
    fn check_redelivery(&self, _longest_delay: Duration) -> Result<(), String> {
        Ok(())
    }

    async fn recv(&mut self) -> Result<Option<(Arc<Envelope>, Self::Acker)>, Error> {
        self.next().await.map(Some)
    }

    async fn close(mut self) {
        self.release_unhanded().await;
    }
}
