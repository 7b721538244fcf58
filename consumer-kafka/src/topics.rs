//! The topics one consumer works with: the work topic, the retry topic
//! (delayed redelivery) and the dead-letter topic.

use std::fmt;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::RDKafkaErrorCode;

use crate::security::KafkaSecurity;

use crate::error::Error;

/// Work, retry and dead-letter topic names, validated.
///
/// By default the retry topic is `<topic>.retry` and the dead-letter topic
/// `<topic>.dlq`. Retries through the retry topic lose per-key order: a
/// retried message is processed after later messages of its key.
///
/// ```
/// let topics = consumer_kafka::Topics::new("orders")?;
/// assert_eq!(topics.dead_letter_topic(), "orders.dlq");
/// assert_eq!(topics.retry_topic(), Some("orders.retry"));
/// # Ok::<(), consumer_kafka::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topics {
    topic: String,
    retry: Option<String>,
    dead_letter: String,
}

impl Topics {
    /// `topic` with the default retry and dead-letter names.
    pub fn new(topic: impl Into<String>) -> Result<Self, Error> {
        let topic = topic.into();
        validate_topic(&topic)?;
        let retry = format!("{topic}.retry");
        let dead_letter = format!("{topic}.dlq");
        validate_topic(&retry)?;
        validate_topic(&dead_letter)?;
        Ok(Self {
            topic,
            retry: Some(retry),
            dead_letter,
        })
    }

    /// Another retry topic name.
    pub fn with_retry_topic(mut self, name: impl Into<String>) -> Result<Self, Error> {
        let name = name.into();
        validate_topic(&name)?;
        self.retry = Some(name);
        Ok(self)
    }

    /// No retry topic: handlers must retry in place (a retry scheduled
    /// through the broker then fails with a configuration error).
    pub fn without_retry_topic(mut self) -> Self {
        self.retry = None;
        self
    }

    /// Another dead-letter topic name.
    pub fn with_dead_letter_topic(mut self, name: impl Into<String>) -> Result<Self, Error> {
        let name = name.into();
        validate_topic(&name)?;
        self.dead_letter = name;
        Ok(self)
    }

    /// The work topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The retry topic, if any.
    pub fn retry_topic(&self) -> Option<&str> {
        self.retry.as_deref()
    }

    /// The dead-letter topic.
    pub fn dead_letter_topic(&self) -> &str {
        &self.dead_letter
    }

    /// Every topic the consumer subscribes to (work, then retry).
    pub fn subscribed(&self) -> Vec<&str> {
        let mut v = vec![self.topic.as_str()];
        v.extend(self.retry.as_deref());
        v
    }

    /// Creates the work, retry and dead-letter topics where they do not
    /// exist yet (for brokers that do not create topics on first use, and
    /// for tests). An existing topic is left as it is.
    pub async fn create(
        &self,
        brokers: &str,
        partitions: i32,
        replication: i32,
    ) -> Result<(), Error> {
        self.create_on(brokers, None, partitions, replication).await
    }

    /// [`create`](Self::create) over a link secured by `security`, checked
    /// first as [`KafkaSourceBuilder::with_security`] says.
    ///
    /// [`KafkaSourceBuilder::with_security`]: crate::KafkaSourceBuilder::with_security
    pub async fn create_with_security(
        &self,
        brokers: &str,
        security: &KafkaSecurity,
        partitions: i32,
        replication: i32,
    ) -> Result<(), Error> {
        self.create_on(brokers, Some(security), partitions, replication)
            .await
    }

    async fn create_on(
        &self,
        brokers: &str,
        security: Option<&KafkaSecurity>,
        partitions: i32,
        replication: i32,
    ) -> Result<(), Error> {
        let secured = crate::start_check::before_connect(brokers, security, &[]).await?;
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", brokers);
        for (k, v) in &secured {
            config.set(k, v);
        }
        let admin: AdminClient<DefaultClientContext> =
            config.create().map_err(|source| Error::Config {
                context: "creating the admin client",
                source: crate::security::redact_error(source),
            })?;
        let mut names = self.subscribed();
        names.push(&self.dead_letter);
        let new: Vec<NewTopic<'_>> = names
            .iter()
            .map(|n| NewTopic::new(n, partitions, TopicReplication::Fixed(replication)))
            .collect();
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let results = admin
            .create_topics(&new, &opts)
            .await
            .map_err(|e| Error::kafka("creating topics", e))?;
        for r in results {
            match r {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((name, code)) => {
                    return Err(Error::TopicCreation { topic: name, code });
                }
            }
        }
        Ok(())
    }
}

impl fmt::Display for Topics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "topic {}", self.topic)?;
        if let Some(r) = &self.retry {
            write!(f, ", retries via {r}")?;
        }
        write!(f, ", dead letters to {}", self.dead_letter)
    }
}

/// Kafka's rule for topic names: 1 to 249 characters of `[A-Za-z0-9._-]`,
/// and neither `.` nor `..`.
pub fn validate_topic(name: &str) -> Result<(), Error> {
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if name.is_empty() || name.len() > 249 || !ok_chars || name == "." || name == ".." {
        return Err(Error::InvalidTopic {
            name: name.to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_kafka_rules() {
        assert!(Topics::new("orders").is_ok());
        assert!(Topics::new("").is_err());
        assert!(Topics::new("a b").is_err());
        assert!(Topics::new("..").is_err());
        assert!(Topics::new("x".repeat(250)).is_err());
        // The derived names must fit too.
        assert!(Topics::new("x".repeat(245)).is_err());
        let t = Topics::new("o").expect("valid").without_retry_topic();
        assert_eq!(t.subscribed(), vec!["o"]);
        assert_eq!(t.to_string(), "topic o, dead letters to o.dlq");
    }
}
