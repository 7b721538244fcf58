//! The outbox's backlog: what waits to go out, since when, and the
//! aggregates blocked behind an event the relay gave up on.

use std::sync::Arc;

use axum::extract::State;
use maud::{Markup, html};
use time::OffsetDateTime;

use super::{Failure, layout, when};
use crate::operator::Operator;

/// `GET /outbox`.
pub(crate) async fn backlog<O: Operator>(
    State(operator): State<Arc<O>>,
) -> Result<Markup, Failure> {
    let b = operator.outbox().await?;
    let body = html! {
        dl.fields {
            dt { "Pending" } dd.pending { (b.pending) " event(s) to publish now" }
            dt { "Oldest unpublished" }
            dd.oldest {
                @match b.oldest {
                    Some(t) => { (when(t)) " (" ((OffsetDateTime::now_utc() - t).whole_seconds().max(0)) " s ago)" }
                    None => { "none" }
                }
            }
            dt { "Scheduled" } dd { (b.scheduled) " event(s) not yet due" }
        }
        h2 { "Failed aggregates (" (b.failed.len()) ")" }
        @if b.failed.is_empty() {
            p { "None: no aggregate is blocked." }
        } @else {
            table {
                thead { tr { th { "Aggregate" } th { "Event" } th.num { "Version" } th.num { "Attempts" } th { "Last error" } } }
                tbody {
                    @for f in &b.failed {
                        tr { td { (f.aggregate) } td { (f.event_type) } td.num { (f.version) } td.num { (f.attempts) } td { (f.last_error.as_deref().unwrap_or("")) } }
                    }
                }
            }
            p.note { "`consumer outbox retry` unblocks them." }
        }
    };
    Ok(layout("Outbox", "Outbox", body))
}
