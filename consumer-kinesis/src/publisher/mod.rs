//! [`KinesisPublisher`]: sends with `PutRecords`, one result per message,
//! keeping each key's order across partial failures.
//!
//! * **Destination**: a stream's name ([`Outgoing::destination`]), checked
//!   ([`StreamName`]) before any call.
//! * **Record**: the message's key is the `PartitionKey` (a key over 256
//!   characters: a stable digest of it, the key itself in the envelope);
//!   its headers (CloudEvents attributes, trace context) travel in the
//!   record's [envelope]. A message without a key gets
//!   its id as partition key, which spreads such messages over the shards.
//! * **Limits**: at most 500 records and 5 MiB a call; a record over 1 MiB
//!   (data and partition key, as Kinesis counts them) is refused before
//!   any call, as too large: a permanent error.
//! * **Order**: a call holds at most one record of a key, and a key's next
//!   record goes out only once Kinesis stored the one before it (Kinesis
//!   handles the records of one call independently, so two records of a
//!   key in one call could be stored out of order). A record Kinesis
//!   refuses with a code that heals (`ProvisionedThroughputExceededException`,
//!   `InternalFailure`) is sent again after a full-jitter backoff
//!   ([`RetryPolicy`]) while its key's later records wait and other keys go
//!   on; when it fails for good, the key's later records in the same
//!   publish are not sent ([`Error::HeldBack`], retriable, so the caller
//!   sends them again after it).

mod plan;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use bytes::Bytes;
use consumer_backend::{BrokerErrorKind, Message, Outgoing, Publisher, RetryPolicy, Sends, names};

use crate::client::{ApiError, KinesisApi, PutEntry, PutOutcome};
use crate::connection::KinesisClient;
use crate::envelope;
use crate::error::{Error, Result};
use crate::stream_name::StreamName;

pub use plan::{MAX_BYTES_PER_CALL, MAX_RECORD_BYTES, MAX_RECORDS_PER_CALL};
use plan::{Pending, Plan};

/// How a refused record is retried by default: 8 calls in all, full
/// jitter from 50 ms up to 2 s (Kinesis's per-shard write limit is per
/// second).
pub const DEFAULT_RECORD_RETRY: RetryPolicy =
    RetryPolicy::exponential(Duration::from_millis(50), Duration::from_secs(2), 8);

/// Builds a [`KinesisPublisher`].
#[derive(Debug)]
#[must_use]
pub struct KinesisPublisherBuilder {
    client: KinesisClient,
    source: String,
    retry: RetryPolicy,
}

impl KinesisPublisherBuilder {
    /// The CloudEvents `source` of messages that name none (default
    /// `/consumer`).
    pub fn with_source(mut self, source: impl Into<String>) -> Self {
        self.source = source.into();
        self
    }

    /// How a record Kinesis refuses with a code that heals is sent again
    /// within one publish (default [`DEFAULT_RECORD_RETRY`]).
    pub fn with_record_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The publisher. Nothing is contacted until the first publish.
    pub fn build(self) -> KinesisPublisher {
        KinesisPublisher {
            api: self.client.api(),
            source: self.source,
            retry: self.retry,
        }
    }
}

/// Publishes to Kinesis streams; see the module docs.
#[derive(Clone)]
pub struct KinesisPublisher {
    api: Arc<dyn KinesisApi>,
    source: String,
    retry: RetryPolicy,
}

impl std::fmt::Debug for KinesisPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KinesisPublisher")
            .field("source", &self.source)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

impl KinesisPublisher {
    /// A publisher through `client`.
    pub fn builder(client: KinesisClient) -> KinesisPublisherBuilder {
        KinesisPublisherBuilder {
            client,
            source: consumer_backend::DEFAULT_SOURCE.to_owned(),
            retry: DEFAULT_RECORD_RETRY,
        }
    }

    async fn publish_all(&self, batch: &[Outgoing]) -> Vec<Result<()>> {
        let mut results: Vec<Option<Result<()>>> = batch.iter().map(|_| None).collect();
        let mut by_stream: Vec<(&str, Vec<usize>)> = Vec::new();
        for (i, out) in batch.iter().enumerate() {
            match by_stream.iter_mut().find(|(d, _)| *d == out.destination) {
                Some((_, v)) => v.push(i),
                None => by_stream.push((&out.destination, vec![i])),
            }
        }
        for (destination, indices) in by_stream {
            match StreamName::parse(destination) {
                Ok(stream) => {
                    Stream::new(self, stream, &mut results)
                        .publish(batch, indices)
                        .await;
                }
                Err(_) => {
                    for i in indices {
                        // The same refusal for each message (errors are not Clone).
                        results[i] = Some(StreamName::parse(destination).map(drop));
                    }
                }
            }
        }
        let unsettled = || {
            Err(Error::HeldBack {
                stream: String::new(),
            })
        };
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(unsettled))
            .collect()
    }
}

