//! Sequenced dead letters, the consumer's side: the source a consumer
//! reads when its handlers may hold keys.
//!
//! A handler that holds keys
//! ([`OnDeadLetter::HoldKey`](crate::store::held::OnDeadLetter::HoldKey))
//! parks a held key's later deliveries (`settle.rs`: `park_if_held`, run
//! before its attempts) and holds the key of a delivery it dead-letters
//! (`settle_letter`); the store keeps both ([`HeldKeys`](crate::store::held::HeldKeys)).
//! What is left is to run the parked messages once an operator released
//! the key: [`HeldSource`] wraps the broker's source and adds the
//! deliveries of the [drain](drain) to the ones it receives, each with an
//! [`HeldAcker`] that settles it where it came from.

mod acker;
mod drain;

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub(crate) use acker::HeldAcker;
pub(crate) use drain::LEASE;
use drain::{Drain, Drained};

use super::observe::Observer;
use crate::envelope::Envelope;
use crate::source::Source;
use crate::store::DedupStore;

/// The broker's source, and the drain of released keys when a handler
/// holds keys (without one it only passes the broker's deliveries on).
pub(crate) struct HeldSource<Src, S> {
    inner: Src,
    drain: Option<Draining<S>>,
}

/// The drain's task, started with the first receive (in the consumer's
/// runtime), and where its deliveries arrive.
struct Draining<S> {
    deliveries: mpsc::Receiver<Drained<S>>,
    unstarted: Option<Drain<S>>,
    task: Option<JoinHandle<()>>,
}

impl<Src: Source, S: DedupStore> HeldSource<Src, S> {
    /// `inner`, with a drain of the keys `handlers` hold (none: no drain).
    pub(crate) fn new(
        inner: Src,
        store: S,
        handlers: Vec<&'static str>,
        max_body: usize,
        lease: std::time::Duration,
        observer: Observer,
    ) -> Self {
        if handlers.is_empty() {
            return Self { inner, drain: None };
        }
        let (tx, rx) = mpsc::channel(1);
        let drain = Drain {
            store,
            handlers,
            drainer: format!("consumer-{}", uuid::Uuid::new_v4()),
            max_body,
            lease,
            poll: drain::POLL,
            deliveries: tx,
            observer,
        };
        Self {
            inner,
            drain: Some(Draining {
                deliveries: rx,
                unstarted: Some(drain),
                task: None,
            }),
        }
    }
}

impl<Src: Source, S: DedupStore> Source for HeldSource<Src, S> {
    type Acker = HeldAcker<Src::Acker, S>;

    fn system(&self) -> &'static str {
        self.inner.system()
    }

    fn consumer_group(&self) -> Option<&str> {
        self.inner.consumer_group()
    }

    fn server(&self) -> Option<(&str, u16)> {
        self.inner.server()
    }

    fn gauges(&self) -> Option<Arc<dyn consumer_backend::gauges::SourceGauges>> {
        self.inner.gauges()
    }

    fn check_redelivery(&self, longest_delay: std::time::Duration) -> Result<(), String> {
        self.inner.check_redelivery(longest_delay)
    }

    fn accept_retry_policy(&mut self, policy: &crate::retry::RetryPolicy) -> Result<(), String> {
        self.inner.accept_retry_policy(policy)
    }

    fn limit_body(&mut self, max_bytes: usize) {
        if let Some(Draining {
            unstarted: Some(drain),
            ..
        }) = &mut self.drain
        {
            drain.max_body = max_bytes;
        }
        self.inner.limit_body(max_bytes);
    }

    fn channels(&self) -> Option<crate::describe::SourceChannels> {
        self.inner.channels()
    }

    /// The next delivery: the broker's or the drain's, whichever comes
    /// first (both are cancel-safe).
    async fn recv(
        &mut self,
    ) -> Result<Option<(Arc<Envelope>, Self::Acker)>, consumer_backend::Error> {
        let Some(draining) = &mut self.drain else {
            let got = self.inner.recv().await?;
            return Ok(got.map(|(e, a)| (e, HeldAcker::Broker(a))));
        };
        if let Some(drain) = draining.unstarted.take() {
            draining.task = Some(tokio::spawn(drain.run()));
        }
        tokio::select! {
            got = self.inner.recv() => Ok(got?.map(|(e, a)| (e, HeldAcker::Broker(a)))),
            Some((e, a)) = draining.deliveries.recv() => Ok(Some((e, HeldAcker::Parked(Box::new(a))))),
        }
    }

    /// Stops the drain (a message it handed over and that was released
    /// stays parked), then closes the broker's source.
    async fn close(self) {
        if let Some(Draining {
            task: Some(task), ..
        }) = &self.drain
        {
            task.abort();
        }
        self.inner.close().await;
    }
}
