//! The delay queues of the layout before a [`PartitionedTopology`]'s
//! partitions shared theirs (`orders.p3.retry.16ms`, ...): what becomes of
//! the retry copies they hold, and the line that tells the operator they
//! are still there.
//!
//! Each partition used to have delay queues of its own, every one
//! dead-lettering to its partition queue by an `x-dead-letter-routing-key`
//! of its own. The shared ones have other names, so an upgraded topology
//! declares them beside the old ones, and publishes nothing more to the old
//! ones (an instance of the earlier version still running during a rolling
//! upgrade may). The old queues keep their arguments: each copy in them
//! still expires into its partition queue, with its headers (id, attempt,
//! first failure), and runs there as any retry does; nothing in them is
//! lost, and the attempts stay counted. They drain by themselves within
//! their longest bucket (about 70 minutes at the old 1 h default).
//!
//! They are not deleted for the operator: RabbitMQ cannot delete a quorum
//! queue only if it is empty, and an instance of the earlier version could
//! publish a copy to one between a look and a delete. Instead, every start
//! looks for them (the first bucket of the first and the last partition;
//! when either is there, every partition's buckets, counting their copies)
//! and logs one WARN line with what it found, until they are deleted.

use super::PartitionedTopology;
use super::delays::every_bucket;
use super::partitioned::Found;
use crate::publisher::AmqpPublisher;

impl PartitionedTopology {
    /// The delay queue prefix of partition `p` in the earlier layout.
    fn old_delay_prefix(&self, p: u32) -> String {
        format!("{}.retry", self.partition_queue(p))
    }

    /// Looks for the earlier layout's delay queues and, when some are
    /// there, says so in one WARN line (see the module docs). A broker
    /// that does not answer the look is no reason to fail a start: the
    /// queues drain by themselves either way.
    pub(crate) async fn report_old_delay_queues(&self, publisher: &AmqpPublisher) {
        match self.old_delay_queues(publisher).await {
            Ok(None) => {}
            Ok(Some((queues, copies))) => {
                tracing::warn!(
                    target: "consumer::amqp",
                    queue = %self.name(),
                    queues,
                    copies,
                    "{queues} delay queues of the layout before the partitions shared theirs are still on the broker \
                     (`{name}.p*.retry.*`), holding {copies} retry copies: each still comes back to its partition \
                     when it expires, and this version publishes nothing to them; once every instance runs this \
                     version, delete them when they are empty \
                     (rabbitmqctl list_queues name messages | grep '^{name}\\.p[0-9]*\\.retry\\.')",
                    name = self.name(),
                );
            }
            Err(e) => {
                tracing::debug!(target: "consumer::amqp", queue = %self.name(), error = %e, "could not look for the delay queues of the earlier layout");
            }
        }
    }

    /// How many of the earlier layout's delay queues are on the broker and
    /// how many copies they hold; `None` when there are none.
    async fn old_delay_queues(
        &self,
        publisher: &AmqpPublisher,
    ) -> crate::error::Result<Option<(u32, u64)>> {
        let first_bucket = |p| every_bucket(&self.old_delay_prefix(p)).next();
        let mut any = false;
        let last = self.partitions() - 1;
        for p in std::iter::once(0).chain((last > 0).then_some(last)) {
            if let Some(name) = first_bucket(p)
                && self.find(publisher, &name).await? != Found::Missing
            {
                any = true;
                break;
            }
        }
        if !any {
            return Ok(None);
        }
        let (mut queues, mut copies) = (0, 0);
        for p in 0..self.partitions() {
            // The earlier layout declared a partition's buckets from the
            // shortest up, with none missing in between.
            for name in every_bucket(&self.old_delay_prefix(p)) {
                match self.find(publisher, &name).await? {
                    Found::Missing => break,
                    Found::Holding(n) => {
                        queues += 1;
                        copies += u64::from(n);
                    }
                    Found::Crashed => queues += 1,
                }
            }
        }
        Ok(Some((queues, copies)))
    }
}
