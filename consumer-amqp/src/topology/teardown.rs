//! Taking a [`PartitionedTopology`] down: every queue and exchange it
//! declares, with the messages they hold.

use std::future::Future;

use lapin::Channel;
use lapin::options::{ExchangeDeleteOptions, QueueDeleteOptions};

use super::PartitionedTopology;
use super::delays::every_bucket;
use crate::error::{Error, Result};
use crate::names::short;

impl PartitionedTopology {
    /// Deletes every queue and exchange this logical queue declares, with
    /// the messages they hold, and returns how many messages went with
    /// them: the partition queues, the shared delay queues and their
    /// exchanges (every bucket there can be, not only those sized in this
    /// process), the dead-letter queue and exchange, and the members
    /// exchange. What is not there is skipped (RabbitMQ's deletes are
    /// idempotent); each step has the declare deadline
    /// ([`with_declare_timeout`](Self::with_declare_timeout)).
    ///
    /// For tests, demos and tools, once the topology's consumers and
    /// publishers are stopped: a consumer still running loses its
    /// partitions (their queues are gone) and declares them again when it
    /// reconnects. The declare lock goes with the connection that holds it,
    /// and the delay queues of the layout before the partitions shared them
    /// (`orders.p3.retry.16ms`, ...) are left to the operator, as at start
    /// (see the guide's page on partitioned RabbitMQ queues).
    pub async fn delete(&self, channel: &Channel) -> Result<u64> {
        let mut messages = 0;
        for p in 0..self.partitions() {
            messages += self.delete_queue(channel, &self.partition_queue(p)).await?;
        }
        for bucket in every_bucket(self.delays().prefix()) {
            messages += self.delete_queue(channel, &bucket).await?;
            self.delete_exchange(channel, &bucket).await?;
        }
        messages += self
            .delete_queue(channel, &self.dead_letter_queue())
            .await?;
        self.delete_exchange(channel, self.partition(0).dead_letter_exchange())
            .await?;
        self.delete_exchange(channel, &self.members_exchange())
            .await?;
        tracing::debug!(target: "consumer::amqp", queue = %self.name(), messages, "topology deleted");
        Ok(messages)
    }

    async fn delete_queue(&self, channel: &Channel, name: &str) -> Result<u64> {
        let deleted = self
            .within(
                "the deletion of queue",
                name,
                channel.queue_delete(short(name)?, QueueDeleteOptions::default()),
            )
            .await?
            .map_err(Error::amqp("queue.delete"))?;
        Ok(u64::from(deleted))
    }

    async fn delete_exchange(&self, channel: &Channel, name: &str) -> Result<()> {
        self.within(
            "the deletion of exchange",
            name,
            channel.exchange_delete(short(name)?, ExchangeDeleteOptions::default()),
        )
        .await?
        .map_err(Error::amqp("exchange.delete"))
    }

    /// `step`, failed with [`Error::NoAnswer`] when RabbitMQ does not answer
    /// within the declare deadline.
    async fn within<T, E>(
        &self,
        what: &'static str,
        name: &str,
        step: impl Future<Output = std::result::Result<T, E>>,
    ) -> Result<std::result::Result<T, E>> {
        self.partition(0).answered(what, name, step).await
    }
}
