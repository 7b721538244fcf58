//! The audit log: every action taken through the console, who took it, and
//! how it ended.

use std::sync::Arc;

use axum::extract::State;
use maud::{Markup, html};

use super::{Failure, layout, when};
use crate::operator::Operator;

/// Entries shown.
const LIMIT: u32 = 200;

/// `GET /audit`.
pub(crate) async fn log<O: Operator>(State(operator): State<Arc<O>>) -> Result<Markup, Failure> {
    let entries = operator.audit_log(LIMIT).await?;
    let body = html! {
        p { "The latest " (LIMIT) " entries, newest first. An action is written here before it runs and again when it ends." }
        table.audit {
            thead { tr { th { "At" } th { "Who" } th { "Action" } th { "Target" } th { "Outcome" } } }
            tbody {
                @for e in &entries {
                    tr {
                        td { (e.at.map(when).unwrap_or_default()) }
                        td { (e.actor) }
                        td { (e.action) }
                        td { (e.target) }
                        td { (e.outcome) }
                    }
                }
            }
        }
    };
    Ok(layout("Audit log", "Audit log", body))
}
