//! Sagas: the list with its filters, one saga whole (state, pending
//! timeouts, compensation log, history), and the operator's two actions,
//! resume and abandon, each confirmed and audited.

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use consumer_saga::{SagaRecord, SagaStatus};
use maud::{Markup, html};
use serde::Deserialize;

use super::{Failure, csrf_field, layout, query, when};
use crate::access::{ActionForm, Csrf};
use crate::operator::{AuditEntry, FailureKind, Operator, OperatorError, SagaAction, SagaQuery};

/// Sagas listed at most.
const LIMIT: u32 = 200;

/// The list's filters.
#[derive(Debug, Deserialize)]
pub(crate) struct ListQuery {
    #[serde(rename = "type")]
    saga_type: Option<String>,
    status: Option<String>,
}

fn saga_link(r: &SagaRecord) -> String {
    format!(
        "/saga?{}",
        query(&[("type", &r.saga_type), ("id", &r.saga_id)])
    )
}

/// `GET /sagas?type=&status=`.
pub(crate) async fn list<O: Operator>(
    State(operator): State<Arc<O>>,
    Query(q): Query<ListQuery>,
) -> Result<Markup, Failure> {
    let saga_type = q.saga_type.filter(|t| !t.is_empty());
    let status = match q.status.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => Some(SagaStatus::parse(s).ok_or_else(|| {
            Failure(OperatorError::new(
                FailureKind::Refused,
                format!("No saga status is called {s:?}."),
            ))
        })?),
    };
    let sagas = operator
        .sagas(&SagaQuery {
            saga_type: saga_type.clone(),
            status,
            limit: LIMIT,
        })
        .await?;
    let body = html! {
        form.filters method="get" action="/sagas" {
            label { "type " input type="text" name="type" value=(saga_type.clone().unwrap_or_default()); }
            " "
            label { "status "
                select name="status" {
                    option value="" { "(any)" }
                    @for s in SagaStatus::ALL {
                        option value=(s.as_str()) selected[status == Some(s)] { (s.as_str()) }
                    }
                }
            }
            " "
            button type="submit" { "Filter" }
        }
        table.sagas {
            thead { tr { th { "Type" } th { "Id" } th { "Status" } th.num { "Version" } th { "Started" } th { "Updated" } th.num { "Timeouts" } th { "Reason" } } }
            tbody {
                @for r in &sagas {
                    tr {
                        td { (r.saga_type) }
                        td { a href=(saga_link(r)) { (r.saga_id) } }
                        td.status { (r.status.as_str()) }
                        td.num { (r.version) }
                        td { (when(r.started_at)) }
                        td { (when(r.updated_at)) }
                        td.num { (r.timeouts.len()) }
                        td { (r.reason.as_deref().unwrap_or("")) }
                    }
                }
            }
        }
        @if sagas.len() == LIMIT as usize {
            p.note { "The oldest " (LIMIT) " shown: narrow the filters to see others." }
        }
    };
    Ok(layout("Sagas", "Sagas", body))
}

/// One saga's address.
#[derive(Debug, Deserialize)]
pub(crate) struct SagaKey {
    #[serde(rename = "type")]
    saga_type: String,
    id: String,
    /// What an action just did, said once after its redirect.
    done: Option<String>,
}

/// `GET /saga?type=&id=`.
pub(crate) async fn show<O: Operator>(
    State(operator): State<Arc<O>>,
    Extension(Csrf(csrf)): Extension<Csrf>,
    Query(key): Query<SagaKey>,
) -> Result<Markup, Failure> {
    let Some(r) = operator.saga(&key.saga_type, &key.id).await? else {
        return Err(Failure(OperatorError::new(
            FailureKind::NotFound,
            format!("No saga {} {}.", key.saga_type, key.id),
        )));
    };
    let state = serde_json::to_string_pretty(&r.state).unwrap_or_else(|_| r.state.to_string());
    let body = html! {
        @if let Some(done) = &key.done { p.done { (done) } }
        dl.fields {
            dt { "Type" } dd { (r.saga_type) }
            dt { "Id" } dd { (r.saga_id) }
            dt { "Status" } dd.status { (r.status.as_str()) @if let Some(why) = &r.reason { " (" (why) ")" } }
            dt { "Version" } dd { (r.version) }
            dt { "Started" } dd { (when(r.started_at)) }
            dt { "Updated" } dd { (when(r.updated_at)) }
            @if let Some(f) = r.finished_at { dt { "Finished" } dd { (when(f)) } }
        }
        h2 { "State" }
        pre.payload { (state) }
        h2 { "Pending timeouts (" (r.timeouts.len()) ")" }
        table {
            @for t in &r.timeouts { tr { td { code { (t.token().to_string()) } } td { (t.event_type()) } td { (when(t.due_at())) } } }
        }
        h2 { "Compensation log (" (r.compensation.len()) ", sent last first)" }
        table.compensation {
            thead { tr { th { "Step" } th { "Undo" } th { "To" } th { "Status" } th.num { "Round" } th { "Error" } } }
            tbody {
                @for u in &r.compensation {
                    tr { td { (u.name()) } td { (u.event_type()) } td { (u.destination()) } td { (u.status().as_str()) } td.num { (u.round()) } td { (u.error().unwrap_or("")) } }
                }
            }
        }
        h2 { "History (" (r.history.len()) ")" }
        table.history {
            thead { tr { th.num { "Version" } th { "Event" } th { "Message" } th { "Status" } th { "At" } th { "Note" } } }
            tbody {
                @for h in &r.history {
                    tr { td.num { (h.version()) } td { (h.event_type()) } td { code { (h.message_id()) } } td { (h.status().as_str()) } td { (when(h.at())) } td { (h.note().unwrap_or("")) } }
                }
            }
        }
        h2 { "Actions" }
        form.action method="post" action="/saga/resume" {
            (csrf_field(&csrf))
            input type="hidden" name="type" value=(r.saga_type);
            input type="hidden" name="id" value=(r.saga_id);
            button type="submit" { "Resume the compensation…" }
            " sends the failed undo steps again, last first."
        }
        form.action method="post" action="/saga/abandon" {
            (csrf_field(&csrf))
            input type="hidden" name="type" value=(r.saga_type);
            input type="hidden" name="id" value=(r.saga_id);
            label { "reason " input type="text" name="reason" required; }
            " "
            button type="submit" { "Abandon…" }
            " stops it; nothing is undone."
        }
    };
    Ok(layout(
        &format!("Saga {} {}", r.saga_type, r.saga_id),
        "Sagas",
        body,
    ))
}

