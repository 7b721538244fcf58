//! `sagas list | show | resume | abandon`: what the sagas of the store are
//! doing, and the two things an operator may do to one by hand (the
//! store's [`SagaStore`]).
//!
//! `list` shows one row per saga (its status, version, age, pending
//! timeouts, why it compensates or failed); `show` one saga whole: its
//! state, its pending timeouts, its compensation log and its history.
//! `resume` sends a failed compensation's undo steps again, in a new round
//! (new ids: the participant does not take them for repeats), or with
//! `--compensate` starts compensating a running saga; `abandon` stops one,
//! undoing nothing. Both are transitions of their own: the saga's version
//! goes up, so a delivery racing them applies on top.

use std::io::Write;

use consumer_core::envelope::format_time;
use consumer_saga::{OperatorError, SagaFilter, SagaRecord, SagaStore};
use serde_json::{Value, json};
use sqlx::Postgres;
use time::OffsetDateTime;

use crate::args::{SagaFilterArgs, Services};
use crate::database;
use crate::error::{Error, Result};
use crate::json::line;
use crate::render::{Table, age, write};

pub(crate) fn store(pool: sqlx::PgPool) -> SagaStore<Postgres> {
    SagaStore::new(pool)
}

/// What the store said, as the tool's error (and exit code).
pub(crate) fn operator(e: OperatorError) -> Error {
    match e {
        OperatorError::NoSuchSaga { .. } => Error::NoSuchSaga(e.to_string()),
        OperatorError::Refused { .. } => Error::Refused(e.to_string()),
        OperatorError::Store(consumer_core::Error::Database(db)) => {
            // A database migrated before the history had its table lacks
            // only the second.
            database::explain(db, "consumer_sagas or consumer_saga_history")
        }
        other => Error::Other(other.to_string()),
    }
}

fn seconds_since(t: OffsetDateTime) -> i64 {
    (OffsetDateTime::now_utc() - t).whole_seconds()
}

/// A saga as JSON: every column, times in RFC 3339.
fn record_json(r: &SagaRecord) -> Value {
    json!({
        "saga_type": r.saga_type,
        "saga_id": r.saga_id,
        "status": r.status.as_str(),
        "version": r.version,
        "reason": r.reason,
        "started_at": format_time(r.started_at),
        "updated_at": format_time(r.updated_at),
        "finished_at": r.finished_at.map(format_time),
        "state": r.state,
        "timeouts": r.timeouts.iter().map(|t| json!({
            "token": t.token().to_string(),
            "event_type": t.event_type(),
            "due_at": format_time(t.due_at()),
        })).collect::<Vec<_>>(),
        "compensation": r.compensation.iter().map(|u| json!({
            "name": u.name(),
            "event_type": u.event_type(),
            "destination": u.destination(),
            "status": u.status().as_str(),
            "round": u.round(),
            "error": u.error(),
            "awaits_reply": u.awaits_reply(),
        })).collect::<Vec<_>>(),
        "step_retries": r.step_attempts,
        "history": r.history.iter().map(|h| json!({
            "version": h.version(),
            "event_type": h.event_type(),
            "message_id": h.message_id(),
            "status": h.status().as_str(),
            "at": format_time(h.at()),
            "note": h.note(),
        })).collect::<Vec<_>>(),
    })
}

/// `list`.
pub async fn list(
    services: &Services,
    args: &SagaFilterArgs,
    limit: u32,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let mut filter = SagaFilter::new().with_limit(limit);
    if let Some(t) = &args.saga_type {
        filter = filter.with_type(t);
    }
    for s in &args.status {
        filter = filter.with_status(s.status());
    }
    if args.active {
        filter = filter.active();
    }
    if let Some(older) = args.older_than {
        let before = time::Duration::try_from(older)
            .ok()
            .and_then(|d| OffsetDateTime::now_utc().checked_sub(d))
            .ok_or_else(|| {
                Error::Usage(format!(
                    "--older-than {}: too far back",
                    humantime::format_duration(older)
                ))
            })?;
        filter = filter.with_started_before(before);
    }
    let pool = database::connect(services).await?;
    let sagas = store(pool).list(&filter).await.map_err(operator)?;
    if json {
        for r in &sagas {
            let mut v = record_json(r);
            // A list line is a summary: the history and state are `show`'s.
            if let Some(o) = v.as_object_mut() {
                o.remove("history");
                o.remove("state");
            }
            writeln!(out, "{}", line(&v)).map_err(Error::io("writing the output"))?;
        }
        return Ok(());
    }
    let mut t = Table::new(&[
        "TYPE", "ID", "STATUS", "VERSION", "STARTED", "UPDATED", "TIMEOUTS", "REASON",
    ]);
    for r in &sagas {
        t.row(vec![
            r.saga_type.clone(),
            r.saga_id.clone(),
            r.status.to_string(),
            r.version.to_string(),
            format!("{} ago", age(seconds_since(r.started_at))),
            format!("{} ago", age(seconds_since(r.updated_at))),
            r.timeouts.len().to_string(),
            r.reason.clone().unwrap_or_default(),
        ]);
    }
    write(out, &t.render())?;
    if sagas.len() == limit as usize {
        write(out, &format!("(the first {limit}; --limit shows more)\n"))?;
    }
    Ok(())
}

