//! [`SqsPublisher`]: sends with `SendMessageBatch`, one result per message.
//!
//! * **Destination**: a queue's name or URL ([`Outgoing::destination`]);
//!   names are resolved once with `GetQueueUrl` and checked before any
//!   call.
//! * **FIFO queues**: `MessageGroupId` is the message's key (the outbox's
//!   aggregate id), so a group's messages keep their order; a message
//!   without a key is a group of its own (its id). `MessageDeduplicationId`
//!   is the message's id (`ce_id`): the same message published twice
//!   within SQS's five-minute window (a relay that crashed before marking
//!   it published) is stored once. A key or id SQS refuses as a group or
//!   deduplication id is hashed ([`names`](crate::names)), and the key
//!   travels as `ce_partitionkey` too.
//! * **Order**: a `SendMessageBatch` call holds at most one message per
//!   group, and a group's next message goes out only once SQS confirmed
//!   the one before; when one fails, the group's later messages in the
//!   same publish are not sent (a retriable error, so the caller sends
//!   them again after it), and the other groups go on.
//! * **Limits**: ten messages and 256 KiB per call; a message over the
//!   queue's `MaximumMessageSize` (body and attributes, as SQS counts
//!   them) is refused before it is sent, as too large. Headers become
//!   message attributes as [`attributes`] says.
//! * **Standard queues**: no group, no deduplication id, no order.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use consumer_backend::{ChannelDescription, Headers, Message, Outgoing, Publisher, Sends, names};

use crate::attributes;
use crate::client::{SendEntry, SqsApi};
use crate::connection::SqsClient;
use crate::error::{Error, Result};
use crate::names::{QueueName, group_id};
use crate::topology::DEFAULT_MAX_MESSAGE_BYTES;

/// The most bytes of messages one `SendMessageBatch` carries (a message
/// larger than this goes alone).
const BATCH_BYTES: usize = 262_144;

/// Builds an [`SqsPublisher`].
#[derive(Debug)]
#[must_use]
pub struct SqsPublisherBuilder {
    client: SqsClient,
    source: String,
}

impl SqsPublisherBuilder {
    /// The CloudEvents `source` of messages that name none (default
    /// `/consumer`).
    pub fn with_source(mut self, source: impl Into<String>) -> Self {
        self.source = source.into();
        self
    }

    /// The publisher. Nothing is contacted until the first publish to a
    /// destination.
    pub async fn connect(self) -> Result<SqsPublisher> {
        Ok(SqsPublisher {
            api: self.client.api(),
            source: self.source,
            queues: Arc::default(),
        })
    }
}

/// One message ready to send: its index in the publish, its entry, its
/// group and its size as SQS counts it.
struct Prepared {
    index: usize,
    entry: SendEntry,
    group: Option<String>,
    size: usize,
}

/// A destination queue, resolved.
#[derive(Debug, Clone)]
struct Destination {
    name: QueueName,
    url: String,
    max_bytes: usize,
}

/// Publishes to SQS queues; see the module docs.
#[derive(Clone)]
pub struct SqsPublisher {
    api: Arc<dyn SqsApi>,
    source: String,
    queues: Arc<Mutex<HashMap<String, Destination>>>,
}

