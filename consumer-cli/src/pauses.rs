//! `pause`, `resume`, `paused`: an operator pauses a handler (or every
//! handler, `*`) in the store's `consumer_paused_handlers` table (the
//! store's [`PausedHandlers`]). Every running consumer of the handler reads
//! the table about once a second: its deliveries then wait, spending no
//! attempt, until `resume`; a consumer started meanwhile starts paused.

use std::io::Write;

use consumer_core::PgStore;
use consumer_core::envelope::format_time;
use consumer_core::store::paused::{EVERY_HANDLER, Pause, PausedHandlers};
use serde_json::json;

use crate::args::Services;
use crate::database;
use crate::error::{Error, Result};
use crate::json::line;
use crate::render::{Table, write};

/// The store's error about its pauses table, as the tool says it.
pub(crate) fn explain(e: consumer_core::Error) -> Error {
    database::explain_store(e, "consumer_paused_handlers")
}

/// What the handler name stands for, in a sentence.
fn which(handler: &str) -> String {
    if handler == EVERY_HANDLER {
        "every handler".to_owned()
    } else {
        format!("handler {handler}")
    }
}

/// Who pauses: `--by`, else the login name, else `consumer-cli`.
pub(crate) fn operator(by: Option<String>) -> String {
    by.or_else(|| std::env::var("USER").ok())
        .filter(|b| !b.trim().is_empty())
        .unwrap_or_else(|| "consumer-cli".to_owned())
}

/// `pause`.
pub async fn pause(
    services: &Services,
    handler: &str,
    by: Option<String>,
    reason: &str,
    out: &mut impl Write,
) -> Result<()> {
    if handler.trim().is_empty() {
        return Err(Error::Usage(
            "the handler's name is empty: give its name, or * for every handler".to_owned(),
        ));
    }
    let store = PgStore::new(database::connect(services).await?);
    let by = operator(by);
    let what = which(handler);
    match store.pause(handler, &by, reason).await.map_err(explain)? {
        Pause::Paused => write(
            out,
            &format!(
                "{what} paused by {by}: running consumers stop running its deliveries within their poll (about a second); `consumer resume {handler}` lets them go on\n"
            ),
        ),
        _ => write(
            out,
            &format!("{what} was paused already: `consumer paused` says by whom and why\n"),
        ),
    }
}

/// `resume`.
pub async fn resume(services: &Services, handler: &str, out: &mut impl Write) -> Result<()> {
    let store = PgStore::new(database::connect(services).await?);
    let what = which(handler);
    if store.resume(handler).await.map_err(explain)? {
        return write(
            out,
            &format!(
                "{what} resumed: running consumers run its deliveries again within their poll (about a second)\n"
            ),
        );
    }
    Err(Error::Refused(format!(
        "{what} is not paused{}: `consumer paused` lists the pauses",
        if handler == EVERY_HANDLER {
            ""
        } else {
            " by itself (a pause of every handler, *, is resumed with `consumer resume '*'`)"
        }
    )))
}

/// `paused`: one row per pause.
pub async fn list(services: &Services, json: bool, out: &mut impl Write) -> Result<()> {
    let store = PgStore::new(database::connect(services).await?);
    let pauses = store.paused_handlers().await.map_err(explain)?;
    if json {
        for p in &pauses {
            let v = json!({
                "handler": p.handler,
                "by": p.by,
                "reason": p.reason,
                "since": format_time(p.since),
            });
            writeln!(out, "{}", line(&v)).map_err(Error::io("writing the output"))?;
        }
        return Ok(());
    }
    let mut t = Table::new(&["HANDLER", "SINCE", "BY", "REASON"]);
    for p in &pauses {
        t.row(vec![
            p.handler.clone(),
            format_time(p.since),
            p.by.clone(),
            p.reason.clone(),
        ]);
    }
    write(out, &t.render())
}
