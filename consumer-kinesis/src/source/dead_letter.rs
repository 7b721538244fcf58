//! Where a [`KinesisSource`](super::KinesisSource)'s dead letters go: any
//! [`Publisher`] and destination (a Kinesis stream through a
//! [`KinesisPublisher`](crate::KinesisPublisher), an SQS queue through
//! `consumer-sqs`'s publisher), behind one object-safe seam.

use std::future::Future;
use std::pin::Pin;

use consumer_backend::{BrokerErrorKind, Error, Message, Outgoing, Publisher};

type LetterFuture<'a> = Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>>;

/// Sends one dead letter and waits for the broker's confirmation.
pub(crate) trait LetterSink: Send + Sync + 'static {
    fn send<'a>(&'a self, letter: &'a Message) -> LetterFuture<'a>;

    /// Where letters go, for logs.
    fn destination(&self) -> &str;
}

/// A publisher and the destination letters go to.
pub(crate) struct PublisherSink<P> {
    pub(crate) publisher: P,
    pub(crate) destination: String,
}

impl<P: Publisher> LetterSink for PublisherSink<P> {
    fn send<'a>(&'a self, letter: &'a Message) -> LetterFuture<'a> {
        Box::pin(async move {
            let out = [Outgoing {
                destination: self.destination.clone(),
                message: letter.clone(),
            }];
            self.publisher
                .publish(&out)
                .await
                .into_iter()
                .next()
                .unwrap_or_else(|| {
                    Err(Error::broker(
                        BrokerErrorKind::Unavailable,
                        format!(
                            "the dead-letter publisher answered nothing for `{}`",
                            self.destination
                        ),
                        None,
                    ))
                })
        })
    }

    fn destination(&self) -> &str {
        &self.destination
    }
}
