//! An SQS dead-letter queue (`<queue>-dlq`, `<base>-dlq.fifo` by default).
//!
//! **Reading neither loses nor reorders letters.** A snapshot receives
//! every message present, each kept invisible for [`HOLD`] while the tool
//! holds it, and deletes none: if the tool dies, SQS makes them visible
//! again when the hold ends. [`DeadLetterQueue::release`] makes every letter
//! not removed visible again at once (visibility 0); on a FIFO queue each
//! group's letters come back in their order. Only a letter the tool removes
//! (a purge, a replay whose send SQS confirmed) is deleted. SQS counts
//! each read in the letter's `ApproximateReceiveCount` (a dead-letter queue
//! has no redrive policy of its own to act on it).
//!
//! On a FIFO queue SQS hands out no more of a group while some of its
//! messages are held: a snapshot reads, of each group, what the receive
//! that first returned it held (ten messages at most, fewer when a receive
//! took several groups at once). It says how many it could not read (the
//! queue's `ApproximateNumberOfMessages` less what it read), and a replay
//! or a purge run again goes on with the rest.

use std::sync::Arc;

use consumer_core::{DeadLetter, Message, Outgoing, Publisher};
use consumer_sqs::client::{ReceiptEntry, ReceiveRequest, SqsApi, VisibilityEntry};
use consumer_sqs::names::QueueName;
use consumer_sqs::{SqsClient, SqsPublisher};

use super::{Held, Snapshot};
use crate::args::Services;
use crate::error::{Error, Result};
use crate::letter::Letter;

/// How long a snapshot keeps its letters invisible (SQS gives them back
/// after it if the tool dies).
pub const HOLD: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// One dead-letter queue.
#[derive(Debug)]
pub struct DeadLetterQueue {
    client: SqsClient,
    queue: QueueName,
    url: String,
    /// The receipt handle of each held letter, by handle; `None` once removed.
    receipts: Vec<Option<String>>,
    publisher: Option<SqsPublisher>,
}

/// The SQS client the flags name: an endpoint (an emulator), else the AWS
/// SDK's default configuration.
pub async fn client(services: &Services) -> SqsClient {
    match &services.sqs_endpoint {
        Some(endpoint) => SqsClient::local(endpoint),
        None => SqsClient::from_env().await,
    }
}

fn broker(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Broker(format!("{what}: {e}"))
}

impl DeadLetterQueue {
    /// Checks the queue's name and that it exists.
    pub async fn open(services: &Services, queue: &str) -> Result<Self> {
        let name = QueueName::parse(queue).map_err(|e| Error::Usage(e.to_string()))?;
        let client = client(services).await;
        let url = match name.url() {
            Some(url) => url.to_owned(),
            None => match client.api().queue_url(name.name()).await {
                Ok(url) => url,
                Err(e) if e.kind() == consumer_core::error::BrokerErrorKind::NoDestination => {
                    return Err(Error::NoSuchQueue {
                        queue: name.to_string(),
                        address: services
                            .sqs_endpoint
                            .clone()
                            .unwrap_or_else(|| "AWS (the SDK's configuration)".to_owned()),
                    });
                }
                Err(e) => return Err(unreachable(services, &e)),
            },
        };
        Ok(Self {
            client,
            queue: name,
            url,
            receipts: Vec::new(),
            publisher: None,
        })
    }

    /// `SQS queue x`.
    pub fn describe(&self) -> String {
        format!("SQS queue {}", self.queue)
    }

    fn api(&self) -> Arc<dyn SqsApi> {
        self.client.api()
    }

