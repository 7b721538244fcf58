//! Circuits and pauses: the handlers an operator paused in the store (a
//! handler's pause, or every handler's, `*`), each with its author, reason
//! and time, and the two actions, pause and resume, each confirmed and
//! audited. Open circuits are each consumer process's own state: the page
//! says where each service publishes them, since the store does not hold
//! them.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::{Failure, csrf_field, layout, query, when};
use crate::access::{ActionForm, Csrf};
use crate::operator::{AuditEntry, FailureKind, Operator, OperatorError};

/// The navigation's name of this page.
const SECTION: &str = "Circuits and pauses";

/// The name that stands for every handler (the store's).
const EVERY_HANDLER: &str = consumer_core::store::paused::EVERY_HANDLER;

/// What the handler name stands for, in a sentence.
fn which(handler: &str) -> String {
    if handler == EVERY_HANDLER {
        "every handler".to_owned()
    } else {
        format!("handler {handler}")
    }
}

/// The page's message after an action.
#[derive(Debug, Deserialize)]
pub(crate) struct ListQuery {
    done: Option<String>,
}

/// `GET /circuits`.
pub(crate) async fn list<O: Operator>(
    State(operator): State<Arc<O>>,
    axum::Extension(csrf): axum::Extension<Csrf>,
    Query(q): Query<ListQuery>,
) -> Result<Markup, Failure> {
    let pauses = operator.paused().await?;
    let body = html! {
        @if let Some(done) = &q.done { p.done { (done) } }
        h2 { "Paused handlers" }
        p {
            "A paused handler's deliveries wait, spending no attempt, until it is resumed: every running "
            "consumer of it reads the pauses from the store about once a second, and one started meanwhile "
            "starts paused. " code { "*" } " pauses every handler; resuming one handler does not end it. "
            "The same as " code { "consumer pause" } ", " code { "consumer resume" } " and the service's "
            code { "/admin/pause" } "."
        }
        @if pauses.is_empty() {
            p.empty { "No handler is paused." }
        } @else {
            table.paused {
                thead { tr { th { "Handler" } th { "Since" } th { "By" } th { "Reason" } th { "" } } }
                tbody {
                    @for p in &pauses {
                        tr {
                            td.handler { (p.handler) } td { (when(p.since)) } td { (p.by) } td { (p.reason) }
                            td {
                                form.inline method="post" action="/circuits/resume" {
                                    (csrf_field(&csrf.0))
                                    input type="hidden" name="handler" value=(p.handler);
                                    button type="submit" { "Resume…" }
                                }
                            }
                        }
                    }
                }
            }
        }
        form.action.pause method="post" action="/circuits/pause" {
            (csrf_field(&csrf.0))
            label { "Handler " input type="text" name="handler" required placeholder="a handler, or *"; }
            " "
            label { "Reason " input type="text" name="reason" size="40"; }
            " "
            button.danger type="submit" { "Pause…" }
        }
        h2 { "Open circuits" }
        p.note {
            "A handler's circuit is each consumer process's own: it opens when what is behind the handler "
            "is down, and closes when a probe works. The store does not hold it, so this console cannot "
            "list it; each service names its open circuits on its health endpoint ("
            code { "/readyz" } ": " code { "(circuit open: charge)" } "), in the metric "
            code { "consumer.circuit.open" } " and the alert " code { "ConsumerCircuitOpen" } ". "
            "Pausing the handler here stops every process's consumer of it at once."
        }
    };
    Ok(layout(SECTION, SECTION, body))
}

fn field<'f>(form: &'f ActionForm, name: &str) -> Option<&'f str> {
    form.get(name).map(str::trim).filter(|v| !v.is_empty())
}

fn handler_of(form: &ActionForm) -> Result<String, Failure> {
    field(form, "handler").map(str::to_owned).ok_or_else(|| {
        Failure(OperatorError::new(
            FailureKind::Refused,
            "The form named no handler: give its name, or * for every handler.",
        ))
    })
}

/// Writes the action's outcome to the audit log, then fails or sends the
/// operator back to the list with `done`.
async fn ended<O: Operator>(
    operator: &O,
    mut entry: AuditEntry,
    result: Result<String, OperatorError>,
) -> Result<Response, Failure> {
    entry.outcome = match &result {
        Ok(done) => done.clone(),
        Err(e) => format!("failed: {e}"),
    };
    operator.audit(&entry).await?;
    let done = result?;
    Ok(Redirect::to(&format!("/circuits?{}", query(&[("done", &done)]))).into_response())
}

/// `POST /circuits/pause`.
pub(crate) async fn pause<O: Operator>(
    State(operator): State<Arc<O>>,
    form: ActionForm,
) -> Result<Response, Failure> {
    let handler = handler_of(&form)?;
    let reason = field(&form, "reason").unwrap_or("paused from the console");
    let what = which(&handler);
    if !form.confirmed() {
        let question = format!(
            "Pause {what}? Running consumers stop taking its deliveries within about a second, until it is resumed."
        );
        let fields = [("handler", handler.as_str()), ("reason", reason)];
        return Ok(super::confirm(
            &form,
            ("/circuits/pause", SECTION, "/circuits"),
            &question,
            &fields,
        )
        .into_response());
    }
    let by = format!("console, {}", form.actor);
    let entry = AuditEntry {
        at: None,
        actor: form.actor.clone(),
        action: "pause".to_owned(),
        target: handler.clone(),
        outcome: "requested".to_owned(),
    };
    operator.audit(&entry).await?;
    let result = operator.pause(&handler, &by, reason).await.map(|now| {
        if now {
            format!(
                "{what} paused: running consumers stop taking its deliveries within about a second"
            )
        } else {
            format!("{what} was paused already: the first pause stays")
        }
    });
    ended(&*operator, entry, result).await
}

/// `POST /circuits/resume`.
pub(crate) async fn resume<O: Operator>(
    State(operator): State<Arc<O>>,
    form: ActionForm,
) -> Result<Response, Failure> {
    let handler = handler_of(&form)?;
    let what = which(&handler);
    if !form.confirmed() {
        let question = format!(
            "Resume {what}? Running consumers take its deliveries again within about a second."
        );
        return Ok(super::confirm(
            &form,
            ("/circuits/resume", SECTION, "/circuits"),
            &question,
            &[("handler", handler.as_str())],
        )
        .into_response());
    }
    let entry = AuditEntry {
        at: None,
        actor: form.actor.clone(),
        action: "resume".to_owned(),
        target: handler.clone(),
        outcome: "requested".to_owned(),
    };
    operator.audit(&entry).await?;
    let result = match operator.resume(&handler).await {
        Ok(true) => Ok(format!(
            "{what} resumed: running consumers take its deliveries again within about a second"
        )),
        Ok(false) => Err(OperatorError::new(
            FailureKind::Refused,
            format!(
                "{what} is not paused by itself (resumed already, or only a pause of every handler, *, stops it)."
            ),
        )),
        Err(e) => Err(e),
    };
    ended(&*operator, entry, result).await
}