/// `show`.
pub async fn show(
    services: &Services,
    saga_type: &str,
    saga_id: &str,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let pool = database::connect(services).await?;
    let Some(r) = store(pool)
        .get(saga_type, saga_id)
        .await
        .map_err(operator)?
    else {
        return Err(operator(OperatorError::NoSuchSaga {
            saga_type: saga_type.to_owned(),
            saga_id: saga_id.to_owned(),
        }));
    };
    if json {
        return writeln!(out, "{}", line(&record_json(&r)))
            .map_err(Error::io("writing the output"));
    }
    write(out, &show_text(&r))
}

fn show_text(r: &SagaRecord) -> String {
    let mut s = format!(
        "saga:      {} {}\nstatus:    {}{}\nversion:   {}\nstarted:   {} ({} ago)\nupdated:   {} ({} ago)\n",
        r.saga_type,
        r.saga_id,
        r.status,
        r.reason
            .as_deref()
            .map(|w| format!(" ({w})"))
            .unwrap_or_default(),
        r.version,
        format_time(r.started_at),
        age(seconds_since(r.started_at)),
        format_time(r.updated_at),
        age(seconds_since(r.updated_at)),
    );
    if let Some(f) = r.finished_at {
        s.push_str(&format!(
            "finished:  {} (a tombstone until the dedup retention ends)\n",
            format_time(f)
        ));
    }
    s.push_str(&format!("state:     {}\n", r.state));
    let mut t = Table::new(&["TIMEOUT", "EVENT", "DUE"]);
    for p in &r.timeouts {
        let due = -seconds_since(p.due_at());
        let when = if due >= 0 {
            format!("in {}", age(due))
        } else {
            format!("{} ago", age(-due))
        };
        t.row(vec![p.token().to_string(), p.event_type().to_owned(), when]);
    }
    s.push_str(&format!("\npending timeouts: {}\n", r.timeouts.len()));
    if !r.timeouts.is_empty() {
        s.push_str(&t.render());
    }
    s.push_str(&format!(
        "\ncompensation log: {} step(s), sent last first\n",
        r.compensation.len()
    ));
    if !r.compensation.is_empty() {
        let mut t = Table::new(&["STEP", "UNDO", "TO", "STATUS", "ROUND", "ERROR"]);
        for u in &r.compensation {
            t.row(vec![
                u.name().to_owned(),
                u.event_type().to_owned(),
                u.destination().to_owned(),
                u.status().to_string(),
                u.round().to_string(),
                u.error().unwrap_or_default().to_owned(),
            ]);
        }
        s.push_str(&t.render());
    }
    s.push_str(&format!("\nhistory: {} transition(s)\n", r.history.len()));
    let mut t = Table::new(&["VERSION", "EVENT", "MESSAGE", "STATUS", "AT", "NOTE"]);
    for h in &r.history {
        t.row(vec![
            h.version().to_string(),
            h.event_type().to_owned(),
            h.message_id().to_owned(),
            h.status().to_string(),
            format_time(h.at()),
            h.note().unwrap_or_default().to_owned(),
        ]);
    }
    s.push_str(&t.render());
    s
}

/// `resume [--compensate REASON]`.
pub async fn resume(
    services: &Services,
    saga_type: &str,
    saga_id: &str,
    compensate: Option<&str>,
    out: &mut impl Write,
) -> Result<()> {
    let pool = database::connect(services).await?;
    let sagas = store(pool);
    let r = match compensate {
        Some(reason) => sagas.compensate(saga_type, saga_id, reason).await,
        None => sagas.resume(saga_type, saga_id).await,
    }
    .map_err(operator)?;
    let sent: Vec<&str> = r
        .compensation
        .iter()
        .filter(|u| u.status() == consumer_saga::UndoStatus::Sent)
        .map(|u| u.name())
        .collect();
    write(
        out,
        &format!(
            "saga {} {} is {} at version {}{}\n",
            r.saga_type,
            r.saga_id,
            r.status,
            r.version,
            if sent.is_empty() {
                String::new()
            } else {
                format!(
                    "; sent the undo of {} (the relay publishes it)",
                    sent.join(", ")
                )
            }
        ),
    )
}

/// `abandon --reason`.
pub async fn abandon(
    services: &Services,
    saga_type: &str,
    saga_id: &str,
    reason: &str,
    out: &mut impl Write,
) -> Result<()> {
    let pool = database::connect(services).await?;
    let r = store(pool)
        .abandon(saga_type, saga_id, reason)
        .await
        .map_err(operator)?;
    write(
        out,
        &format!(
            "saga {} {} is abandoned at version {}; its timeouts are cancelled, nothing was undone\n",
            r.saga_type, r.saga_id, r.version
        ),
    )
}
