//! [`Jobs`]: enqueueing jobs, in the caller's transaction or on their own.

use consumer_core::Outgoing;
use consumer_core::envelope::names;
use consumer_core::error::Error;
use consumer_core::outbox::InTransaction;
use consumer_core::store::headers_json;
use consumer_core::trace::Sends;
use sqlx::Pool;

use super::job::{Enqueued, Job};
use super::publisher::JobPublisher;
use super::recurring::Scheduler;
use super::source::JobSource;
use super::statements::{self, JobInsert};
use super::wake::Wake;
use super::{DEFAULT_QUEUE, JobDatabase};

/// A job queue's handle: which queue (named queues share one table) and
/// the in-process wake-up of the workers made from it. Cheap to clone.
///
/// A job is a framework [`Message`](consumer_core::Message): `Message::json("SendWelcome", &job)`,
/// with a key where jobs of that key must run in order. Workers hand it to
/// the same `#[handler]`s and routers a broker's messages go to.
#[derive(Debug, Clone)]
pub struct Jobs {
    queue: String,
    wake: Wake,
    notify_in_transaction: bool,
}

impl Default for Jobs {
    fn default() -> Self {
        Self::new(DEFAULT_QUEUE)
    }
}

impl Jobs {
    /// The handle of `queue`.
    pub fn new(queue: impl Into<String>) -> Self {
        Self {
            queue: queue.into(),
            wake: Wake::default(),
            notify_in_transaction: false,
        }
    }

    /// The handle of another queue, sharing this one's in-process wake-up
    /// (one enqueue rings the workers of both).
    #[must_use]
    pub fn with_queue(&self, queue: impl Into<String>) -> Self {
        Self {
            queue: queue.into(),
            wake: self.wake.clone(),
            notify_in_transaction: self.notify_in_transaction,
        }
    }

    /// PostgreSQL: [`enqueue`](Self::enqueue) also `NOTIFY`s from inside
    /// the caller's transaction, so the workers of every process wake the
    /// moment it commits, with no [`notify`](Self::notify) afterwards: for
    /// jobs enqueued where no code runs after the commit (a `#[handler]`'s
    /// follow-up jobs, whose transaction the runtime commits). The cost:
    /// PostgreSQL takes one lock for every notifying transaction's commit,
    /// so concurrent writers commit one at a time (measured on the outbox:
    /// eight writers lost about a third of their commit rate). SQLite has
    /// no channel: nothing changes there.
    #[must_use]
    pub fn with_notify_in_transaction(mut self) -> Self {
        self.notify_in_transaction = true;
        self
    }

    /// The queue's name.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// Writes `job` (a [`Message`](consumer_core::Message), or a [`Job`] with its due time,
    /// priority or unique key) in the caller's transaction (a sqlx
    /// `Transaction`, or a `#[handler]`'s `tx`): the job exists if and only
    /// if that transaction commits.
    ///
    /// No `NOTIFY` is sent from inside the transaction (it would make every
    /// writer's commit queue on PostgreSQL's notification lock; see
    /// [`with_notify_in_transaction`](Self::with_notify_in_transaction)):
    /// workers see the job at their next poll, or at once if
    /// [`notify`](Self::notify) is called after the commit.
    pub async fn enqueue<C>(&self, tx: &mut C, job: impl Into<Job>) -> Result<Enqueued, Error>
    where
        C: InTransaction + ?Sized,
        C::Database: JobDatabase,
    {
        let Job {
            message,
            due,
            priority,
            unique_key,
            unique_window,
        } = job.into();
        let batch = [Outgoing {
            destination: self.queue.clone(),
            message,
        }];
        // The enqueue is the job's send: its span, a child of the caller's
        // context, is the parent of the worker's.
        let sends = Sends::start(super::SYSTEM, &batch);
        // `Sends` hands back the batch it was given, message for message.
        let Some(out) = sends.batch().first() else {
            return Err(Error::Config(
                "the enqueue's send span returned no message: nothing was written".into(),
            ));
        };
        let job = Job {
            message: out.message.clone(),
            due,
            priority,
            unique_key,
            unique_window,
        };
        let mut result = insert::<C::Database>(tx.connection(), &self.queue, &job).await;
        if self.notify_in_transaction && matches!(result, Ok(Enqueued::Added { .. })) {
            let notified = C::Database::announce_in(tx.connection(), &self.queue).await;
            if let Err(e) = notified {
                result = Err(e.into());
            }
        }
        let outcome = match &result {
            Ok(_) => Ok(()),
            Err(e) => Err(consumer_core::backend::Error::broker(
                consumer_core::backend::BrokerErrorKind::Unavailable,
                e.to_string(),
                None,
            )),
        };
        sends.finish(&[outcome]);
        result
    }

