//! Declaring a [`Topology`] on the broker, idempotently, each step within
//! the topology's deadline.

use std::future::Future;

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
    /// [`Error::QueueCrashed`]; each closes `channel`. A step RabbitMQ does
    /// not answer within the deadline is an [`Error::NoAnswer`].
    ///
    /// The delay queues declared are those sized so far (see the module
    /// docs); a partition's shared ones are declared by its
    /// [`PartitionedTopology`](super::PartitionedTopology), once.
    pub async fn declare(&self, channel: &Channel) -> Result<()> {
        self.validate()?;
        self.declare_exchange(channel, &self.dead_letter_exchange, ExchangeKind::Direct)
            .await?;
        let dlq_args = self.base_args(self.queue_type);
        self.declare_queue(channel, &self.dead_letter_queue, dlq_args)
            .await?;
        self.bind(
            channel,
            &self.dead_letter_queue,
            &self.dead_letter_exchange,
            &self.queue,
        )
        .await?;
        self.declare_queue(channel, &self.queue, self.work_queue_args())
            .await?;
        if !self.delays.shared() {
            self.declare_delays(channel, 0).await?;
        }
        tracing::debug!(target: "consumer::amqp", queue = %self.queue, "topology declared");
        Ok(())
    }

    /// Declares the delay queues from bucket `from` up to those sized so
    /// far (shared ones with their exchange and binding); returns how many
    /// buckets are declared.
    pub(crate) async fn declare_delays(&self, channel: &Channel, from: u32) -> Result<u32> {
        let buckets = self.delays.buckets();
        let skip = usize::try_from(from).unwrap_or(usize::MAX);
        for (_, name) in buckets.iter().skip(skip) {
            self.declare_queue(channel, name, self.delay_queue_args())
                .await?;
            if self.delays.shared() {
                self.declare_exchange(channel, name, ExchangeKind::Fanout)
                    .await?;
                self.bind(channel, name, name, "").await?;
            }
        }
        Ok(u32::try_from(buckets.len()).unwrap_or(u32::MAX))
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
        self.delays.dead_letter_args(&mut args, &self.queue);
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

    /// `step`, failed with [`Error::NoAnswer`] when RabbitMQ does not
    /// answer within the deadline.
    pub(crate) async fn answered<T, E>(
        &self,
        what: &'static str,
        name: &str,
        step: impl Future<Output = std::result::Result<T, E>>,
    ) -> Result<std::result::Result<T, E>> {
        tokio::time::timeout(self.declare_timeout, step)
            .await
            .map_err(|_| Error::NoAnswer {
                what,
                name: name.to_owned(),
                after: self.declare_timeout,
            })
    }

    async fn declare_exchange(
        &self,
        channel: &Channel,
        name: &str,
        kind: ExchangeKind,
    ) -> Result<()> {
        let options = ExchangeDeclareOptions {
            durable: true,
            ..ExchangeDeclareOptions::default()
        };
        self.answered(
            "the declare of exchange",
            name,
            channel.exchange_declare(short(name)?, kind, options, FieldTable::default()),
        )
        .await?
        .map_err(Error::declare("exchange", name))
    }

    async fn bind(&self, channel: &Channel, queue: &str, exchange: &str, key: &str) -> Result<()> {
        self.answered(
            "the binding of queue",
            queue,
            channel.queue_bind(
                short(queue)?,
                short(exchange)?,
                short(key)?,
                QueueBindOptions::default(),
                FieldTable::default(),
            ),
        )
        .await?
        .map_err(Error::declare("binding of queue", queue))
    }

    async fn declare_queue(&self, channel: &Channel, name: &str, args: FieldTable) -> Result<()> {
        let declared = self
            .answered(
                "the declare of queue",
                name,
                channel.queue_declare(short(name)?, QueueDeclareOptions::durable(), args),
            )
            .await?;
        declared.map(|_| ()).map_err(|source| {
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
            Error::declare("queue", name)(source)
        })
    }

    /// The queues of this topology, for a migration's instructions.
    fn queues_in_words(&self) -> String {
        format!(
            "`{}`, its delay queues `{}.*` and its dead-letter queue `{}`",
            self.queue,
            self.delays.prefix(),
            self.dead_letter_queue
        )
    }
}
