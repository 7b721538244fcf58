//! The service's admin endpoint, on the health endpoint's port: operators
//! pause and resume handlers over HTTP (the store's
//! [`PausedHandlers`], as `consumer pause` does). Off unless
//! [`Service::with_admin`](super::Service::with_admin) gives it a token
//! and a store; then every `/admin/` request needs
//! `Authorization: Bearer <token>` (compared in constant time), else 401.
//!
//! * `POST /admin/pause/{handler}?reason=..&by=..` (`*`: every handler);
//! * `POST /admin/resume/{handler}` (404 when it is not paused);
//! * `GET /admin/paused`: one line per pause.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use percent_encoding::percent_decode_str;

use super::endpoint::Response;
use crate::envelope::format_time;
use crate::error::Error;
use crate::secret::Secret;
use crate::store::paused::{Pause, PausedHandler, PausedHandlers};

type Boxed<'a, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

/// [`PausedHandlers`] behind a pointer: the endpoint does not know the
/// store's type.
trait Pauses: Send + Sync {
    fn pause<'a>(&'a self, handler: &'a str, by: &'a str, reason: &'a str) -> Boxed<'a, Pause>;
    fn resume<'a>(&'a self, handler: &'a str) -> Boxed<'a, bool>;
    fn list(&self) -> Boxed<'_, Vec<PausedHandler>>;
}

impl<S: PausedHandlers> Pauses for S {
    fn pause<'a>(&'a self, handler: &'a str, by: &'a str, reason: &'a str) -> Boxed<'a, Pause> {
        Box::pin(PausedHandlers::pause(self, handler, by, reason))
    }

    fn resume<'a>(&'a self, handler: &'a str) -> Boxed<'a, bool> {
        Box::pin(PausedHandlers::resume(self, handler))
    }

    fn list(&self) -> Boxed<'_, Vec<PausedHandler>> {
        Box::pin(self.paused_handlers())
    }
}

/// The admin routes' token and store.
#[derive(Clone)]
pub(super) struct Admin {
    token: Arc<Secret>,
    pauses: Arc<dyn Pauses>,
}

impl Admin {
    pub(super) fn new<S: PausedHandlers>(token: Secret, store: S) -> Self {
        Self {
            token: Arc::new(token),
            pauses: Arc::new(store),
        }
    }

    /// Answers a request under `/admin/` (`head` is its request head).
    pub(super) async fn respond(&self, method: &str, target: &str, head: &str) -> Response {
        if !bearer(head).is_some_and(|offered| self.token.matches(offered)) {
            return Response::text(
                "401 Unauthorized",
                "the admin endpoint needs its token: Authorization: Bearer <token>\n".to_owned(),
            );
        }
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let result = match (method, path.strip_prefix("/admin/")) {
            ("POST", Some(rest)) if rest.starts_with("pause/") => {
                self.pause(&decoded(&rest["pause/".len()..]), query).await
            }
            ("POST", Some(rest)) if rest.starts_with("resume/") => {
                self.resume(&decoded(&rest["resume/".len()..])).await
            }
            ("GET", Some("paused")) => self.list().await,
            _ => Ok(Response::text(
                "404 Not Found",
                "POST /admin/pause/{handler}, POST /admin/resume/{handler}, GET /admin/paused\n"
                    .to_owned(),
            )),
        };
        result.unwrap_or_else(|e| {
            Response::text(
                "503 Service Unavailable",
                format!("the store cannot be reached: {e}\n"),
            )
        })
    }

    async fn pause(&self, handler: &str, query: &str) -> Result<Response, Error> {
        if handler.is_empty() {
            return Ok(Response::text(
                "400 Bad Request",
                "name the handler: /admin/pause/{handler}, or * for every handler\n".to_owned(),
            ));
        }
        let by = parameter(query, "by").unwrap_or_else(|| "admin endpoint".to_owned());
        let reason = parameter(query, "reason").unwrap_or_default();
        let text = match self.pauses.pause(handler, &by, &reason).await? {
            Pause::Paused => format!("{handler} paused by {by}\n"),
            _ => format!("{handler} was paused already\n"),
        };
        Ok(Response::text("200 OK", text))
    }

    async fn resume(&self, handler: &str) -> Result<Response, Error> {
        Ok(if self.pauses.resume(handler).await? {
            Response::text("200 OK", format!("{handler} resumed\n"))
        } else {
            Response::text("404 Not Found", format!("{handler} is not paused\n"))
        })
    }

    async fn list(&self) -> Result<Response, Error> {
        let body: String = self
            .pauses
            .list()
            .await?
            .iter()
            .map(|p| {
                let since = format_time(p.since);
                format!("{} since {since} by {}: {}\n", p.handler, p.by, p.reason)
            })
            .collect();
        Ok(Response::text("200 OK", body))
    }
}

/// The bearer token of the request head's `Authorization` header.
fn bearer(head: &str) -> Option<&str> {
    head.lines().skip(1).find_map(|line| {
        let (name, value) = line.split_once(':')?;
        if !name.trim().eq_ignore_ascii_case("authorization") {
            return None;
        }
        value.trim().strip_prefix("Bearer ").map(str::trim)
    })
}

/// `text` percent-decoded (`+` is a space in a query).
fn decoded(text: &str) -> String {
    percent_decode_str(&text.replace('+', " "))
        .decode_utf8_lossy()
        .into_owned()
}

/// Query parameter `name`, decoded.
fn parameter(query: &str, name: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| decoded(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_token_is_read_from_the_head_whatever_the_header_case() {
        let head = "POST /admin/pause/x HTTP/1.1\r\nhost: h\r\nAUTHORIZATION: Bearer abc \r\n\r\n";
        assert_eq!(bearer(head), Some("abc"));
        assert_eq!(bearer("GET / HTTP/1.1\r\n\r\n"), None);
    }

    #[test]
    fn query_parameters_are_decoded() {
        let query = "reason=db+migration%2C+step%202&by=ana";
        assert_eq!(
            parameter(query, "reason").as_deref(),
            Some("db migration, step 2")
        );
        assert_eq!(parameter(query, "by").as_deref(), Some("ana"));
        assert_eq!(parameter(query, "other"), None);
    }
}
