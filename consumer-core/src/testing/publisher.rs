//! [`FaultyPublisher`]: a publisher that duplicates and fails on demand.

use super::Faults;
use crate::publish::{Outgoing, Publisher};
use consumer_backend::Error;

/// Wraps a [`Publisher`]: sends a message twice after
/// [`Faults::duplicate_next_publishes`], fails it after
/// [`Faults::fail_next_publishes`] (without sending it).
#[derive(Debug, Clone)]
pub struct FaultyPublisher<P> {
    inner: P,
    faults: Faults,
}

impl<P: Publisher> FaultyPublisher<P> {
    /// `inner` with the faults of `faults`.
    pub fn new(inner: P, faults: Faults) -> Self {
        Self { inner, faults }
    }

    /// The wrapped publisher.
    pub fn inner(&self) -> &P {
        &self.inner
    }
}

impl<P: Publisher> Publisher for FaultyPublisher<P> {
    fn system(&self) -> &'static str {
        self.inner.system()
    }

    fn channel(&self, destination: &str) -> Option<crate::describe::ChannelDescription> {
        self.inner.channel(destination)
    }

    async fn publish(&self, batch: &[Outgoing]) -> Vec<Result<(), Error>> {
        // Which messages fail, and how many copies the others get.
        let mut plan = Vec::with_capacity(batch.len());
        let mut send = Vec::with_capacity(batch.len());
        for out in batch {
            match self.faults.send_fault() {
                Err(e) => plan.push(Err(e)),
                Ok(()) => {
                    let copies = if self.faults.take_duplicate() { 2 } else { 1 };
                    for _ in 0..copies {
                        send.push(out.clone());
                    }
                    plan.push(Ok(copies));
                }
            }
        }
        let mut sent = self.inner.publish(&send).await.into_iter();
        plan.into_iter()
            .map(|p| match p {
                Err(e) => Err(e),
                Ok(copies) => {
                    let mut result = Ok(());
                    for _ in 0..copies {
                        match sent.next() {
                            Some(Ok(())) => {}
                            Some(Err(e)) => result = Err(e),
                            None => {
                                result = Err(Error::broker(
                                    crate::error::BrokerErrorKind::Unavailable,
                                    "the wrapped publisher returned too few results",
                                    None,
                                ));
                            }
                        }
                    }
                    result
                }
            })
            .collect()
    }
}
