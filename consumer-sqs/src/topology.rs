//! [`Topology`]: the queue a source reads and the dead-letter queue its
//! letters go to, found (or created) and checked at start.
//!
//! ```text
//!  producers ──▶ orders.fifo ──▶ SqsSource ──▶ handler
//!                   │   ▲           │ retry: ChangeMessageVisibility(delay)
//!                   │   └───────────┘ (the message stays; FIFO: its group waits)
//!                   │               │ dead letter: SendMessage (same group), then delete
//!                   ▼               ▼
//!   redrive policy (maxReceiveCount) ──▶ orders-dlq.fifo ◀── the framework's letters
//!   (the safety net for crash loops)        (context in x-dlq-context)
//! ```
//!
//! * The dead-letter queue is the one the queue's redrive policy names,
//!   else the one given with [`Topology::with_dead_letter_queue`], else
//!   `<name>-dlq` (`<base>-dlq.fifo` for a FIFO queue). A FIFO queue's
//!   dead-letter queue must be FIFO, a standard queue's standard (AWS's
//!   rule): anything else is refused at start.
//! * Queues that do not exist are created (the dead-letter queue first,
//!   then the queue with a redrive policy to it), unless
//!   [`Topology::without_creating_queues`] says not to; queues that exist
//!   are never changed. A queue without a redrive policy is refused: the
//!   redrive policy is what moves a message that crashes its consumer
//!   before the framework can dead-letter it.
//! * The redrive policy's `maxReceiveCount` must be above the retry
//!   policies' attempts (checked when the consumer starts; see
//!   [`SqsSource`](crate::SqsSource)).

use std::collections::HashMap;

use consumer_backend::BrokerErrorKind;

use crate::client::SqsApi;
use crate::error::{Error, Result};
use crate::names::QueueName;

/// The `maxReceiveCount` of the redrive policies this crate creates.
pub const DEFAULT_MAX_RECEIVE_COUNT: u32 = 50;

/// The most `maxReceiveCount` SQS accepts.
pub const MAX_RECEIVE_COUNT: u32 = 1000;

/// The queue a source reads and its dead-letter queue; see the module docs.
#[derive(Debug, Clone)]
pub struct Topology {
    queue: QueueName,
    dead_letter: Option<QueueName>,
    max_receive_count: u32,
    create: bool,
}

impl Topology {
    /// The queue `queue` (a name or a URL), checked; a FIFO queue when its
    /// name ends in `.fifo`.
    pub fn new(queue: impl Into<String>) -> Result<Self> {
        let queue = QueueName::parse(&queue.into())?;
        queue.default_dead_letter()?;
        Ok(Self {
            queue,
            dead_letter: None,
            max_receive_count: DEFAULT_MAX_RECEIVE_COUNT,
            create: true,
        })
    }

    /// Letters go to `queue` (a name or a URL) when the queue's redrive
    /// policy names none; a redrive policy naming another one is refused.
    pub fn with_dead_letter_queue(mut self, queue: &str) -> Result<Self> {
        self.dead_letter = Some(QueueName::parse(queue)?);
        Ok(self)
    }

    /// The `maxReceiveCount` of a redrive policy this crate creates
    /// (default [`DEFAULT_MAX_RECEIVE_COUNT`]; 1 to 1000).
    pub fn with_max_receive_count(mut self, n: u32) -> Self {
        self.max_receive_count = n.clamp(1, MAX_RECEIVE_COUNT);
        self
    }

    /// Refuse, rather than create, a queue that does not exist.
    pub fn without_creating_queues(mut self) -> Self {
        self.create = false;
        self
    }

    /// The queue read.
    pub fn queue(&self) -> &QueueName {
        &self.queue
    }

    /// Whether it is a FIFO queue.
    pub fn is_fifo(&self) -> bool {
        self.queue.is_fifo()
    }

    /// The dead-letter queue a new redrive policy names.
    pub fn dead_letter_queue(&self) -> Result<QueueName> {
        match &self.dead_letter {
            Some(q) => Ok(q.clone()),
            None => self.queue.default_dead_letter(),
        }
    }

    /// Finds (or creates) both queues and checks them, as a source does at
    /// start: for a producer that publishes before any consumer ran. Their
    /// URLs.
    pub async fn declare(&self, client: &crate::SqsClient) -> Result<(String, String)> {
        let r = self.resolve(&*client.api()).await?;
        Ok((r.queue_url, r.dead_letter_url))
    }

