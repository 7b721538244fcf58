//! A Kinesis dead-letter stream: where a `KinesisSource` built with
//! `with_dead_letter_stream` sends its letters (key and envelope kept).
//!
//! **Reading changes nothing.** A snapshot lists the stream's shards
//! (`ListShards`, closed parents of a reshard included) and reads each from
//! `TRIM_HORIZON`, parents before children (as the source does), so a
//! key's letters come in the order they were written. Kinesis has no high
//! watermark: a shard's read ends at the first record that arrived after
//! the snapshot began, at an empty page that is not behind the shard's
//! newest record (`MillisBehindLatest` 0), or at the end of a closed shard.
//! Records without the `x-dlq-*` context are counted as foreign and left
//! out. No checkpoint and no lease is written: the tool is no consumer.
//!
//! Records cannot be deleted from a stream: a replayed letter stays in it,
//! and the replay journal is what keeps a rerun from sending it again.
//! `purge` refuses (the stream's retention deletes letters).

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use consumer_core::error::BrokerErrorKind;
use consumer_core::{DeadLetter, Outgoing, Publisher};
use consumer_kinesis::client::{ApiError, IteratorStart, KinesisApi, is_throttled};
use consumer_kinesis::source::MIN_CALL_INTERVAL;
use consumer_kinesis::{KinesisClient, KinesisPublisher, StreamName};
use tokio::time::Instant;

use super::{Held, Snapshot};
use crate::args::Services;
use crate::error::{Error, Result};
use crate::letter::Letter;

/// How long a snapshot may take to read every shard.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// How long to wait after Kinesis throttled a read.
const THROTTLED_WAIT: Duration = Duration::from_secs(1);
/// The most records one `GetRecords` call asks for.
const PAGE: i32 = 10_000;

/// One dead-letter stream.
#[derive(Debug)]
pub struct DeadLetterStream {
    client: KinesisClient,
    stream: StreamName,
    publisher: Option<KinesisPublisher>,
}

/// The Kinesis client the flags name: an endpoint (an emulator), else the
/// AWS SDK's default configuration.
pub async fn client(services: &Services) -> KinesisClient {
    match &services.kinesis_endpoint {
        Some(endpoint) => KinesisClient::local(endpoint),
        None => KinesisClient::from_env().await,
    }
}

/// A publisher for replays and imports: `PutRecords` with each record
/// confirmed, a key's records kept in order across partial failures.
pub fn kinesis_publisher(client: &KinesisClient) -> KinesisPublisher {
    KinesisPublisher::builder(client.clone())
        .with_source("/consumer-cli")
        .build()
}

/// `name`, checked as a stream name Kinesis takes.
pub fn stream_name(name: &str, flag: &str) -> Result<StreamName> {
    StreamName::parse(name).map_err(|e| Error::Usage(format!("{flag}: {e}")))
}

impl DeadLetterStream {
    /// Checks the stream's name, that Kinesis answers and that the stream
    /// exists.
    pub async fn open(services: &Services, stream: &str) -> Result<Self> {
        let stream = stream_name(stream, "--kinesis-stream")?;
        let client = client(services).await;
        client
            .api()
            .list_shards(stream.as_str())
            .await
            .map_err(|e| refusal(services, stream.as_str(), &e))?;
        Ok(Self {
            client,
            stream,
            publisher: None,
        })
    }

    /// `Kinesis stream x`.
    pub fn describe(&self) -> String {
        format!("Kinesis stream {}", self.stream)
    }

    /// Every letter that arrived before now, shard by shard (parents
    /// first); see the module docs.
    pub async fn snapshot(&self) -> Result<Snapshot> {
        let began = SystemTime::now();
        let deadline = Instant::now() + READ_TIMEOUT;
        let api = self.client.api();
        let name = self.stream.as_str();
        let shards = api.list_shards(name).await.map_err(|e| {
            Error::Broker(format!("listing the shards of {}: {e}", self.describe()))
        })?;
        let mut snapshot = Snapshot::default();
        let mut read: HashSet<String> = HashSet::new();
        loop {
            let ready = consumer_kinesis::shards::readable(&shards, |id| read.contains(id));
            if ready.is_empty() {
                break;
            }
            for shard in ready {
                let shard_read = ShardRead {
                    api: api.as_ref(),
                    stream: name,
                    shard: &shard,
                    began,
                    deadline,
                };
                shard_read.read_into(&mut snapshot).await?;
                read.insert(shard);
            }
        }
        Ok(snapshot)
    }

