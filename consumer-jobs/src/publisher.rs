//! [`JobPublisher`]: the job queue as a [`Publisher`]: what the outbox
//! relay, tests and applications publish through.

use std::collections::BTreeSet;

use consumer_core::backend::{BrokerErrorKind, Error};
use consumer_core::trace::Sends;
use consumer_core::{Outgoing, Publisher};
use sqlx::Pool;

use super::JobDatabase;
use super::job::Job;
use super::jobs::insert;
use super::wake::Wake;

/// Enqueues each message on the queue its destination names, all of a
/// batch in one transaction (every result is the commit's), then wakes the
/// workers. Made by [`Jobs::publisher`](super::Jobs::publisher).
#[derive(Debug)]
pub struct JobPublisher<DB: JobDatabase> {
    pool: Pool<DB>,
    wake: Wake,
}

impl<DB: JobDatabase> Clone for JobPublisher<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            wake: self.wake.clone(),
        }
    }
}

impl<DB: JobDatabase> JobPublisher<DB> {
    pub(crate) fn new(pool: Pool<DB>, wake: Wake) -> Self {
        Self { pool, wake }
    }

    async fn publish_all(&self, batch: &[Outgoing]) -> Result<(), consumer_core::Error> {
        let mut tx = self.pool.begin().await?;
        for out in batch {
            insert::<DB>(&mut tx, &out.destination, &Job::new(out.message.clone())).await?;
        }
        tx.commit().await?;
        self.wake.ring();
        let queues: BTreeSet<&str> = batch.iter().map(|o| o.destination.as_str()).collect();
        for queue in queues {
            // Committed: a wake-up that does not go out costs a poll.
            if let Err(e) = DB::announce(&self.pool, queue).await {
                tracing::debug!(target: "consumer::jobs", error = %e, queue, "NOTIFY failed");
            }
        }
        Ok(())
    }
}

impl<DB: JobDatabase> Publisher for JobPublisher<DB> {
    fn system(&self) -> &'static str {
        super::SYSTEM
    }

    async fn publish(&self, batch: &[Outgoing]) -> Vec<Result<(), Error>> {
        let sends = Sends::start(self.system(), batch);
        let results = self.publish_unspanned(sends.batch()).await;
        sends.finish(&results);
        results
    }
}

impl<DB: JobDatabase> JobPublisher<DB> {
    async fn publish_unspanned(&self, batch: &[Outgoing]) -> Vec<Result<(), Error>> {
        match self.publish_all(batch).await {
            Ok(()) => batch.iter().map(|_| Ok(())).collect(),
            Err(e) => {
                let text = e.to_string();
                batch
                    .iter()
                    .map(|_| {
                        Err(Error::broker(
                            BrokerErrorKind::Unavailable,
                            format!("enqueueing jobs: {text}"),
                            None,
                        ))
                    })
                    .collect()
            }
        }
    }
}