    /// Finds (or creates) both queues and checks them.
    pub(crate) async fn resolve(&self, api: &dyn SqsApi) -> Result<Resolved> {
        let fifo = self.queue.is_fifo();
        let existing = self.existing_queue(api).await?;
        let redrive = existing.as_ref().map(|(_, r)| r);
        let dead_letter = self.dead_letter_of(redrive, fifo)?;
        let dead_letter_url = self
            .dead_letter_url(api, &dead_letter, redrive, fifo)
            .await?;
        let dl_attrs = attributes(api, &dead_letter_url, &dead_letter).await?;
        let (queue_url, max_receive_count) = match existing {
            Some((url, r)) => (url, r.max_receive_count),
            None => {
                self.create_queue(api, &dead_letter, &dl_attrs, fifo)
                    .await?
            }
        };
        Ok(Resolved {
            queue: self.queue.clone(),
            queue_url,
            fifo,
            dead_letter,
            dead_letter_url,
            max_receive_count,
            dead_letter_max_bytes: max_message_bytes(&dl_attrs),
        })
    }

    /// The queue's URL and redrive policy when it exists; `None` when it
    /// does not and may be created. A queue without a redrive policy, or
    /// whose policy names another dead-letter queue than the one given, is
    /// refused: letters must land in one place, and a message crashing its
    /// consumers must land somewhere.
    async fn existing_queue(&self, api: &dyn SqsApi) -> Result<Option<(String, Redrive)>> {
        let Some(url) = find(api, &self.queue).await? else {
            if !self.create {
                return Err(no_such_queue(
                    &self.queue,
                    format!(
                        "the queue `{}` does not exist, and this source may not create it (Topology::without_creating_queues)",
                        self.queue
                    ),
                ));
            }
            return Ok(None);
        };
        let attrs = attributes(api, &url, &self.queue).await?;
        let Some(json) = attrs.get("RedrivePolicy") else {
            return Err(Error::Topology {
                queue: self.queue.to_string(),
                reason: format!(
                    "it has no redrive policy, the safety net that moves a message crashing its consumers to a dead-letter queue: give it one (deadLetterTargetArn of `{}`, maxReceiveCount above the handlers' attempts), or let this source create the queue",
                    self.dead_letter_queue()?
                ),
            });
        };
        let redrive = Redrive::parse(json).ok_or_else(|| Error::Topology {
            queue: self.queue.to_string(),
            reason: format!("its redrive policy cannot be read: {json}"),
        })?;
        if let Some(explicit) = &self.dead_letter
            && explicit.name() != redrive.target_name()
        {
            return Err(Error::Topology {
                queue: self.queue.to_string(),
                reason: format!(
                    "its redrive policy sends to `{}`, not to `{explicit}`: letters would land in two places; name one queue",
                    redrive.target_name()
                ),
            });
        }
        Ok(Some((url, redrive)))
    }

    /// The dead-letter queue: the one the redrive policy names, else the
    /// one a new policy would name; of the queue's kind (FIFO or standard),
    /// as SQS requires.
    fn dead_letter_of(&self, redrive: Option<&Redrive>, fifo: bool) -> Result<QueueName> {
        let dead_letter = match redrive {
            Some(r) => QueueName::parse(r.target_name())?,
            None => self.dead_letter_queue()?,
        };
        if dead_letter.is_fifo() != fifo {
            return Err(Error::Topology {
                queue: self.queue.to_string(),
                reason: format!(
                    "its dead-letter queue `{dead_letter}` is {} but the queue is {}: SQS needs a FIFO dead-letter queue for a FIFO queue and a standard one for a standard queue",
                    kind(dead_letter.is_fifo()),
                    kind(fifo)
                ),
            });
        }
        Ok(dead_letter)
    }

    /// The dead-letter queue's URL; created only along with a new queue (an
    /// existing queue's redrive policy names a queue that must exist).
    async fn dead_letter_url(
        &self,
        api: &dyn SqsApi,
        dead_letter: &QueueName,
        redrive: Option<&Redrive>,
        fifo: bool,
    ) -> Result<String> {
        match find(api, dead_letter).await? {
            Some(url) => Ok(url),
            None if redrive.is_none() && self.create => {
                create(api, dead_letter, queue_attributes(fifo, None)).await
            }
            None => Err(no_such_queue(
                dead_letter,
                format!(
                    "the dead-letter queue `{dead_letter}` does not exist: create it, or let this source create it"
                ),
            )),
        }
    }

