//! Who may use the console, and proof that an action came from its own
//! form: the token (when configured) on every request, the session's CSRF
//! token on every action, and the headers that keep a page from running
//! anything but the console's own script.

use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequest, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

use crate::error::Error;

const TOKEN_COOKIE: &str = "consumer_console_token";
const CSRF_COOKIE: &str = "consumer_console_csrf";

/// The secret that opens the console: at least 16 characters, printable
/// ASCII without spaces (it travels in a header, a cookie and a URL).
#[derive(Clone)]
pub struct Token(String);

impl Token {
    /// Checks and wraps `text` (surrounding whitespace, such as a file's
    /// last line break, is dropped).
    pub fn new(text: &str) -> Result<Self, Error> {
        let text = text.trim();
        if text.len() < 16 {
            return Err(Error::BadToken("is shorter than 16 characters"));
        }
        if !text.bytes().all(|b| b.is_ascii_graphic() && b != b';') {
            return Err(Error::BadToken(
                "must be printable ASCII without spaces or `;`",
            ));
        }
        Ok(Self(text.to_owned()))
    }

    fn opens(&self, candidate: &str) -> bool {
        consumer_core::secret::same_bytes(self.0.as_bytes(), candidate.as_bytes())
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(***)")
    }
}

/// What the guard knows.
#[derive(Debug)]
pub(crate) struct Access {
    token: Option<Token>,
}

impl Access {
    pub(crate) fn new(token: Option<Token>) -> Self {
        Self { token }
    }
}

/// The session's CSRF token, for the page's forms.
#[derive(Debug, Clone)]
pub(crate) struct Csrf(pub(crate) String);

/// Who made a request, for the audit log.
#[derive(Debug, Clone)]
pub(crate) struct Actor(pub(crate) String);

fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

fn query_token(request: &Request) -> Option<String> {
    let query = request.uri().query()?;
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.into_owned())
}

/// The request's path and query without its `token` parameter.
fn without_token(request: &Request) -> String {
    let path = request.uri().path();
    let rest: Vec<(String, String)> = request
        .uri()
        .query()
        .map(|q| {
            form_urlencoded::parse(q.as_bytes())
                .into_owned()
                .filter(|(k, _)| k != "token")
                .collect()
        })
        .unwrap_or_default();
    if rest.is_empty() {
        return path.to_owned();
    }
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (k, v) in &rest {
        query.append_pair(k, v);
    }
    format!("{path}?{}", query.finish())
}

fn set_cookie(response: &mut Response, name: &str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{name}={value}; Path=/; HttpOnly; SameSite=Strict"
    )) {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
}

fn secure_headers(response: &mut Response) {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// Lets a request in only with the token (when one is configured), gives
/// the session its CSRF token, and sets the security headers.
pub(crate) async fn guard(
    State(access): State<Arc<Access>>,
    mut request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    if let Some(token) = &access.token {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let held = bearer.or_else(|| cookie(headers, TOKEN_COOKIE));
        if !held.is_some_and(|t| token.opens(t)) {
            // `?token=` once, on a page: a cookie keeps it for the session
            // and the address bar drops it.
            let offered = (request.method() == Method::GET)
                .then(|| query_token(&request))
                .flatten();
            let mut response = match offered {
                Some(t) if token.opens(&t) => {
                    let mut r = Redirect::to(&without_token(&request)).into_response();
                    set_cookie(&mut r, TOKEN_COOKIE, &t);
                    r
                }
                _ => (
                    StatusCode::UNAUTHORIZED,
                    "This console needs its token: open it once as /?token=<token>, or send Authorization: Bearer <token>.",
                )
                    .into_response(),
            };
            secure_headers(&mut response);
            return response;
        }
    }
    let existing = cookie(headers, CSRF_COOKIE)
        .filter(|v| v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::to_owned);
    let fresh = existing.is_none();
    let csrf = existing.unwrap_or_else(|| {
        format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        )
    });
    let peer = request
        .extensions()
        .get::<ConnectInfo<std::net::SocketAddr>>()
        .map_or_else(|| "a peer".to_owned(), |c| c.0.to_string());
    let actor = if access.token.is_some() {
        format!("{peer} (with the token)")
    } else {
        peer
    };
    request.extensions_mut().insert(Csrf(csrf.clone()));
    request.extensions_mut().insert(Actor(actor));
    let mut response = next.run(request).await;
    if fresh {
        set_cookie(&mut response, CSRF_COOKIE, &csrf);
    }
    secure_headers(&mut response);
    response
}

/// The fields of an action's form, accepted only with the session's CSRF
/// token: every `POST` handler takes one, so none can forget the check.
#[derive(Debug)]
pub(crate) struct ActionForm {
    fields: Vec<(String, String)>,
    /// Who sent it.
    pub(crate) actor: String,
    /// The session's CSRF token, for the next form.
    pub(crate) csrf: String,
}

impl ActionForm {
    /// The first value of `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    /// Every value of `name`, in order.
    pub(crate) fn all(&self, name: &str) -> Vec<String> {
        self.fields
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Whether the operator confirmed the action on its confirmation page.
    pub(crate) fn confirmed(&self) -> bool {
        self.get("confirmed") == Some("yes")
    }
}

impl<S: Send + Sync> FromRequest<S> for ActionForm {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let csrf = request.extensions().get::<Csrf>().cloned();
        let actor = request
            .extensions()
            .get::<Actor>()
            .map_or_else(|| "a peer".to_owned(), |a| a.0.clone());
        let body = axum::body::Bytes::from_request(request, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let fields: Vec<(String, String)> = form_urlencoded::parse(&body).into_owned().collect();
        let sent = fields
            .iter()
            .find(|(k, _)| k == "csrf")
            .map(|(_, v)| v.as_str());
        match (&csrf, sent) {
            (Some(Csrf(expected)), Some(sent)) if consumer_core::secret::same_bytes(expected.as_bytes(), sent.as_bytes()) => {
                Ok(Self {
                    fields,
                    actor,
                    csrf: expected.clone(),
                })
            }
            _ => Err((
                StatusCode::FORBIDDEN,
                "This action did not come from the console's own form (its CSRF token is missing or stale): reload the page and try again.",
            )
                .into_response()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_long_printable_and_never_shown() {
        assert!(Token::new("short").is_err());
        assert!(Token::new("has a space in it, long").is_err());
        let t = Token::new("0123456789abcdef\n").expect("valid");
        assert!(t.opens("0123456789abcdef"));
        assert!(!t.opens("0123456789abcdeF"));
        assert_eq!(format!("{t:?}"), "Token(***)");
    }
}