impl std::fmt::Debug for SqsPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqsPublisher")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl SqsPublisher {
    /// A publisher through `client`.
    pub fn builder(client: SqsClient) -> SqsPublisherBuilder {
        SqsPublisherBuilder {
            client,
            source: consumer_backend::DEFAULT_SOURCE.to_owned(),
        }
    }

    async fn destination(&self, destination: &str) -> Result<Destination> {
        if let Some(d) = self
            .queues
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(destination)
        {
            return Ok(d.clone());
        }
        let name = QueueName::parse(destination)?;
        let url = match crate::topology::find(&*self.api, &name).await? {
            Some(url) => url,
            None => {
                return Err(Error::sqs("GetQueueUrl", name.name())(
                    crate::client::ApiError::new(
                        consumer_backend::BrokerErrorKind::NoDestination,
                        format!("the queue `{name}` does not exist"),
                    ),
                ));
            }
        };
        let attrs = self
            .api
            .queue_attributes(&url)
            .await
            .map_err(Error::sqs("GetQueueAttributes", name.name()))?;
        let d = Destination {
            max_bytes: attrs
                .get("MaximumMessageSize")
                .and_then(|v| v.parse().ok())
                .unwrap_or(DEFAULT_MAX_MESSAGE_BYTES),
            name,
            url,
        };
        self.queues
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(destination.to_owned(), d.clone());
        Ok(d)
    }

    /// Publishes the messages of `batch` at `indices`, all bound for `dest`.
    async fn publish_to(
        &self,
        dest: &Destination,
        batch: &[Outgoing],
        indices: Vec<usize>,
        results: &mut [Option<Result<()>>],
    ) {
        let mut pending = Vec::new();
        for i in indices {
            match prepare(dest, i, &batch[i].message) {
                Ok(p) => pending.push(p),
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        let mut failed_groups: HashSet<String> = HashSet::new();
        while !pending.is_empty() {
            let (wave, rest) = next_wave(dest, pending, &failed_groups, results);
            self.send_wave(dest, wave, &mut failed_groups, results)
                .await;
            pending = rest;
        }
    }

    /// Sends one wave in calls of at most ten messages and [`BATCH_BYTES`],
    /// all at once; records each message's result, and the groups of those
    /// that failed.
    async fn send_wave(
        &self,
        dest: &Destination,
        wave: Vec<Prepared>,
        failed_groups: &mut HashSet<String>,
        results: &mut [Option<Result<()>>],
    ) {
        let mut sends = tokio::task::JoinSet::new();
        for call in calls(wave) {
            let (api, dest) = (Arc::clone(&self.api), dest.clone());
            sends.spawn(async move { send_call(&*api, &dest, call).await });
        }
        while let Some(outcome) = sends.join_next().await {
            let Ok(outcome) = outcome else { continue };
            for (i, group, r) in outcome {
                if r.is_err()
                    && let Some(g) = group
                {
                    failed_groups.insert(g);
                }
                results[i] = Some(r);
            }
        }
    }

    async fn publish_all(&self, batch: &[Outgoing]) -> Vec<Result<()>> {
        let mut results: Vec<Option<Result<()>>> = batch.iter().map(|_| None).collect();
        let mut by_destination: Vec<(String, Vec<usize>)> = Vec::new();
        for (i, out) in batch.iter().enumerate() {
            match by_destination
                .iter_mut()
                .find(|(d, _)| *d == out.destination)
            {
                Some((_, v)) => v.push(i),
                None => by_destination.push((out.destination.clone(), vec![i])),
            }
        }
        for (destination, indices) in by_destination {
            match self.destination(&destination).await {
                Ok(dest) => self.publish_to(&dest, batch, indices, &mut results).await,
                Err(e) => {
                    let kind = e.kind();
                    let text = e.to_string();
                    let mut first = Some(e);
                    for i in indices {
                        let err = first.take().unwrap_or_else(|| Error::Sqs {
                            operation: "GetQueueUrl",
                            queue: destination.clone(),
                            source: crate::client::ApiError::new(kind, text.clone()),
                        });
                        results[i] = Some(Err(err));
                    }
                }
            }
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(Error::HeldBack {
                        queue: String::new(),
                    })
                })
            })
            .collect()
    }
}

/// The message at `index` ready to send to `dest`: its entry, its FIFO
/// group and its size; too large for the queue is an error before any
/// call.
fn prepare(dest: &Destination, index: usize, message: &Message) -> Result<Prepared> {
    let fifo = dest.name.is_fifo();
    let mut headers = message.headers.clone();
    let id = headers
        .get(names::ID)
        .ok()
        .flatten()
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let group = group_of(fifo, message, &id, &mut headers);
    let packed = attributes::pack(&headers, &message.payload);
    let size = packed.size();
    if size > dest.max_bytes {
        return Err(Error::TooLarge {
            size,
            limit: dest.max_bytes,
            queue: dest.name.to_string(),
        });
    }
    let entry = SendEntry {
        id: String::new(),
        body: packed.body,
        attributes: packed.attributes,
        group_id: group.clone(),
        deduplication_id: fifo.then(|| group_id(&id).into_owned()),
    };
    Ok(Prepared {
        index,
        entry,
        group,
        size,
    })
}

