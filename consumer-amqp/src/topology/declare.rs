//! Declaring a [`Topology`] on the broker, idempotently.

use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, ExchangeKind};

use super::{QueueType, Topology};
use crate::error::{Error, Result, crashed_reply, queue_type_found};
use crate::names::{long, short};

impl Topology {
    /// Declares everything; idempotent: declaring what exists with the same
    /// settings changes nothing. A conflict (a queue declared earlier with
    /// other arguments) is an [`Error::Topology`], a queue of another type an
    /// [`Error::QueueTypeMismatch`], a queue RabbitMQ reports crashed an
    /// [`Error::QueueCrashed`]; each closes `channel`.
    pub async fn declare(&self, channel: &Channel) -> Result<()> {
        self.validate()?;
        let durable = QueueDeclareOptions::durable();
        channel
            .exchange_declare(
                short(&self.dead_letter_exchange)?,
                ExchangeKind::Direct,
                ExchangeDeclareOptions {
                    durable: true,
                    ..ExchangeDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|source| Error::Topology {
                what: "exchange",
                name: self.dead_letter_exchange.clone(),
                source,
            })?;

        let dlq_args = self.base_args(self.queue_type);
        self.declare_queue(channel, &self.dead_letter_queue, durable, dlq_args)
            .await?;
        channel
            .queue_bind(
                short(&self.dead_letter_queue)?,
                short(&self.dead_letter_exchange)?,
                short(&self.queue)?,
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|source| Error::Topology {
                what: "binding of queue",
                name: self.dead_letter_queue.clone(),
                source,
            })?;

        self.declare_queue(channel, &self.queue, durable, self.work_queue_args())
            .await?;
        for (_, name) in self.delay_queues() {
            self.declare_queue(channel, &name, durable, self.delay_queue_args())
                .await?;
        }
        tracing::debug!(target: "consumer::amqp", queue = %self.queue, "topology declared");
        Ok(())
    }

    /// The work queue's arguments.
    pub(super) fn work_queue_args(&self) -> FieldTable {
        let mut args = self.base_args(self.queue_type);
        args.insert(
            "x-dead-letter-exchange".into(),
            long(&self.dead_letter_exchange),
        );
        args.insert("x-dead-letter-routing-key".into(), long(&self.queue));
        self.at_least_once(&mut args);
        if self.single_active_consumer {
            args.insert("x-single-active-consumer".into(), AMQPValue::Boolean(true));
        }
        if let (QueueType::Quorum, Some(limit)) = (self.queue_type, self.delivery_limit) {
            args.insert(
                "x-delivery-limit".into(),
                AMQPValue::LongInt(i32::try_from(limit).unwrap_or(i32::MAX)),
            );
        }
        args
    }

    /// Every delay queue's arguments: expired copies go back to the work
    /// queue through the default exchange.
    pub(super) fn delay_queue_args(&self) -> FieldTable {
        let mut args = self.base_args(self.queue_type);
        args.insert("x-dead-letter-exchange".into(), long(""));
        args.insert("x-dead-letter-routing-key".into(), long(&self.queue));
        self.at_least_once(&mut args);
        args
    }

    /// Quorum queues dead-letter at least once (see the module docs).
    fn at_least_once(&self, args: &mut FieldTable) {
        if self.queue_type == QueueType::Quorum {
            args.insert("x-dead-letter-strategy".into(), long("at-least-once"));
            args.insert("x-overflow".into(), long("reject-publish"));
        }
    }

    fn base_args(&self, queue_type: QueueType) -> FieldTable {
        let mut args = FieldTable::default();
        args.insert("x-queue-type".into(), long(queue_type.as_str()));
        if let Some(expires) = self.expires {
            let ms = i64::try_from(expires.as_millis()).unwrap_or(i64::MAX);
            args.insert("x-expires".into(), AMQPValue::LongLongInt(ms));
        }
        args
    }

    async fn declare_queue(
        &self,
        channel: &Channel,
        name: &str,
        options: QueueDeclareOptions,
        args: FieldTable,
    ) -> Result<()> {
        channel
            .queue_declare(short(name)?, options, args)
            .await
            .map(|_| ())
            .map_err(|source| {
                if let Some(reply) = crashed_reply(&source) {
                    return Error::QueueCrashed {
                        queue: name.to_owned(),
                        reply,
                    };
                }
                if let Some(found) = queue_type_found(&source) {
                    return Error::QueueTypeMismatch {
                        queue: name.to_owned(),
                        declared: self.queue_type.as_str(),
                        found,
                        queues: self.queues_in_words(),
                    };
                }
                Error::Topology {
                    what: "queue",
                    name: name.to_owned(),
                    source,
                }
            })
    }

    /// The queues of this topology, for a migration's instructions.
    fn queues_in_words(&self) -> String {
        format!(
            "`{}`, its delay queues `{}.*` and its dead-letter queue `{}`",
            self.queue, self.delay_prefix, self.dead_letter_queue
        )
    }
}
