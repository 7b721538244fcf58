//! [`KinesisAcker`]: settles one record of a
//! [`KinesisSource`](super::KinesisSource).

use std::sync::Arc;

use consumer_backend::{Acker, BrokerErrorKind, Error, Message, RetryCopy};

use super::dead_letter::LetterSink;
use super::session::Session;
use consumer_backend::observe::{Happened, Release, SourceObserver};

/// Settles one Kinesis record. Kinesis acknowledges nothing per record:
/// settling moves the shard's checkpoint ledger.
///
/// * `ack`: the record is done; the shard's checkpoint moves past it once
///   every earlier record of the shard is done too.
/// * `publish_dead_letter`: sends the letter to the source's dead-letter
///   destination (a Kinesis stream or an SQS queue) and waits for its
///   confirmation; without one configured it answers
///   [`BrokerErrorKind::NoDestination`], and the runtime keeps the letter
///   in the store's dead-letter table.
/// * `publish_retry`: refused: Kinesis has no per-record redelivery, and
///   the source refuses a handler retrying through the broker at start.
/// * `release`, or dropped unsettled: the checkpoint stays below the
///   record, and the shard is read again from the checkpoint once the
///   runtime holds nothing else of it (dedup skips what had settled).
pub struct KinesisAcker {
    pub(super) session: Arc<Session>,
    pub(super) epoch: u64,
    pub(super) index: u64,
    pub(super) letters: Option<Arc<dyn LetterSink>>,
    pub(super) observer: SourceObserver,
    pub(super) settled: bool,
}

impl std::fmt::Debug for KinesisAcker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KinesisAcker")
            .field("shard", &self.session.shard_id)
            .field("epoch", &self.epoch)
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl Acker for KinesisAcker {
    async fn ack(mut self) -> Result<(), Error> {
        self.settled = true;
        self.session.settle(self.epoch, self.index);
        Ok(())
    }

    async fn release(mut self) -> Result<(), Error> {
        self.settled = true;
        self.session.release(self.epoch, self.index);
        self.observer.emit(Happened::Released {
            count: 1,
            why: Release::Asked,
        });
        Ok(())
    }

    async fn publish_dead_letter(&mut self, letter: &Message) -> Result<(), Error> {
        let Some(sink) = &self.letters else {
            return Err(Error::broker(
                BrokerErrorKind::NoDestination,
                "this Kinesis source has no dead-letter destination",
                None,
            ));
        };
        if let Err(e) = sink.send(letter).await {
            self.observer.emit(Happened::DeadLetterRefused {
                destination: sink.destination(),
                error: &e,
            });
            return Err(e);
        }
        self.observer.emit(Happened::DeadLettered);
        Ok(())
    }

    async fn publish_retry(&mut self, _copy: &RetryCopy) -> Result<(), Error> {
        Err(Error::broker(
            BrokerErrorKind::NoDestination,
            "Kinesis has no per-record redelivery: retries happen in place",
            None,
        ))
    }
}

impl Drop for KinesisAcker {
    fn drop(&mut self) {
        if !self.settled {
            self.session.release(self.epoch, self.index);
            self.observer.emit(Happened::Released {
                count: 1,
                why: Release::Dropped,
            });
        }
    }
}