    /// Puts `letter`, context and all, on the stream (its key as the
    /// partition key), confirmed by Kinesis.
    pub async fn append(&mut self, letter: &Letter) -> Result<()> {
        let destination = self.stream.to_string();
        let publisher = self
            .publisher
            .get_or_insert_with(|| kinesis_publisher(&self.client));
        let out = [Outgoing {
            destination: destination.clone(),
            message: letter.letter.to_message(),
        }];
        for r in publisher.publish(&out).await {
            r.map_err(|e| {
                Error::Broker(format!(
                    "putting a record on Kinesis stream {destination}: {e}"
                ))
            })?;
        }
        Ok(())
    }
}

/// One shard being read up to the snapshot's start.
struct ShardRead<'a> {
    api: &'a dyn KinesisApi,
    stream: &'a str,
    shard: &'a str,
    /// When the snapshot began: a record that arrived later is left out.
    began: SystemTime,
    deadline: Instant,
}

impl ShardRead<'_> {
    /// Reads the shard from its oldest record into `snapshot`.
    async fn read_into(&self, snapshot: &mut Snapshot) -> Result<()> {
        let mut iterator = self
            .api
            .shard_iterator(self.stream, self.shard, &IteratorStart::TrimHorizon)
            .await
            .map_err(|e| self.failed("GetShardIterator", &e))?;
        loop {
            let page = match self.api.get_records(&iterator, PAGE).await {
                Ok(page) => page,
                Err(e) if is_throttled(&e) => {
                    self.wait(THROTTLED_WAIT).await?;
                    continue;
                }
                Err(e) => return Err(self.failed("GetRecords", &e)),
            };
            let caught_up = page.records.is_empty() && page.millis_behind_latest.unwrap_or(0) == 0;
            for record in &page.records {
                if record.arrival.is_some_and(|t| t > self.began) {
                    return Ok(());
                }
                match consumer_kinesis::envelope::decode(&record.data, &record.partition_key)
                    .ok()
                    .and_then(|m| DeadLetter::from_message(&m))
                {
                    Some(dl) => snapshot.letters.push(Held {
                        letter: Letter::new(dl),
                        handle: 0,
                    }),
                    None => snapshot.foreign += 1,
                }
            }
            match page.next_iterator {
                Some(next) if !caught_up => iterator = next,
                // The end of a closed shard, or nothing newer than the read.
                _ => return Ok(()),
            }
            // Kinesis allows five reads a second per shard, shared with
            // the consumers reading it.
            self.wait(MIN_CALL_INTERVAL).await?;
        }
    }

    /// Waits `pause` unless that passes the snapshot's deadline.
    async fn wait(&self, pause: Duration) -> Result<()> {
        if Instant::now() + pause > self.deadline {
            return Err(Error::Broker(format!(
                "Kinesis stream {} was not read up to the snapshot's start within {}s (shard {} is still behind): run again, or read it when fewer letters arrive",
                self.stream,
                READ_TIMEOUT.as_secs(),
                self.shard
            )));
        }
        tokio::time::sleep(pause).await;
        Ok(())
    }

    fn failed(&self, call: &str, e: &ApiError) -> Error {
        Error::Broker(format!(
            "{call} on shard {} of Kinesis stream {}: {e}",
            self.shard, self.stream
        ))
    }
}

/// What a refused `ListShards` means: no such stream, or no Kinesis.
fn refusal(services: &Services, stream: &str, e: &ApiError) -> Error {
    match e.kind() {
        BrokerErrorKind::NoDestination => Error::NoSuchQueue {
            queue: format!("Kinesis stream {stream}"),
            address: address(services),
        },
        BrokerErrorKind::NotAuthorized => Error::Refused(format!(
            "Kinesis refused to list the shards of stream {stream}: {e}"
        )),
        _ => unreachable(services, e),
    }
}

fn address(services: &Services) -> String {
    services
        .kinesis_endpoint
        .clone()
        .unwrap_or_else(|| "AWS (the SDK's configuration)".to_owned())
}

/// Kinesis did not answer.
pub fn unreachable(services: &Services, e: &dyn std::fmt::Display) -> Error {
    Error::Unreachable {
        service: "Kinesis",
        address: address(services),
        reason: e.to_string(),
        hint: "--kinesis-endpoint or KINESIS_ENDPOINT (else the AWS SDK's configuration)",
    }
}
