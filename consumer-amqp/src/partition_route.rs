//! The publishers' side of a [`PartitionedTopology`]: a message for the
//! logical queue goes to the partition queue of its key.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU32, Ordering};

use consumer_backend::Outgoing;
use tokio::sync::OnceCell;

use crate::error::Result;
use crate::publisher::AmqpPublisher;
use crate::topology::PartitionedTopology;

/// The partitioned queues a publisher knows, each checked and declared
/// once, before the first message goes to it.
#[derive(Debug, Default)]
pub(crate) struct PartitionRoutes {
    routes: Vec<Route>,
    /// Spreads messages without a key over the partitions.
    round_robin: AtomicU32,
}

#[derive(Debug)]
struct Route {
    topology: PartitionedTopology,
    /// `/<name>`: the destination that means the logical queue.
    destination: String,
    ready: OnceCell<()>,
}

impl PartitionRoutes {
    /// These routes and `topology` (replacing one of the same name).
    pub(crate) fn with(&self, topology: PartitionedTopology) -> Self {
        let mut routes: Vec<Route> = self
            .routes
            .iter()
            .filter(|r| r.topology.name() != topology.name())
            .map(|r| Route {
                topology: r.topology.clone(),
                destination: r.destination.clone(),
                ready: OnceCell::new(),
            })
            .collect();
        routes.push(Route {
            destination: format!("/{}", topology.name()),
            topology,
            ready: OnceCell::new(),
        });
        Self {
            routes,
            round_robin: AtomicU32::new(0),
        }
    }

    fn find(&self, destination: &str) -> Option<&Route> {
        self.routes.iter().find(|r| r.destination == destination)
    }

    /// The partitioned queue `destination` names, if it names one.
    pub(crate) fn topology_for(&self, destination: &str) -> Option<&PartitionedTopology> {
        self.find(destination).map(|r| &r.topology)
    }

    /// Checks the partition count and declares each partitioned queue
    /// `batch` goes to, once per publisher.
    pub(crate) async fn prepare(
        &self,
        publisher: &AmqpPublisher,
        batch: &[Outgoing],
    ) -> Result<()> {
        if self.routes.is_empty() {
            return Ok(());
        }
        for route in &self.routes {
            if batch.iter().any(|o| o.destination == route.destination) {
                // A partition queue RabbitMQ reports crashed is left as it
                // is: RabbitMQ nacks what is sent to it (RabbitMQ 3.10), and
                // each such message is reported on its own.
                route
                    .ready
                    .get_or_try_init(|| async {
                        route.topology.check_and_declare(publisher).await.map(drop)
                    })
                    .await?;
            }
        }
        Ok(())
    }

    /// `batch` with each message for a partitioned queue sent to the
    /// partition queue of its key (`/<name>.p<k>`); unchanged, and not
    /// copied, when none is.
    pub(crate) fn route<'a>(&self, batch: &'a [Outgoing]) -> Cow<'a, [Outgoing]> {
        if self.routes.is_empty() || !batch.iter().any(|o| self.find(&o.destination).is_some()) {
            return Cow::Borrowed(batch);
        }
        Cow::Owned(
            batch
                .iter()
                .map(|o| match self.find(&o.destination) {
                    None => o.clone(),
                    Some(route) => {
                        let t = &route.topology;
                        let queue = match &o.message.key {
                            Some(key) => t.queue_for_key(key.as_bytes()),
                            None => t.partition_queue(
                                self.round_robin.fetch_add(1, Ordering::Relaxed) % t.partitions(),
                            ),
                        };
                        Outgoing {
                            destination: format!("/{queue}"),
                            message: o.message.clone(),
                        }
                    }
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use consumer_backend::Message;

    use super::*;

    fn out(destination: &str, key: Option<&str>) -> Outgoing {
        let mut message = Message::raw(&b"{}"[..]);
        message.key = key.map(str::to_owned);
        Outgoing {
            destination: destination.to_owned(),
            message,
        }
    }

    #[test]
    fn keys_go_to_their_partition_and_other_destinations_are_untouched() {
        let t = PartitionedTopology::new("orders", 4).expect("valid");
        let routes = PartitionRoutes::default().with(t.clone());
        let batch = [
            out("/orders", Some("o-1")),
            out("/billing", Some("o-1")),
            out("orders", None),
        ];
        let routed = routes.route(&batch);
        assert_eq!(
            routed[0].destination,
            format!("/{}", t.queue_for_key(b"o-1"))
        );
        assert_eq!(routed[1].destination, "/billing");
        assert_eq!(
            routed[2].destination, "orders",
            "an exchange named like the queue is not the queue"
        );
        let untouched = [out("/billing", None)];
        assert!(matches!(routes.route(&untouched), Cow::Borrowed(_)));
    }

    #[test]
    fn messages_without_a_key_are_spread() {
        let routes =
            PartitionRoutes::default().with(PartitionedTopology::new("q", 3).expect("valid"));
        let batch: Vec<_> = (0..6).map(|_| out("/q", None)).collect();
        let routed = routes.route(&batch);
        let mut seen: Vec<_> = routed.iter().map(|o| o.destination.clone()).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen, ["/q.p0", "/q.p1", "/q.p2"]);
    }
}
