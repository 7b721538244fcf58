//! The in-memory broker as a [`Publisher`]: what the outbox relay and the
//! tests publish through, with the send spans every publisher makes.

use super::MemoryBroker;
use crate::describe::ChannelDescription;
use crate::publish::{Outgoing, Publisher};
use crate::trace::Sends;
use consumer_backend::Error;

impl Publisher for MemoryBroker {
    fn system(&self) -> &'static str {
        "memory"
    }

    fn channel(&self, destination: &str) -> Option<ChannelDescription> {
        Some(ChannelDescription::new("memory", destination))
    }

    async fn publish(&self, batch: &[Outgoing]) -> Vec<Result<(), Error>> {
        let sends = Sends::start(self.system(), batch);
        let mut results = Vec::with_capacity(batch.len());
        for o in sends.batch() {
            results.push(
                MemoryBroker::publish(self, &o.destination, o.message.clone())
                    .await
                    .map(|_| ()),
            );
        }
        sends.finish(&results);
        results
    }
}
