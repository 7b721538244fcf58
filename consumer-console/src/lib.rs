//! The operator's console in the browser: dead letters grouped by handler
//! and reason, one letter's full context, replays through the command
//! line's replay engine (canary first, rate, dry run, journal), held keys
//! with release and skip, paused handlers with pause and resume, sagas with
//! resume and abandon, the outbox's backlog, and the audit log of every
//! action taken.
//!
//! `consumer console` serves it; an application can mount
//! [`Console::router`] in its own host behind its admin token.
//!
//! ```no_run
//! # async fn run(operator: impl consumer_console::Operator) -> Result<(), consumer_console::Error> {
//! use consumer_console::{Console, bind};
//!
//! let address = "127.0.0.1:9700".parse().expect("an address");
//! // Without a token the console only listens on a loopback address.
//! let listener = bind(address, None).await?;
//! Console::new(operator)
//!     .serve(listener, std::future::pending())
//!     .await
//! # }
//! ```
//!
//! **What the console guarantees.** Pages never load a whole place: letters
//! are read a page at a time (keyset on the place's order) and grouped by
//! the database (`GROUP BY`). Every payload and header is escaped (the
//! templates escape all text; the `Content-Security-Policy` allows only the
//! console's own script file). Every action is a `POST` carrying the
//! session's CSRF token (a random value in a `SameSite=Strict` cookie,
//! repeated in the form); every action asks for confirmation first and is
//! written to the audit log before it runs. With a token configured, no
//! page, file or action answers without it.

mod access;
mod error;
pub mod operator;
mod pages;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

pub use access::Token;
pub use error::Error;
pub use operator::{Operator, OperatorError};

/// The console: pages and actions over an [`Operator`].
#[derive(Debug)]
pub struct Console<O> {
    operator: O,
    token: Option<Token>,
}

impl<O: Operator> Console<O> {
    /// A console over `operator`, without a token: bind it to a loopback
    /// address only ([`bind`] refuses any other).
    pub fn new(operator: O) -> Self {
        Self {
            operator,
            token: None,
        }
    }

    /// Requires `token` on every page, file and action: as
    /// `Authorization: Bearer <token>`, or once as `?token=<token>`, which
    /// sets a session cookie.
    pub fn with_token(mut self, token: Option<Token>) -> Self {
        self.token = token;
        self
    }

    /// The console's routes, to serve or to mount under a host's path.
    pub fn router(self) -> Router {
        let state = Arc::new(self.operator);
        let guarded = Arc::new(access::Access::new(self.token));
        Router::new()
            .route("/", get(pages::home))
            .route("/dead-letters", get(pages::letters::groups::<O>))
            .route("/dead-letters/list", get(pages::letters::list::<O>))
            .route("/dead-letters/replay", post(pages::replay::replay::<O>))
            .route("/dead-letters/{row}", get(pages::letters::show::<O>))
            .route("/held-keys", get(pages::held::list::<O>))
            .route("/held-keys/release", post(pages::held::release::<O>))
            .route("/held-keys/skip", post(pages::held::skip::<O>))
            .route("/circuits", get(pages::circuits::list::<O>))
            .route("/circuits/pause", post(pages::circuits::pause::<O>))
            .route("/circuits/resume", post(pages::circuits::resume::<O>))
            .route("/sagas", get(pages::sagas::list::<O>))
            .route("/saga", get(pages::sagas::show::<O>))
            .route("/saga/resume", post(pages::sagas::resume::<O>))
            .route("/saga/abandon", post(pages::sagas::abandon::<O>))
            .route("/outbox", get(pages::outbox::backlog::<O>))
            .route("/audit", get(pages::audit::log::<O>))
            .route("/static/console.css", get(pages::assets::css))
            .route("/static/console.js", get(pages::assets::js))
            .route("/static/favicon.svg", get(pages::assets::icon))
            .with_state(state)
            .layer(axum::middleware::from_fn_with_state(guarded, access::guard))
    }

    /// Serves the console on `listener` until `shutdown` completes.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), Error> {
        let app = self
            .router()
            .into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(Error::Serve)
    }
}

/// Listens on `address`; refuses an address other machines can reach
/// unless a token is configured.
pub async fn bind(
    address: SocketAddr,
    token: Option<&Token>,
) -> Result<tokio::net::TcpListener, Error> {
    if token.is_none() && !address.ip().is_loopback() {
        return Err(Error::Exposed(address));
    }
    tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| Error::Bind { address, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_address_others_reach_needs_a_token() {
        let open: SocketAddr = "0.0.0.0:0".parse().expect("an address");
        let refused = bind(open, None).await.expect_err("refused without a token");
        assert!(matches!(refused, Error::Exposed(_)), "{refused}");
        let token = Token::new("0123456789abcdef").expect("a token");
        assert!(bind(open, Some(&token)).await.is_ok());
        let loopback: SocketAddr = "127.0.0.1:0".parse().expect("an address");
        assert!(bind(loopback, None).await.is_ok());
    }
}
