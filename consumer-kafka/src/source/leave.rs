//! A member with a derived static id leaves its group on close.
//!
//! librdkafka sends no LeaveGroup for a static member that closes (KIP-345:
//! its restart with the same id is to take the partitions back), but it
//! does when the member unsubscribes first. A derived id's successor may
//! have another one (a replaced pod has a new host name), so a derived
//! member unsubscribes, serves its revoke (which commits), and closes once
//! the broker no longer lists it: closing earlier could overtake the
//! LeaveGroup, which librdkafka then drops.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};

use super::rebalance::Ctx;

/// How long a close waits for the group to drop the member (librdkafka
/// gives its LeaveGroup request as long).
const LEAVE_WAIT: Duration = Duration::from_secs(5);

/// Leaves `group`, where this consumer is the static member `instance_id`:
/// returns once the broker lists no member of that id, after
/// [`LEAVE_WAIT`], or when the group cannot be described.
pub(super) fn leave_group(consumer: &BaseConsumer<Ctx>, group: &str, instance_id: &str) {
    consumer.unsubscribe();
    // The broker names a static member `<group.instance.id>-<uuid>`.
    let prefix = format!("{instance_id}-");
    let deadline = Instant::now() + LEAVE_WAIT;
    loop {
        // Serves the revoke; records still queued are dropped unstored,
        // for the next owner to read from the committed offset.
        drop(consumer.poll(Duration::from_millis(20)));
        let listed = match consumer.fetch_group_list(Some(group), Duration::from_secs(1)) {
            Ok(list) => list.groups().iter().any(|g| {
                g.name() == group && g.members().iter().any(|m| m.id().starts_with(&prefix))
            }),
            Err(e) => {
                tracing::debug!(target: "consumer::kafka", group, error = %e, "the group could not be described: closing without waiting for the leave");
                return;
            }
        };
        if !listed {
            return;
        }
        if Instant::now() >= deadline {
            tracing::warn!(target: "consumer::kafka", group, instance_id, "the group still lists this member {LEAVE_WAIT:?} after it left: its partitions wait out its session");
            return;
        }
    }
}
