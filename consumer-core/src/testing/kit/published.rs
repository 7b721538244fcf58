//! What the outbox relay published: the kit's relays publish to the
//! memory broker through [`Recording`], which keeps a copy of each message
//! the broker took, as a [`Published`].

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::de::DeserializeOwned;

use crate::MemoryBroker;
use crate::envelope::{Message, names};
use crate::publish::{Outgoing, Publisher};
use crate::testing::{Faults, FaultyPublisher};
use consumer_backend::Error;

/// One message the outbox relay published, as the broker took it.
#[derive(Debug, Clone)]
pub struct Published {
    /// The topic it went to.
    pub destination: String,
    /// The message: key, headers (the CloudEvents attributes), payload.
    pub message: Message,
}

impl Published {
    /// A header's value, when it is there and UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.message.headers.get(name).ok().flatten()
    }

    /// Its CloudEvents type (`ce_type`).
    pub fn event_type(&self) -> Option<&str> {
        self.header(names::TYPE)
    }

    /// Its CloudEvents id (`ce_id`).
    pub fn id(&self) -> Option<&str> {
        self.header(names::ID)
    }

    /// Its partition key.
    pub fn key(&self) -> Option<&str> {
        self.message.key.as_deref()
    }

    /// Its payload decoded from JSON as `T`.
    pub fn payload<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.message.payload)
    }
}

/// The memory broker as the relay's publisher, keeping what it took,
/// behind the fault kit's publisher (which does nothing until armed).
#[derive(Clone)]
pub(super) struct Recording {
    broker: Arc<FaultyPublisher<MemoryBroker>>,
    log: Arc<Mutex<Vec<Published>>>,
}

impl Recording {
    pub(super) fn new(broker: MemoryBroker, faults: Faults) -> Self {
        Self {
            broker: Arc::new(FaultyPublisher::new(broker, faults)),
            log: Arc::default(),
        }
    }

    /// How many messages the broker took so far.
    pub(super) fn count(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Published>> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Everything published so far, in the order the broker took it.
    pub(super) fn published(&self) -> Vec<Published> {
        self.lock().clone()
    }
}

impl Publisher for Recording {
    fn system(&self) -> &'static str {
        "memory"
    }

    async fn publish(&self, batch: &[Outgoing]) -> Vec<Result<(), Error>> {
        let results = Publisher::publish(&*self.broker, batch).await;
        let mut log = self.lock();
        for (o, result) in batch.iter().zip(&results) {
            if result.is_ok() {
                log.push(Published {
                    destination: o.destination.clone(),
                    message: o.message.clone(),
                });
            }
        }
        results
    }
}