    /// Receives every letter present now and holds it; see the module docs.
    pub async fn snapshot(&mut self) -> Result<Snapshot> {
        let api = self.api();
        let present: u64 = api
            .queue_attributes(&self.url)
            .await
            .map_err(|e| broker("reading the queue's attributes", e))?
            .get("ApproximateNumberOfMessages")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut snapshot = Snapshot::default();
        let mut read = 0u64;
        loop {
            let got = api
                .receive(ReceiveRequest {
                    queue_url: &self.url,
                    max: 10,
                    wait_seconds: 1,
                    visibility_seconds: i32::try_from(HOLD.as_secs()).unwrap_or(900),
                    attempt_id: None,
                })
                .await
                .map_err(|e| broker(&format!("receiving from {}", self.queue), e))?;
            if got.is_empty() {
                break;
            }
            for m in got {
                read += 1;
                let consumer_sqs::attributes::Unpacked {
                    headers, payload, ..
                } = consumer_sqs::attributes::unpack(&m.body, &m.attributes);
                let message = Message {
                    key: m.group_id().map(str::to_owned),
                    headers,
                    payload,
                };
                let handle = self.receipts.len() as u64;
                self.receipts.push(Some(m.receipt_handle));
                match DeadLetter::from_message(&message) {
                    Some(dl) => snapshot.letters.push(Held {
                        letter: Letter::new(dl),
                        handle,
                    }),
                    None => snapshot.foreign += 1,
                }
            }
        }
        snapshot.held_back = present.saturating_sub(read);
        Ok(snapshot)
    }

    /// Deletes the letter.
    pub async fn remove(&mut self, handle: u64) -> Result<()> {
        let Some(receipt) = usize::try_from(handle)
            .ok()
            .and_then(|i| self.receipts.get_mut(i))
            .and_then(Option::take)
        else {
            return Err(Error::Broker("no such held letter".into()));
        };
        let outcome = self
            .api()
            .delete_batch(
                &self.url,
                vec![ReceiptEntry {
                    id: "0".into(),
                    receipt_handle: receipt,
                }],
            )
            .await
            .map_err(|e| broker(&format!("deleting from {}", self.queue), e))?;
        match outcome.failed.first() {
            None => Ok(()),
            Some(f) => Err(Error::Broker(format!(
                "deleting from {}: {} ({})",
                self.queue, f.code, f.message
            ))),
        }
    }

    /// Sends `letter`, context and all, to the queue (its key as the FIFO
    /// group), confirmed by SQS.
    pub async fn append(&mut self, letter: &Letter) -> Result<()> {
        let publisher = self.publisher().await?;
        let out = [Outgoing {
            destination: self.url.clone(),
            message: letter.letter.to_message(),
        }];
        for r in publisher.publish(&out).await {
            r.map_err(|e| broker(&format!("sending to {}", self.queue), e))?;
        }
        Ok(())
    }

    async fn publisher(&mut self) -> Result<SqsPublisher> {
        if self.publisher.is_none() {
            self.publisher = Some(sqs_publisher(&self.client).await?);
        }
        self.publisher
            .clone()
            .ok_or_else(|| Error::Other("no SQS publisher".into()))
    }

    /// Makes every held letter not removed visible again, in its order.
    pub async fn release(self) -> Result<()> {
        let api = self.api();
        let held: Vec<String> = self.receipts.into_iter().flatten().collect();
        for chunk in held.chunks(10) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, r)| VisibilityEntry {
                    id: i.to_string(),
                    receipt_handle: r.clone(),
                    seconds: 0,
                })
                .collect();
            let outcome = api
                .change_visibility_batch(&self.url, entries)
                .await
                .map_err(|e| broker(&format!("giving letters back to {}", self.queue), e))?;
            if let Some(f) = outcome.failed.first() {
                return Err(Error::Broker(format!(
                    "giving letters back to {}: {} ({}); they come back when their hold of {} min ends",
                    self.queue,
                    f.code,
                    f.message,
                    HOLD.as_secs() / 60
                )));
            }
        }
        Ok(())
    }
}

/// A publisher on `client`.
pub async fn sqs_publisher(client: &SqsClient) -> Result<SqsPublisher> {
    SqsPublisher::builder(client.clone())
        .with_source("/consumer-cli")
        .connect()
        .await
        .map_err(|e| broker("the SQS publisher", e))
}

/// SQS did not answer.
pub fn unreachable(services: &Services, e: &dyn std::fmt::Display) -> Error {
    Error::Unreachable {
        service: "SQS",
        address: services
            .sqs_endpoint
            .clone()
            .unwrap_or_else(|| "AWS (the SDK's configuration)".to_owned()),
        reason: e.to_string(),
        hint: "--sqs-endpoint or SQS_ENDPOINT (else the AWS SDK's configuration)",
    }
}
