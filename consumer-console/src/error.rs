//! What can stop the console from serving.

use std::net::SocketAddr;

/// Why the console could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Asked to listen where other machines can reach it, without a token.
    #[error(
        "the console would listen on {0}, which other machines can reach, without a token: give it one (--token-file or CONSUMER_CONSOLE_TOKEN), or listen on 127.0.0.1"
    )]
    Exposed(SocketAddr),
    /// The address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The token is unusable.
    #[error("the console's token {0}")]
    BadToken(&'static str),
    /// Serving failed.
    #[error("serving the console: {0}")]
    Serve(#[source] std::io::Error),
}
