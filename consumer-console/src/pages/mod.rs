//! The pages: one module per part of the console, a shared layout, and
//! the page an operator's failure becomes.

pub(crate) mod assets;
pub(crate) mod audit;
pub(crate) mod circuits;
pub(crate) mod held;
pub(crate) mod letters;
pub(crate) mod outbox;
pub(crate) mod payload;
pub(crate) mod replay;
pub(crate) mod sagas;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{DOCTYPE, Markup, html};
use time::OffsetDateTime;

use crate::operator::{FailureKind, OperatorError};

/// The parts of the console, in the navigation's order.
const NAVIGATION: &[(&str, &str)] = &[
    ("Dead letters", "/dead-letters"),
    ("Held keys", "/held-keys"),
    ("Circuits and pauses", "/circuits"),
    ("Sagas", "/sagas"),
    ("Outbox", "/outbox"),
    ("Audit log", "/audit"),
];

/// `/`: the dead letters.
pub(crate) async fn home() -> Redirect {
    Redirect::to("/dead-letters")
}

/// A whole page: the navigation, `title`, and `body`.
pub(crate) fn layout(title: &str, section: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · consumer console" }
                link rel="stylesheet" href="/static/console.css";
                link rel="icon" href="/static/favicon.svg" type="image/svg+xml";
                script src="/static/console.js" defer {}
            }
            body {
                nav {
                    span.brand { "consumer console" }
                    @for (name, href) in NAVIGATION {
                        @if *name == section {
                            a.current href=(href) { (name) }
                        } @else {
                            a href=(href) { (name) }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// The page that asks before an action: `question`, then a form that
/// posts `fields` again to `path` with the CSRF token and `confirmed`, or
/// a way back to `back`. `section` is the navigation's current part.
pub(crate) fn confirm(
    form: &crate::access::ActionForm,
    (path, section, back): (&str, &str, &str),
    question: &str,
    fields: &[(&str, &str)],
) -> Markup {
    let body = html! {
        p { (question) }
        form method="post" action=(path) {
            (csrf_field(&form.csrf))
            @for (name, value) in fields { input type="hidden" name=(name) value=(value); }
            input type="hidden" name="confirmed" value="yes";
            button.danger type="submit" { "Yes, do it" }
            " "
            a href=(back) { "No" }
        }
    };
    layout("Confirm", section, body)
}

/// The hidden field every action's form carries.
pub(crate) fn csrf_field(csrf: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(csrf); }
}

/// `2026-01-31T12:00:00Z`.
pub(crate) fn when(t: OffsetDateTime) -> String {
    consumer_core::envelope::format_time(t)
}

/// An operator's failure as a page with its status code.
#[derive(Debug)]
pub(crate) struct Failure(pub(crate) OperatorError);

impl From<OperatorError> for Failure {
    fn from(e: OperatorError) -> Self {
        Self(e)
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let status = match self.0.kind {
            FailureKind::NotFound => StatusCode::NOT_FOUND,
            FailureKind::Refused => StatusCode::CONFLICT,
            _ => StatusCode::BAD_GATEWAY,
        };
        let page = layout(
            "Something went wrong",
            "",
            html! { p.error { (self.0.message) } },
        );
        (status, page).into_response()
    }
}

/// A query string of `pairs`, escaped.
pub(crate) fn query(pairs: &[(&str, &str)]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        q.append_pair(k, v);
    }
    q.finish()
}
