//! Held keys (sequenced dead letters): each key a handler's dead letter
//! holds, its head and why, how many messages wait behind it, and the
//! operator's two actions, release (the head runs again first) and skip
//! (the rest run without it), each confirmed and audited.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::{Failure, csrf_field, layout, query, when};
use crate::access::{ActionForm, Csrf};
use crate::operator::{AuditEntry, FailureKind, HeldQuery, Operator, OperatorError};

/// Keys listed per page.
const PAGE: u32 = 100;

/// The list's filter and page.
#[derive(Debug, Deserialize)]
pub(crate) struct ListQuery {
    handler: Option<String>,
    after_handler: Option<String>,
    after_key: Option<String>,
    done: Option<String>,
}

/// `GET /held-keys?handler=&after_handler=&after_key=`.
pub(crate) async fn list<O: Operator>(
    State(operator): State<Arc<O>>,
    axum::Extension(csrf): axum::Extension<Csrf>,
    Query(q): Query<ListQuery>,
) -> Result<Markup, Failure> {
    let handler = q.handler.filter(|h| !h.is_empty());
    let after = q.after_handler.zip(q.after_key);
    let keys = operator
        .held_keys(&HeldQuery {
            handler: handler.clone(),
            after,
            limit: PAGE,
        })
        .await?;
    let next = (keys.len() == PAGE as usize)
        .then(|| keys.last())
        .flatten()
        .map(|k| {
            let mut fields = vec![
                ("after_handler", k.handler.as_str()),
                ("after_key", k.key.as_str()),
            ];
            if let Some(h) = &handler {
                fields.push(("handler", h.as_str()));
            }
            format!("/held-keys?{}", query(&fields))
        });
    let body = html! {
        @if let Some(done) = &q.done { p.done { (done) } }
        p {
            "A handler with " code { "on_dead_letter = hold_key" } " holds a key when one of its messages is "
            "dead-lettered: the key's later messages wait, in order, until the key is released "
            "(the dead-lettered head runs again first) or its head is skipped."
        }
        form.filters method="get" action="/held-keys" {
            label { "Handler " input type="text" name="handler" value=(handler.as_deref().unwrap_or("")); }
            " "
            button type="submit" { "Filter" }
        }
        @if keys.is_empty() {
            p.empty { "No key is held." }
        } @else {
            table.held {
                thead { tr {
                    th { "Handler" } th { "Key" } th { "Status" } th.num { "Parked" }
                    th { "Head" } th { "Held at" } th { "Reason" } th { "" }
                } }
                tbody {
                    @for k in &keys {
                        tr {
                            td { (k.handler) } td.key { (k.key) } td.status { (k.status.as_str()) }
                            td.num { (k.parked) } td { (k.head_message_id) } td { (when(k.held_at)) }
                            td { (k.reason) }
                            td {
                                @if k.status == consumer_core::store::held::HoldStatus::Held {
                                    form.inline method="post" action="/held-keys/release" {
                                        (csrf_field(&csrf.0))
                                        input type="hidden" name="handler" value=(k.handler);
                                        input type="hidden" name="key" value=(k.key);
                                        button type="submit" { "Release" }
                                    }
                                    " "
                                    form.inline method="post" action="/held-keys/skip" {
                                        (csrf_field(&csrf.0))
                                        input type="hidden" name="handler" value=(k.handler);
                                        input type="hidden" name="key" value=(k.key);
                                        button.danger type="submit" { "Skip head" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @if let Some(next) = &next { p { a href=(next) { "Next page" } } }
        }
    };
    Ok(layout("Held keys", "Held keys", body))
}

fn key_of(form: &ActionForm) -> Result<(String, String), Failure> {
    match (form.get("handler"), form.get("key")) {
        (Some(h), Some(k)) => Ok((h.to_owned(), k.to_owned())),
        _ => Err(Failure(OperatorError::new(
            FailureKind::Refused,
            "The form named no held key.",
        ))),
    }
}

/// Asks before releasing or skipping, repeating the form's fields.
fn confirm(form: &ActionForm, path: &str, question: &str, handler: &str, key: &str) -> Markup {
    let fields = [("handler", handler), ("key", key)];
    super::confirm(form, (path, "Held keys", "/held-keys"), question, &fields)
}

/// Releases (or skips the head of) a key, with its audit entries.
async fn act<O: Operator>(
    operator: &O,
    form: &ActionForm,
    skip_head: bool,
) -> Result<Response, Failure> {
    let (handler, key) = key_of(form)?;
    let (path, action, question) = if skip_head {
        (
            "/held-keys/skip",
            "held key skip",
            format!(
                "Skip the head of key {key} of {handler}? The messages parked behind it run, in order, without it (its letter stays in the dead-letter queue)."
            ),
        )
    } else {
        (
            "/held-keys/release",
            "held key release",
            format!(
                "Release key {key} of {handler}? Its dead-lettered head runs again first, then the messages parked behind it, in order."
            ),
        )
    };
    if !form.confirmed() {
        return Ok(confirm(form, path, &question, &handler, &key).into_response());
    }
    let mut entry = AuditEntry {
        at: None,
        actor: form.actor.clone(),
        action: action.to_owned(),
        target: format!("{handler} {key}"),
        outcome: "requested".to_owned(),
    };
    operator.audit(&entry).await?;
    let result = operator.release_key(&handler, &key, skip_head).await;
    entry.outcome = match &result {
        Ok(true) => "released".to_owned(),
        Ok(false) => "not held".to_owned(),
        Err(e) => format!("failed: {e}"),
    };
    operator.audit(&entry).await?;
    if !result? {
        return Err(Failure(OperatorError::new(
            FailureKind::Refused,
            format!("Key {key} of {handler} is not held (released already, or never held)."),
        )));
    }
    let done = format!(
        "{action}: key {key} of {handler} released; a running consumer of {handler} drains it in order."
    );
    Ok(Redirect::to(&format!("/held-keys?{}", query(&[("done", &done)]))).into_response())
}

/// `POST /held-keys/release`.
pub(crate) async fn release<O: Operator>(
    State(operator): State<Arc<O>>,
    form: ActionForm,
) -> Result<Response, Failure> {
    act(&*operator, &form, false).await
}

/// `POST /held-keys/skip`.
pub(crate) async fn skip<O: Operator>(
    State(operator): State<Arc<O>>,
    form: ActionForm,
) -> Result<Response, Failure> {
    act(&*operator, &form, true).await
}