fn key_of(form: &ActionForm) -> Result<(String, String), Failure> {
    match (form.get("type"), form.get("id")) {
        (Some(t), Some(id)) => Ok((t.to_owned(), id.to_owned())),
        _ => Err(Failure(OperatorError::new(
            FailureKind::Refused,
            "The form named no saga.",
        ))),
    }
}

/// Asks before a saga's action, repeating the form's fields.
fn confirm(form: &ActionForm, path: &str, question: &str, fields: &[(&str, &str)]) -> Markup {
    super::confirm(form, (path, "Sagas", "/sagas"), question, fields)
}

/// Runs `action` with its audit entries, then shows the saga.
async fn act<O: Operator>(
    operator: &O,
    form: &ActionForm,
    action: SagaAction,
) -> Result<Response, Failure> {
    let (name, saga_type, saga_id) = match &action {
        SagaAction::Resume { saga_type, saga_id } => ("saga resume", saga_type, saga_id),
        SagaAction::Abandon {
            saga_type, saga_id, ..
        } => ("saga abandon", saga_type, saga_id),
    };
    let mut entry = AuditEntry {
        at: None,
        actor: form.actor.clone(),
        action: name.to_owned(),
        target: match &action {
            SagaAction::Abandon { reason, .. } => format!("{saga_type} {saga_id} ({reason})"),
            SagaAction::Resume { .. } => format!("{saga_type} {saga_id}"),
        },
        outcome: "requested".to_owned(),
    };
    operator.audit(&entry).await?;
    let result = operator.saga_action(&action).await;
    entry.outcome = match &result {
        Ok(r) => format!("{} at version {}", r.status.as_str(), r.version),
        Err(e) => format!("failed: {e}"),
    };
    operator.audit(&entry).await?;
    let r = result?;
    let done = format!(
        "{name}: the saga is {} at version {}.",
        r.status.as_str(),
        r.version
    );
    Ok(Redirect::to(&format!(
        "/saga?{}",
        query(&[("type", &r.saga_type), ("id", &r.saga_id), ("done", &done)])
    ))
    .into_response())
}

/// `POST /saga/resume`.
pub(crate) async fn resume<O: Operator>(
    State(operator): State<Arc<O>>,
    form: ActionForm,
) -> Result<Response, Failure> {
    let (saga_type, saga_id) = key_of(&form)?;
    if !form.confirmed() {
        let question = format!(
            "Resume the compensation of saga {saga_type} {saga_id}? Its failed undo steps are sent again."
        );
        return Ok(confirm(
            &form,
            "/saga/resume",
            &question,
            &[("type", &saga_type), ("id", &saga_id)],
        )
        .into_response());
    }
    act(&*operator, &form, SagaAction::Resume { saga_type, saga_id }).await
}

/// `POST /saga/abandon`.
pub(crate) async fn abandon<O: Operator>(
    State(operator): State<Arc<O>>,
    form: ActionForm,
) -> Result<Response, Failure> {
    let (saga_type, saga_id) = key_of(&form)?;
    let Some(reason) = form.get("reason").map(str::to_owned) else {
        return Err(Failure(OperatorError::new(
            FailureKind::Refused,
            "Abandoning a saga needs a reason.",
        )));
    };
    if !form.confirmed() {
        let question = format!(
            "Abandon saga {saga_type} {saga_id} ({reason})? Its timeouts are cancelled and nothing is undone."
        );
        return Ok(confirm(
            &form,
            "/saga/abandon",
            &question,
            &[("type", &saga_type), ("id", &saga_id), ("reason", &reason)],
        )
        .into_response());
    }
    act(
        &*operator,
        &form,
        SagaAction::Abandon {
            saga_type,
            saga_id,
            reason,
        },
    )
    .await
}
