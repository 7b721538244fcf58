//! [`Depths`]: how many messages wait in a topology's queues.

use lapin::Channel;
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;

use super::Topology;
use crate::error::{Error, Result};
use crate::names::short;

/// Message counts of a topology's queues, from passive declares.
///
/// RabbitMQ counts only messages *ready* for delivery: those delivered and
/// not yet acked are not in these numbers (see `AmqpMetrics` for those).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Depths {
    /// Ready in the work queue.
    pub work: u64,
    /// In the dead-letter queue.
    pub dead_letters: u64,
    /// Waiting in the delay queues.
    pub delayed: u64,
}

impl Topology {
    /// Ready message counts of the work, dead-letter and delay queues, by
    /// passive declares on `channel`, which must be a channel of its own: a
    /// passive declare of a missing queue closes it. It is closed after.
    pub async fn depths(&self, channel: Channel) -> Result<Depths> {
        let count = |name: String| {
            let channel = channel.clone();
            async move {
                channel
                    .queue_declare(
                        short(&name)?,
                        QueueDeclareOptions::durable().passive(),
                        FieldTable::default(),
                    )
                    .await
                    .map(|q| u64::from(q.message_count()))
                    .map_err(Error::amqp("passive queue declare"))
            }
        };
        let work = count(self.queue.clone()).await?;
        let dead_letters = count(self.dead_letter_queue.clone()).await?;
        let mut delayed = 0;
        for (_, name) in self.delay_queues() {
            delayed += count(name).await?;
        }
        let _ = channel.close(200, "depths read".into()).await;
        Ok(Depths {
            work,
            dead_letters,
            delayed,
        })
    }
}
