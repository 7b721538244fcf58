//! Subject name strategies: under which registry subject a topic's keys or
//! values are registered, as the Confluent serializers name them.

use crate::error::{Error, Result};

/// Whether a schema describes a record's key or its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessagePart {
    /// The record's key: subjects end in `-key`.
    Key,
    /// The record's value: subjects end in `-value`.
    Value,
}

/// How a subject is named from the topic and the record type, as the
/// Confluent serializers' `subject.name.strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SubjectNameStrategy {
    /// `<topic>-key` / `<topic>-value`: one schema (and its versions) per
    /// topic. The serializers' default.
    #[default]
    TopicName,
    /// `<record full name>`: one subject per record type, whatever topic it
    /// travels on.
    RecordName,
    /// `<topic>-<record full name>`: several record types on one topic, each
    /// evolving on its own.
    TopicRecordName,
}

impl SubjectNameStrategy {
    /// The subject for `part` of the records on `topic` whose type is
    /// `record_name` (the schema's full name, `namespace.Name`).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when the strategy needs the record name and none
    /// is given, or when the topic or record name is empty.
    ///
    /// ```
    /// use consumer_codec::subject::{MessagePart, SubjectNameStrategy};
    ///
    /// let subject = SubjectNameStrategy::TopicRecordName
    ///     .subject("orders", MessagePart::Value, Some("shop.OrderPlaced"))?;
    /// assert_eq!(subject, "orders-shop.OrderPlaced");
    /// # Ok::<(), consumer_codec::Error>(())
    /// ```
    pub fn subject(
        self,
        topic: &str,
        part: MessagePart,
        record_name: Option<&str>,
    ) -> Result<String> {
        let record = || match record_name {
            Some(name) if !name.is_empty() => Ok(name),
            _ => Err(Error::Config(format!(
                "the subject name strategy {self:?} needs the record's full name, and none was given"
            ))),
        };
        let topic = || {
            if topic.is_empty() {
                Err(Error::Config(format!(
                    "the subject name strategy {self:?} needs a topic, and the topic is empty"
                )))
            } else {
                Ok(topic)
            }
        };
        Ok(match self {
            Self::TopicName => format!("{}-{}", topic()?, part.suffix()),
            Self::RecordName => record()?.to_owned(),
            Self::TopicRecordName => format!("{}-{}", topic()?, record()?),
        })
    }
}

impl MessagePart {
    fn suffix(self) -> &'static str {
        match self {
            Self::Key => "key",
            Self::Value => "value",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_strategy_names_the_subject_as_the_serializers_do() {
        let name = Some("shop.OrderPlaced");
        let cases = [
            (
                SubjectNameStrategy::TopicName,
                MessagePart::Value,
                "orders-value",
            ),
            (
                SubjectNameStrategy::TopicName,
                MessagePart::Key,
                "orders-key",
            ),
            (
                SubjectNameStrategy::RecordName,
                MessagePart::Value,
                "shop.OrderPlaced",
            ),
            (
                SubjectNameStrategy::TopicRecordName,
                MessagePart::Key,
                "orders-shop.OrderPlaced",
            ),
        ];
        for (strategy, part, expected) in cases {
            let subject = strategy
                .subject("orders", part, name)
                .expect("every part is given");
            assert_eq!(subject, expected, "{strategy:?} {part:?}");
        }
    }

    #[test]
    fn record_strategies_need_the_record_name() {
        for strategy in [
            SubjectNameStrategy::RecordName,
            SubjectNameStrategy::TopicRecordName,
        ] {
            let error = strategy
                .subject("orders", MessagePart::Value, None)
                .expect_err("no record name");
            assert!(error.to_string().contains("record's full name"), "{error}");
        }
    }

    #[test]
    fn the_topic_strategy_needs_a_topic() {
        let error = SubjectNameStrategy::TopicName
            .subject("", MessagePart::Value, None)
            .expect_err("empty topic");
        assert!(error.to_string().contains("topic is empty"), "{error}");
    }
}
