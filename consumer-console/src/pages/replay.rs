//! `POST /dead-letters/replay`: one letter, a selection or a group, through
//! the replay engine. Without `confirmed=yes` it is a dry run whose page
//! says what would be sent and asks; confirmed, the audit log gets the
//! request, the engine runs (canary first, at the rate, journaled), and
//! the audit log gets how it ended.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};

use super::{Failure, csrf_field, layout};
use crate::access::ActionForm;
use crate::operator::{
    AuditEntry, FailureKind, Operator, OperatorError, ReplayReport, ReplayRequest, Selection,
};

fn refused(message: impl Into<String>) -> Failure {
    Failure(OperatorError::new(FailureKind::Refused, message))
}

/// What the form asks for.
fn request(form: &ActionForm) -> Result<ReplayRequest, Failure> {
    let ids = form.all("id");
    let selection = match (ids.is_empty(), form.get("handler"), form.get("error")) {
        (false, _, _) => Selection::Letters(ids),
        (true, Some(handler), Some(error)) => Selection::Group {
            handler: handler.to_owned(),
            error: error.to_owned(),
        },
        _ => {
            return Err(refused(
                "Nothing was selected: tick letters, or replay a group.",
            ));
        }
    };
    let canary = match form.get("canary") {
        None => 1,
        Some(n) => n
            .trim()
            .parse()
            .map_err(|_| refused(format!("The canary must be a whole number, not {n:?}.")))?,
    };
    let rate = match form.get("rate") {
        None => None,
        Some(r) => Some(r.trim().parse::<f64>().map_err(|_| {
            refused(format!(
                "The rate must be a number of letters per second, not {r:?}."
            ))
        })?),
    };
    Ok(ReplayRequest {
        selection,
        canary,
        rate,
        dry_run: !form.confirmed(),
    })
}

fn describe(selection: &Selection) -> String {
    match selection {
        Selection::Letters(ids) => format!("letter(s) {}", ids.join(", ")),
        Selection::Group { handler, error } => {
            format!("the group of handler {handler} with reason {error:?}")
        }
    }
}

/// The selection again, for the confirmation's form.
fn hidden(selection: &Selection) -> Markup {
    html! {
        @match selection {
            Selection::Letters(ids) => {
                @for id in ids { input type="hidden" name="id" value=(id); }
            }
            Selection::Group { handler, error } => {
                input type="hidden" name="handler" value=(handler);
                input type="hidden" name="error" value=(error);
            }
        }
    }
}

fn report_table(report: &ReplayReport) -> Markup {
    html! {
        table.replay {
            thead { tr { th { "#" } th { "Id" } th { "Handler" } th { "Message" } th { "Outcome" } th { "Route" } } }
            tbody {
                @for (i, l) in report.letters.iter().enumerate() {
                    tr data-outcome=(l.outcome) {
                        td.num { (i + 1) }
                        td { code { (l.id) } }
                        td { (l.handler) }
                        td { code { (l.message_id) } }
                        td.outcome { (l.outcome.replace('_', " ")) }
                        td { (l.route) }
                    }
                }
            }
        }
    }
}

/// `POST /dead-letters/replay`.
pub(crate) async fn replay<O: Operator>(
    State(operator): State<Arc<O>>,
    form: ActionForm,
) -> Result<Response, Failure> {
    let request = request(&form)?;
    let what = describe(&request.selection);
    if request.dry_run {
        let report = operator.replay(&request).await?;
        let would = report
            .letters
            .iter()
            .filter(|l| l.outcome == "would_send")
            .count();
        let body = html! {
            p { "Dry run of " (what) ": " strong.would { (would) } " letter(s) would be sent; nothing was sent." }
            (report_table(&report))
            @if would > 0 {
                form method="post" action="/dead-letters/replay" {
                    (csrf_field(&form.csrf))
                    (hidden(&request.selection))
                    input type="hidden" name="confirmed" value="yes";
                    p {
                        label { "canary " input type="number" name="canary" min="0" value=(request.canary) size="4"; }
                        " "
                        label { "rate (letters/s, empty: as fast as confirmed) "
                            input type="text" name="rate" size="6" value=(request.rate.map(|r| r.to_string()).unwrap_or_default()); }
                    }
                    p.note { "The first " (request.canary) " go alone; the rest are sent only once the handler processed them." }
                    button.danger type="submit" { "Replay " (would) " letter(s)" }
                }
            }
        };
        return Ok(layout("Confirm the replay", "Dead letters", body).into_response());
    }
    let mut entry = AuditEntry {
        at: None,
        actor: form.actor.clone(),
        action: "replay".to_owned(),
        target: format!(
            "{what} (canary {}, rate {})",
            request.canary,
            request
                .rate
                .map_or_else(|| "unlimited".to_owned(), |r| format!("{r}/s"))
        ),
        outcome: "requested".to_owned(),
    };
    operator.audit(&entry).await?;
    let result = operator.replay(&request).await;
    entry.outcome = match &result {
        Ok(r) => {
            let sent = r.letters.iter().filter(|l| l.outcome == "sent").count();
            match &r.stopped {
                Some(why) => format!("stopped after {sent} sent: {why}"),
                None => format!("{sent} sent"),
            }
        }
        Err(e) => format!("failed: {e}"),
    };
    operator.audit(&entry).await?;
    let report = result?;
    let body = html! {
        @if let Some(why) = &report.stopped {
            p.error { "The replay stopped: " (why) }
        } @else {
            p.done { "Replayed " (what) "." }
        }
        (report_table(&report))
        p { a href="/dead-letters" { "Back to the dead letters" } }
    };
    // A run that stopped on its own terms is still a report the operator
    // asked for: the page says why, with 200.
    Ok(layout("Replay", "Dead letters", body).into_response())
}