    /// Writes `job` in a transaction of its own and wakes the workers (of
    /// this process, and on PostgreSQL of every process) once it has
    /// committed.
    pub async fn enqueue_now<DB: JobDatabase>(
        &self,
        pool: &Pool<DB>,
        job: impl Into<Job>,
    ) -> Result<Enqueued, Error> {
        let mut tx = pool.begin().await?;
        let enqueued = self.enqueue(&mut tx, job).await?;
        tx.commit().await?;
        self.notify(pool).await?;
        Ok(enqueued)
    }

    /// Wakes the workers of this queue now: call it after committing a
    /// transaction that [enqueued](Self::enqueue), for a start in
    /// milliseconds rather than at the next poll. The wake-up is a hint,
    /// sent outside any transaction; a lost one costs one poll interval.
    pub async fn notify<DB: JobDatabase>(&self, pool: &Pool<DB>) -> Result<(), Error> {
        self.wake.ring();
        DB::announce(pool, &self.queue).await?;
        Ok(())
    }

    /// The workers' source of this queue on `pool`.
    pub fn source<DB: JobDatabase>(&self, pool: Pool<DB>) -> JobSource<DB> {
        JobSource::new(pool, self.queue.clone().into(), self.wake.clone())
    }

    /// The [`Scheduler`] of this queue's [`Recurring`](crate::Recurring)
    /// jobs on `pool` (add them with [`Scheduler::with`]).
    pub fn scheduler<DB: JobDatabase>(&self, pool: Pool<DB>) -> Scheduler<DB> {
        Scheduler::new(pool, self.clone())
    }

    /// A [`Publisher`](consumer_core::Publisher) that enqueues each message
    /// on the queue its destination names, one transaction per batch.
    pub fn publisher<DB: JobDatabase>(&self, pool: Pool<DB>) -> JobPublisher<DB> {
        JobPublisher::new(pool, self.wake.clone())
    }

    /// Jobs of this queue not finished yet: waiting, running, or waiting
    /// to retry.
    pub async fn pending<DB: JobDatabase>(&self, pool: &Pool<DB>) -> Result<i64, Error> {
        let mut conn = pool.acquire().await?;
        Ok(statements::pending::<DB>(&mut conn, &self.queue).await?)
    }
}

/// Inserts `job` on `queue` through `conn`, its id its message's `ce_id`
/// or a new UUIDv7.
pub(crate) async fn insert<DB: JobDatabase>(
    conn: &mut DB::Connection,
    queue: &str,
    job: &Job,
) -> Result<Enqueued, Error> {
    let message = &job.message;
    let id = match message.headers.get(names::ID) {
        Ok(Some(id)) if !id.is_empty() => id.to_owned(),
        _ => uuid::Uuid::now_v7().to_string(),
    };
    // A key unique over a window is taken first, in this transaction: a
    // rollback frees it again.
    let windowed = match (&job.unique_key, job.unique_window_millis()) {
        (Some(unique), Some(window_ms)) => {
            if !statements::take_unique::<DB>(conn, queue, unique, window_ms).await? {
                return Ok(Enqueued::WithinWindow);
            }
            true
        }
        _ => false,
    };
    if let Some(key) = &message.key {
        DB::lock_key(conn, queue, key).await?;
    }
    let headers = headers_json(&message.headers);
    let (at_ms, delay_ms) = job.due_millis();
    let row = JobInsert {
        queue,
        id: &id,
        key: message.key.as_deref(),
        headers: &headers,
        payload: &message.payload,
        at_ms,
        delay_ms,
        priority: job.priority,
        // A windowed key lives in its own table, not in the pending index.
        unique_key: job.unique_key.as_deref().filter(|_| !windowed),
    };
    Ok(if statements::insert::<DB>(conn, &row).await? {
        Enqueued::Added { id }
    } else {
        Enqueued::AlreadyPending
    })
}