/// The message's FIFO group (its key, else its id, as SQS takes a group
/// id); `None` on a standard queue. The key travels as `ce_partitionkey`
/// when the group does not carry it as it is: hashed on a FIFO queue, or
/// no group at all on a standard one.
fn group_of(fifo: bool, message: &Message, id: &str, headers: &mut Headers) -> Option<String> {
    if !fifo {
        if let Some(key) = &message.key
            && headers.get_bytes(names::PARTITION_KEY).is_none()
        {
            headers.insert(names::PARTITION_KEY, key.as_str());
        }
        return None;
    }
    let key = message.key.as_deref().unwrap_or(id);
    let g = group_id(key);
    if message.key.is_some()
        && g.as_ref() != key
        && headers.get_bytes(names::PARTITION_KEY).is_none()
    {
        headers.insert(names::PARTITION_KEY, key);
    }
    Some(g.into_owned())
}

/// The next message of each group still open (and every message without a
/// group), and the rest for later waves; a message of a group that failed
/// is held back, so the group keeps its order.
fn next_wave(
    dest: &Destination,
    pending: Vec<Prepared>,
    failed_groups: &HashSet<String>,
    results: &mut [Option<Result<()>>],
) -> (Vec<Prepared>, Vec<Prepared>) {
    let mut wave = Vec::new();
    let mut rest = Vec::new();
    let mut in_wave: HashSet<String> = HashSet::new();
    for p in pending {
        match &p.group {
            Some(g) if failed_groups.contains(g) => {
                results[p.index] = Some(Err(Error::HeldBack {
                    queue: dest.name.to_string(),
                }));
            }
            Some(g) if in_wave.contains(g) => rest.push(p),
            Some(g) => {
                in_wave.insert(g.clone());
                wave.push(p);
            }
            None => wave.push(p),
        }
    }
    (wave, rest)
}

/// `wave` cut into calls of at most ten messages and [`BATCH_BYTES`], in
/// order (a message larger than that goes alone).
fn calls(wave: Vec<Prepared>) -> Vec<Vec<Prepared>> {
    let mut calls: Vec<Vec<Prepared>> = Vec::new();
    for p in wave {
        let fits = calls.last().is_some_and(|c| {
            c.len() < 10 && c.iter().map(|x| x.size).sum::<usize>() + p.size <= BATCH_BYTES
        });
        if fits {
            if let Some(c) = calls.last_mut() {
                c.push(p);
            }
        } else {
            calls.push(vec![p]);
        }
    }
    calls
}

/// One `SendMessageBatch`; each message's result.
async fn send_call(
    api: &dyn SqsApi,
    dest: &Destination,
    call: Vec<Prepared>,
) -> Vec<(usize, Option<String>, Result<()>)> {
    let mut meta = Vec::with_capacity(call.len());
    let mut entries = Vec::with_capacity(call.len());
    for (n, mut p) in call.into_iter().enumerate() {
        p.entry.id = n.to_string();
        meta.push((p.index, p.group));
        entries.push(p.entry);
    }
    match api.send_batch(&dest.url, entries).await {
        Ok(outcome) => meta
            .into_iter()
            .enumerate()
            .map(|(n, (i, group))| {
                let id = n.to_string();
                let r = match outcome.failed.iter().find(|f| f.id == id) {
                    None => Ok(()),
                    Some(f) => Err(Error::Entry {
                        operation: "SendMessageBatch",
                        queue: dest.name.to_string(),
                        failure: f.clone(),
                    }),
                };
                (i, group, r)
            })
            .collect(),
        Err(e) => {
            let kind = e.kind();
            let text = e.to_string();
            meta.into_iter()
                .map(|(i, group)| {
                    let err = Error::Sqs {
                        operation: "SendMessageBatch",
                        queue: dest.name.to_string(),
                        source: crate::client::ApiError::new(kind, text.clone()),
                    };
                    (i, group, Err(err))
                })
                .collect()
        }
    }
}

impl Publisher for SqsPublisher {
    fn system(&self) -> &'static str {
        "aws_sqs"
    }

    fn channel(&self, destination: &str) -> Option<ChannelDescription> {
        let name = QueueName::parse(destination).ok()?;
        Some(crate::asyncapi::queue_channel(name.name(), name.is_fifo()))
    }

    async fn publish(&self, batch: &[Outgoing]) -> Vec<Result<(), consumer_backend::Error>> {
        Sends::around(self.system(), &self.source, batch, async |batch| {
            self.publish_all(batch).await
        })
        .await
    }
}