/// One stream's part of a publish.
struct Stream<'p> {
    publisher: &'p KinesisPublisher,
    name: StreamName,
    results: &'p mut [Option<Result<()>>],
    plan: Plan,
}

impl<'p> Stream<'p> {
    fn new(
        publisher: &'p KinesisPublisher,
        name: StreamName,
        results: &'p mut [Option<Result<()>>],
    ) -> Self {
        Self {
            publisher,
            name,
            results,
            plan: Plan::default(),
        }
    }

    /// Sends the messages of `batch` at `indices` until each is stored or
    /// failed for good.
    async fn publish(mut self, batch: &[Outgoing], indices: Vec<usize>) {
        for i in indices {
            match prepare(&self.name, i, &batch[i].message) {
                Ok(p) => self.plan.push(p),
                Err(e) => self.results[i] = Some(Err(e)),
            }
        }
        while !self.plan.is_empty() {
            let calls = self.plan.next_wave(Instant::now().into_std());
            if calls.is_empty() {
                match self.plan.next_ready() {
                    Some(at) => tokio::time::sleep_until(Instant::from_std(at)).await,
                    None => break,
                }
                continue;
            }
            for call in calls {
                self.send(call).await;
            }
        }
    }

    /// One `PutRecords` call; each record stored, queued again, or failed.
    async fn send(&mut self, call: Vec<Pending>) {
        let entries = call.iter().map(|p| p.entry.clone()).collect();
        let answer = self
            .publisher
            .api
            .put_records(self.name.as_str(), entries)
            .await;
        match answer {
            Ok(outcomes) => {
                for (mut pending, outcome) in call.into_iter().zip(outcomes) {
                    pending.attempts += 1;
                    match outcome {
                        PutOutcome::Stored { .. } => self.results[pending.index] = Some(Ok(())),
                        PutOutcome::Failed { code, message } => {
                            let kind = crate::client::kind_of_code(&code)
                                .unwrap_or(BrokerErrorKind::Unavailable);
                            let error = Error::Record {
                                stream: self.name.to_string(),
                                code,
                                message,
                            };
                            self.failed(pending, kind, error);
                        }
                    }
                }
            }
            Err(e) => {
                let (kind, text) = (e.kind(), e.to_string());
                let mut first = Some(e);
                for mut pending in call {
                    pending.attempts += 1;
                    let source = first
                        .take()
                        .unwrap_or_else(|| ApiError::new(kind, text.clone()));
                    let error = Error::Kinesis {
                        operation: "PutRecords",
                        stream: self.name.to_string(),
                        source,
                    };
                    self.failed(pending, kind, error);
                }
            }
        }
    }

    /// `pending` failed with `error` of `kind`: queued again after a
    /// backoff while it can heal and the policy allows, otherwise failed
    /// with its key's later records held back.
    fn failed(&mut self, pending: Pending, kind: BrokerErrorKind, error: Error) {
        let retry = &self.publisher.retry;
        if kind.is_retriable() && retry.should_retry(pending.attempts) {
            let delay = retry.delay(pending.attempts, &mut rand::rng());
            tracing::debug!(
                stream = %self.name,
                attempt = pending.attempts,
                error = %error,
                "Kinesis refused a record; sending it again after {delay:?}"
            );
            self.plan
                .retry(pending, (Instant::now() + delay).into_std());
            return;
        }
        for held in self.plan.abandon(&pending.key) {
            self.results[held.index] = Some(Err(Error::HeldBack {
                stream: self.name.to_string(),
            }));
        }
        self.results[pending.index] = Some(Err(error));
    }
}

/// The record for the message at `index`: its ordering key, partition key
/// and data; over [`MAX_RECORD_BYTES`] is an error before any call.
fn prepare(stream: &StreamName, index: usize, message: &Message) -> Result<Pending> {
    let id = message.headers.get(names::ID).ok().flatten();
    let (key, partition_key) = match (&message.key, id) {
        (Some(key), _) => (key.clone(), envelope::partition_key(key)),
        // A keyless message is ordered with nothing: a queue of its own.
        (None, id) => {
            let spread = id.map_or_else(|| format!("message-{index}"), str::to_owned);
            (format!("\0{index}"), envelope::partition_key(&spread))
        }
    };
    let data = Bytes::from(envelope::encode(message)?);
    let entry = PutEntry {
        partition_key,
        data,
    };
    if entry.size() > MAX_RECORD_BYTES {
        return Err(Error::TooLarge {
            size: entry.size(),
            limit: MAX_RECORD_BYTES,
            stream: stream.to_string(),
        });
    }
    Ok(Pending {
        index,
        key,
        entry,
        attempts: 0,
    })
}

impl Publisher for KinesisPublisher {
    fn system(&self) -> &'static str {
        "aws_kinesis"
    }

    async fn publish(&self, batch: &[Outgoing]) -> Vec<Result<(), consumer_backend::Error>> {
        Sends::around(self.system(), &self.source, batch, async |batch| {
            self.publish_all(batch).await
        })
        .await
    }
}
