//! Acks in groups: the rows of finished jobs deleted by one statement per
//! group rather than one each.
//!
//! An ack hands its job to the source's deleter task and waits for the
//! answer, so it still returns only once its row is gone (a key's next job
//! is claimable, the settled wake-up rings after). The task deletes what
//! arrived while its previous statement ran, up to [`GROUP`] jobs: alone, a
//! job goes at once; under load, the acks of a batch share one statement
//! and one commit (PostgreSQL: `DELETE … USING unnest(..)`), which is what
//! a hand-written loop that deletes its batch does.

use sqlx::Pool;
use tokio::sync::{mpsc, oneshot};

use super::JobDatabase;

/// The most jobs one statement deletes.
const GROUP: usize = 256;

/// One ack waiting: the delivery (`seq`, `claims`) and where its answer
/// goes (whether the row was still this delivery's).
type Waiting = ((i64, i64), oneshot::Sender<Result<bool, String>>);

/// The handle ackers send to; the task ends when every handle is gone.
#[derive(Debug, Clone)]
pub(crate) struct Deletes {
    tx: mpsc::UnboundedSender<Waiting>,
}

impl Deletes {
    /// Starts the deleter task on `pool` (on the current runtime).
    pub(crate) fn start<DB: JobDatabase>(pool: Pool<DB>) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(pool, rx));
        Self { tx }
    }

    /// Deletes the row of delivery (`seq`, `claims`); false if it was no
    /// longer this delivery's (its lease had passed to another worker).
    pub(crate) async fn delete(&self, seq: i64, claims: i64) -> Result<bool, String> {
        let (answer, answered) = oneshot::channel();
        self.tx
            .send(((seq, claims), answer))
            .map_err(|_| String::from("the job deleter has stopped"))?;
        answered
            .await
            .map_err(|_| String::from("the job deleter has stopped"))?
    }
}

async fn run<DB: JobDatabase>(pool: Pool<DB>, mut rx: mpsc::UnboundedReceiver<Waiting>) {
    let mut group: Vec<Waiting> = Vec::with_capacity(GROUP);
    while let Some(first) = rx.recv().await {
        group.push(first);
        while group.len() < GROUP {
            match rx.try_recv() {
                Ok(next) => group.push(next),
                Err(_) => break,
            }
        }
        let settled: Vec<(i64, i64)> = group.iter().map(|(d, _)| *d).collect();
        let deleted = match pool.acquire().await {
            Ok(mut conn) => DB::delete_settled(&mut conn, &settled).await,
            Err(e) => Err(e),
        };
        for ((delivery, answer), i) in group.drain(..).zip(0..) {
            let _ = answer.send(match &deleted {
                Ok(gone) => Ok(gone.get(i).copied().unwrap_or(false)),
                Err(e) => Err(format!("deleting a finished job {delivery:?}: {e}")),
            });
        }
    }
}
