//! [`Depths`]: how many messages wait in a topology's queues.

use lapin::Channel;
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;

use consumer_backend::QueueRole;

use super::Topology;
use crate::error::{Error, Result};
use crate::names::short;

/// Message counts of a topology's queues, from passive declares.
///
/// RabbitMQ counts only messages *ready* for delivery: those delivered and
/// not yet acked are not in these numbers (see `AmqpStats` for those).
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
        let mut depths = Depths::default();
        for (_, role, n) in self.queue_depths(channel).await? {
            match role {
                QueueRole::Work => depths.work += n,
                QueueRole::DeadLetter => depths.dead_letters += n,
                QueueRole::Delay => depths.delayed += n,
                // RabbitMQ's passive declare counts ready messages only.
                QueueRole::InFlight | QueueRole::Scheduled => {}
            }
        }
        Ok(depths)
    }

    /// Each queue's name, role and ready message count, as
    /// [`Topology::depths`] reads them.
    pub(crate) async fn queue_depths(
        &self,
        channel: Channel,
    ) -> Result<Vec<(String, QueueRole, u64)>> {
        let mut queues = vec![
            (self.queue.clone(), QueueRole::Work),
            (self.dead_letter_queue.clone(), QueueRole::DeadLetter),
        ];
        queues.extend(
            self.delay_queues()
                .into_iter()
                .map(|(_, name)| (name, QueueRole::Delay)),
        );
        let mut out = Vec::with_capacity(queues.len());
        for (name, role) in queues {
            let declared = channel
                .queue_declare(
                    short(&name)?,
                    QueueDeclareOptions::durable().passive(),
                    FieldTable::default(),
                )
                .await
                .map_err(Error::amqp("passive queue declare"))?;
            out.push((name, role, u64::from(declared.message_count())));
        }
        let _ = channel.close(200, "depths read".into()).await;
        Ok(out)
    }
}
