//! [`JobAcker`]: settles one job. Ack deletes its row, a retry
//! reschedules the row, a dead letter goes to the store's dead-letter
//! table, and a delivery dropped unsettled is released.

use std::sync::Arc;

use consumer_core::backend::{BrokerErrorKind, Error, RetryCopy};
use consumer_core::store::{Store, headers_json};
use consumer_core::{DeadLetter, Message};
use sqlx::Pool;
use tokio::sync::Notify;

use super::JobDatabase;
use super::deletes::Deletes;
use super::lease::Held;
use super::statements;

/// Why a job's dead letter is in the store's table: the queue has no
/// dead-letter destination of its own; the table is it.
pub const DEAD_LETTER_REFUSAL: &str = "job queue: dead letters are kept in this table";

/// Settles one job delivered by a [`JobSource`](super::JobSource).
///
/// Every settle names the delivery by the job's `seq` and its claim
/// count: once the lease ended and another worker claimed the job, this
/// one's settles change nothing (the other delivery settles it; the store's
/// dedup keeps its effect single).
#[derive(Debug)]
pub struct JobAcker<DB: JobDatabase> {
    pool: Pool<DB>,
    deletes: Deletes,
    seq: i64,
    claims: i64,
    held: Held,
    /// Rung when the row is gone or free, so the source claims the key's
    /// next job now rather than at its next poll.
    settled_wake: Arc<Notify>,
    /// The row no longer needs an ack: it was rescheduled.
    rescheduled: bool,
    settled: bool,
}

fn unavailable(what: &str, e: sqlx::Error) -> Error {
    Error::broker(
        BrokerErrorKind::Unavailable,
        format!("{what}: {e}"),
        Some(Box::new(e)),
    )
}

impl<DB: JobDatabase> JobAcker<DB> {
    pub(crate) fn new(
        pool: Pool<DB>,
        deletes: Deletes,
        seq: i64,
        claims: i64,
        held: Held,
        settled_wake: Arc<Notify>,
    ) -> Self {
        Self {
            pool,
            deletes,
            seq,
            claims,
            held,
            settled_wake,
            rescheduled: false,
            settled: false,
        }
    }

    fn done(&mut self) {
        self.settled = true;
        self.held.forget(self.seq, self.claims);
        self.settled_wake.notify_one();
    }

    fn lost(&self, what: &str) {
        tracing::debug!(
            target: "consumer::jobs",
            seq = self.seq,
            claims = self.claims,
            "{what}: the lease had ended and another worker holds the job"
        );
    }
}

impl<DB: JobDatabase> consumer_core::source::Acker for JobAcker<DB> {
    async fn ack(mut self) -> Result<(), Error> {
        if !self.rescheduled {
            let deleted = self
                .deletes
                .delete(self.seq, self.claims)
                .await
                .map_err(|e| Error::broker(BrokerErrorKind::Unavailable, e, None))?;
            if !deleted {
                self.lost("ack");
            }
        }
        self.done();
        Ok(())
    }

    async fn release(mut self) -> Result<(), Error> {
        if !self.rescheduled {
            let mut conn = self
                .pool
                .acquire()
                .await
                .map_err(|e| unavailable("release", e))?;
            statements::release::<DB>(&mut conn, self.seq, self.claims)
                .await
                .map_err(|e| unavailable("releasing a job", e))?;
        }
        self.done();
        Ok(())
    }

    async fn publish_dead_letter(&mut self, letter: &Message) -> Result<(), Error> {
        let Some(letter) = DeadLetter::from_message(letter) else {
            // Not a letter the runtime built: its own fallback (the same
            // table) takes it.
            return Err(Error::broker(
                BrokerErrorKind::Rejected,
                "the job queue reads dead letters the runtime built only",
                None,
            ));
        };
        Store::new(self.pool.clone())
            .store_dead_letter(&letter, DEAD_LETTER_REFUSAL)
            .await
            .map_err(|e| {
                Error::broker(
                    BrokerErrorKind::Unavailable,
                    format!("storing a job's dead letter: {e}"),
                    Some(Box::new(e)),
                )
            })?;
        Ok(())
    }

    async fn publish_retry(&mut self, copy: &RetryCopy) -> Result<(), Error> {
        let headers = headers_json(&copy.message.headers);
        let due_ms = i64::try_from(copy.due.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX);
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| unavailable("retry", e))?;
        let retry = statements::Retry {
            headers: &headers,
            attempt: i64::from(copy.attempt),
            due_ms,
            error: copy.error.as_deref(),
        };
        let moved = statements::reschedule::<DB>(&mut conn, self.seq, self.claims, &retry)
            .await
            .map_err(|e| unavailable("rescheduling a job", e))?;
        if !moved {
            self.lost("retry");
        }
        // The row is the retry: the runtime's ack afterwards deletes nothing.
        self.rescheduled = true;
        Ok(())
    }
}

impl<DB: JobDatabase> Drop for JobAcker<DB> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        // No longer renewed: the lease ends by itself if the release below
        // cannot run.
        self.held.forget(self.seq, self.claims);
        if self.rescheduled {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (pool, seq, claims) = (self.pool.clone(), self.seq, self.claims);
        let wake = Arc::clone(&self.settled_wake);
        runtime.spawn(async move {
            if let Ok(mut conn) = pool.acquire().await
                && statements::release::<DB>(&mut conn, seq, claims)
                    .await
                    .is_ok()
            {
                wake.notify_one();
            }
        });
    }
}