    /// Creates the queue with a redrive policy to `dead_letter` (whose
    /// attributes are `dl_attrs`); its URL and `maxReceiveCount`.
    async fn create_queue(
        &self,
        api: &dyn SqsApi,
        dead_letter: &QueueName,
        dl_attrs: &HashMap<String, String>,
        fifo: bool,
    ) -> Result<(String, u32)> {
        if !self.create {
            return Err(no_such_queue(
                &self.queue,
                format!("the queue `{}` does not exist", self.queue),
            ));
        }
        let arn = dl_attrs.get("QueueArn").ok_or_else(|| Error::Topology {
            queue: dead_letter.to_string(),
            reason: "SQS did not say its ARN (QueueArn)".to_owned(),
        })?;
        let policy = serde_json::json!({
            "deadLetterTargetArn": arn,
            "maxReceiveCount": self.max_receive_count,
        })
        .to_string();
        let url = create(api, &self.queue, queue_attributes(fifo, Some(policy))).await?;
        Ok((url, self.max_receive_count))
    }
}

/// The `GetQueueUrl` error of a queue that does not exist, saying why it
/// matters.
fn no_such_queue(queue: &QueueName, message: String) -> Error {
    Error::Sqs {
        operation: "GetQueueUrl",
        queue: queue.to_string(),
        source: crate::client::ApiError::new(BrokerErrorKind::NoDestination, message),
    }
}

/// A queue's `MaximumMessageSize`; SQS's historical default when it does
/// not say.
fn max_message_bytes(attrs: &HashMap<String, String>) -> usize {
    attrs
        .get("MaximumMessageSize")
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_MAX_MESSAGE_BYTES)
}

/// SQS's historical default `MaximumMessageSize` (256 KiB), assumed when a
/// queue does not say.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 262_144;

fn kind(fifo: bool) -> &'static str {
    if fifo { "FIFO" } else { "standard" }
}

fn queue_attributes(fifo: bool, redrive: Option<String>) -> HashMap<String, String> {
    let mut attrs = HashMap::new();
    if fifo {
        attrs.insert("FifoQueue".to_owned(), "true".to_owned());
    }
    if let Some(policy) = redrive {
        attrs.insert("RedrivePolicy".to_owned(), policy);
    }
    attrs
}

/// The queue's URL; `None` when it does not exist.
pub(crate) async fn find(api: &dyn SqsApi, queue: &QueueName) -> Result<Option<String>> {
    if let Some(url) = queue.url() {
        return Ok(Some(url.to_owned()));
    }
    match api.queue_url(queue.name()).await {
        Ok(url) => Ok(Some(url)),
        Err(e) if e.kind() == BrokerErrorKind::NoDestination => Ok(None),
        Err(e) => Err(Error::sqs("GetQueueUrl", queue.name())(e)),
    }
}

async fn create(
    api: &dyn SqsApi,
    queue: &QueueName,
    attrs: HashMap<String, String>,
) -> Result<String> {
    let url = api
        .create_queue(queue.name(), attrs)
        .await
        .map_err(Error::sqs("CreateQueue", queue.name()))?;
    tracing::info!(target: "consumer::sqs", queue = %queue, "created the queue");
    Ok(url)
}

async fn attributes(
    api: &dyn SqsApi,
    url: &str,
    queue: &QueueName,
) -> Result<HashMap<String, String>> {
    api.queue_attributes(url)
        .await
        .map_err(Error::sqs("GetQueueAttributes", queue.name()))
}

/// A queue's redrive policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Redrive {
    target_arn: String,
    max_receive_count: u32,
}

impl Redrive {
    fn parse(json: &str) -> Option<Self> {
        let v: serde_json::Value = serde_json::from_str(json).ok()?;
        let target_arn = v.get("deadLetterTargetArn")?.as_str()?.to_owned();
        let max = v.get("maxReceiveCount")?;
        let max_receive_count = max
            .as_u64()
            .or_else(|| max.as_str().and_then(|s| s.parse().ok()))
            .and_then(|n| u32::try_from(n).ok())?;
        Some(Self {
            target_arn,
            max_receive_count,
        })
    }

    fn target_name(&self) -> &str {
        self.target_arn.rsplit(':').next().unwrap_or_default()
    }
}

/// Both queues, found and checked.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub(crate) queue: QueueName,
    pub(crate) queue_url: String,
    pub(crate) fifo: bool,
    pub(crate) dead_letter: QueueName,
    pub(crate) dead_letter_url: String,
    pub(crate) max_receive_count: u32,
    pub(crate) dead_letter_max_bytes: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redrive_policy_is_read_with_its_count_as_a_number_or_text() {
        let r = Redrive::parse(
            r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:123456789012:orders-dlq.fifo","maxReceiveCount":"7"}"#,
        )
        .expect("parses");
        assert_eq!(
            (r.target_name(), r.max_receive_count),
            ("orders-dlq.fifo", 7)
        );
        let r = Redrive::parse(r#"{"deadLetterTargetArn":"arn:x:q","maxReceiveCount":3}"#)
            .expect("parses");
        assert_eq!(r.max_receive_count, 3);
        assert!(Redrive::parse("{}").is_none());
    }
}
