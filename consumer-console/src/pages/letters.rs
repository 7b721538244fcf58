//! Dead letters: the groups (handler and reason, with counts), a page of
//! one group's letters, and one letter whole.

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, Query, State};
use maud::{Markup, html};
use serde::Deserialize;

use super::{Failure, csrf_field, layout, payload, query, when};
use crate::access::Csrf;
use crate::operator::{LetterGroups, LetterQuery, Operator, StoredLetter};

/// Letters per page.
const PAGE: u32 = 50;
/// Groups shown at most.
const GROUPS: u32 = 500;

/// `GET /dead-letters`.
pub(crate) async fn groups<O: Operator>(
    State(operator): State<Arc<O>>,
    Extension(Csrf(csrf)): Extension<Csrf>,
) -> Result<Markup, Failure> {
    let LetterGroups { groups, left_out } = operator.letter_groups(GROUPS).await?;
    let total: i64 = groups.iter().map(|g| g.count).sum();
    let body = html! {
        p { (total) " dead letter(s) in " (groups.len()) " group(s) of handler and reason, in " strong.place { (operator.place()) } "." }
        @if let Some(left_out) = &left_out { p.note.left-out { "Left out: " (left_out) "." } }
        @if groups.len() == GROUPS as usize {
            p.note { "Only the " (GROUPS) " largest groups are shown." }
        }
        table.groups {
            thead { tr { th { "Handler" } th { "Reason" } th.num { "Letters" } th { "First" } th { "Last" } th { "" } } }
            tbody {
                @for g in &groups {
                    tr {
                        td { (g.handler) }
                        td.error { a href={ "/dead-letters/list?" (query(&[("handler", &g.handler), ("error", &g.error)])) } { (g.error) } }
                        td.num { (g.count) }
                        td { (when(g.first)) }
                        td { (when(g.last)) }
                        td {
                            form method="post" action="/dead-letters/replay" {
                                (csrf_field(&csrf))
                                input type="hidden" name="handler" value=(g.handler);
                                input type="hidden" name="error" value=(g.error);
                                button type="submit" { "Replay group…" }
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(layout("Dead letters", "Dead letters", body))
}

/// The list page's query.
#[derive(Debug, Deserialize)]
pub(crate) struct ListQuery {
    handler: Option<String>,
    error: Option<String>,
    after: Option<String>,
}

/// `GET /dead-letters/list?handler=&error=&after=`.
pub(crate) async fn list<O: Operator>(
    State(operator): State<Arc<O>>,
    Extension(Csrf(csrf)): Extension<Csrf>,
    Query(q): Query<ListQuery>,
) -> Result<Markup, Failure> {
    let letters = operator
        .letters(&LetterQuery {
            handler: q.handler.clone(),
            error: q.error.clone(),
            after: q.after.clone().filter(|a| !a.is_empty()),
            limit: PAGE,
        })
        .await?;
    let next = (letters.len() == PAGE as usize)
        .then(|| letters.last().map(|l| l.handle.clone()))
        .flatten();
    let handler = q.handler.clone().unwrap_or_default();
    let error = q.error.clone().unwrap_or_default();
    let body = html! {
        p {
            "Handler " strong { (if handler.is_empty() { "(any)" } else { handler.as_str() }) }
            ", reason " strong { (if error.is_empty() { "(any)" } else { error.as_str() }) }
            @if let Some(after) = &q.after { ", after " code { (after) } }
            "."
        }
        form method="post" action="/dead-letters/replay" {
            (csrf_field(&csrf))
            table.letters {
                thead { tr {
                    th { input type="checkbox" data-select-all="id" title="select every letter on this page"; }
                    th { "Id" } th { "Handler" } th { "Kind" } th.num { "Attempts" } th { "Last failure" } th { "Key" } th { "Reason" }
                    @if letters.iter().any(|l| l.replayed.is_some()) { th { "" } }
                } }
                tbody {
                    @for l in &letters {
                        (row(l))
                    }
                }
            }
            @if letters.is_empty() { p { "No letters here." } }
            p {
                button type="submit" { "Replay selected…" }
            }
        }
        @if let Some(after) = next {
            p { a.next href={ "/dead-letters/list?" (query(&[("handler", &handler), ("error", &error), ("after", &after)])) } { "Next page →" } }
        }
    };
    Ok(layout("Dead letters: one group", "Dead letters", body))
}

fn row(l: &StoredLetter) -> Markup {
    let dl = &l.letter;
    html! {
        tr {
            td { input type="checkbox" name="id" value=(l.id); }
            td { a href={ "/dead-letters/" (l.handle) } { code { (l.id) } } }
            td { (dl.handler) }
            td { (dl.kind.as_str()) }
            td.num { (dl.attempts) }
            td { (when(dl.last_failure)) }
            td { (dl.key.as_deref().unwrap_or("")) }
            td.error { (dl.error) }
            @if let Some(replayed) = l.replayed { td.replayed { (if replayed { "replayed" } else { "" }) } }
        }
    }
}

/// `GET /dead-letters/{row}`.
pub(crate) async fn show<O: Operator>(
    State(operator): State<Arc<O>>,
    Extension(Csrf(csrf)): Extension<Csrf>,
    Path(handle): Path<String>,
) -> Result<Markup, Failure> {
    let Some(l) = operator.letter(&handle).await? else {
        return Err(Failure(crate::operator::OperatorError::new(
            crate::operator::FailureKind::NotFound,
            format!(
                "No dead letter {handle} in {}: it was replayed or purged.",
                operator.place()
            ),
        )));
    };
    let dl = &l.letter;
    let body = html! {
        dl.fields {
            dt { "Id" } dd { code { (l.id) } }
            dt { "Handler" } dd { (dl.handler) }
            dt { "Kind" } dd { (dl.kind.as_str()) }
            dt { "Error" } dd.error { (dl.error) }
            @for cause in &dl.causes { dt { "Caused by" } dd { (cause) } }
            dt { "Attempts" } dd { (dl.attempts) }
            dt { "First failure" } dd { (when(dl.first_failure)) }
            dt { "Last failure" } dd { (when(dl.last_failure)) }
            dt { "Message id" } dd { code { (dl.message_id) } }
            dt { "Key" } dd { (dl.key.as_deref().unwrap_or("(none)")) }
            dt { "From" } dd { (dl.origin.channel) " at " (dl.origin.position) }
            @if let Some(refusal) = &l.refusal { dt { "Refused with" } dd { (refusal) } }
            @if let Some(at) = l.stored_at { dt { "Stored at" } dd { (when(at)) } }
            @if let Some(replayed) = l.replayed {
                dt { "Replayed" }
                dd.replayed { (if replayed { "yes: the replay journal has it (it stays in the place, and a replay skips it)" } else { "no" }) }
            }
        }
        h2 { "Headers (" (dl.original_headers.len()) ")" }
        table.headers {
            @for (name, value) in dl.original_headers.iter() {
                tr { th { (name) } td { (payload::inline(value)) } }
            }
        }
        h2 { "Payload (" (dl.payload.len()) " bytes)" }
        @if let Some(omitted) = &dl.payload_omitted {
            p.note { "Omitted (" (omitted.size) " bytes, sha256 " (omitted.sha256) "): the whole letter is in the dead-letter table." }
        }
        (payload::block(&dl.payload))
        form method="post" action="/dead-letters/replay" {
            (csrf_field(&csrf))
            input type="hidden" name="id" value=(l.id);
            button type="submit" { "Replay this letter…" }
        }
    };
    Ok(layout(
        &format!("Dead letter {}", l.id),
        "Dead letters",
        body,
    ))
}
