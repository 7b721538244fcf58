//! `jobs list | show | retry | cancel | pause | resume | paused`: the job
//! queue in the store's database (`consumer_jobs`), through
//! [`JobQueues`], the statements the workers' crate writes, so nothing
//! here knows the table's columns.

use std::io::Write;

use base64::Engine as _;
use consumer_core::envelope::format_time;
use consumer_jobs::{Changed, JobInfo, JobQueues, JobState};
use serde_json::{Value, json};
use sqlx::Postgres;

use crate::args::{JobStateArg, Services};
use crate::database;
use crate::error::{Error, Result};
use crate::json::line;
use crate::render::{Table, write};

/// Jobs read per page (keyset on `seq`).
const PAGE: u32 = 500;

fn explain(e: consumer_core::Error) -> Error {
    database::explain_store(e, "consumer_jobs")
}

async fn queues(services: &Services) -> Result<JobQueues<Postgres>> {
    Ok(JobQueues::new(database::connect(services).await?))
}

fn state(arg: JobStateArg) -> JobState {
    match arg {
        JobStateArg::Ready => JobState::Ready,
        JobStateArg::Running => JobState::Running,
        JobStateArg::Scheduled => JobState::Scheduled,
        JobStateArg::Retrying => JobState::Retrying,
    }
}

fn info_json(j: &JobInfo) -> Value {
    json!({
        "queue": j.queue,
        "id": j.id,
        "key": j.key,
        "state": j.state.as_str(),
        "attempt": j.attempt,
        "priority": j.priority,
        "run_at": format_time(j.run_at),
        "created_at": format_time(j.created_at),
        "claims": j.claims,
        "lease_holder": j.lease_holder,
        "last_error": j.last_error,
        "unique_key": j.unique_key,
    })
}

/// `list`: page by page, so a deep queue costs no long query.
pub async fn list(
    services: &Services,
    queue: Option<&str>,
    state_arg: Option<JobStateArg>,
    limit: u32,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let queues = queues(services).await?;
    let state = state_arg.map(state);
    let mut jobs: Vec<JobInfo> = Vec::new();
    while jobs.len() < limit as usize {
        let after = jobs.last().map_or(0, |j| j.seq);
        let want = PAGE.min(limit - u32::try_from(jobs.len()).unwrap_or(limit));
        let page = queues
            .list(queue, state, after, i64::from(want))
            .await
            .map_err(explain)?;
        let last = page.len() < want as usize;
        jobs.extend(page);
        if last {
            break;
        }
    }
    if json {
        for j in &jobs {
            writeln!(out, "{}", line(&info_json(j))).map_err(Error::io("writing the output"))?;
        }
        return Ok(());
    }
    let mut t = Table::new(&[
        "QUEUE",
        "ID",
        "KEY",
        "STATE",
        "ATTEMPT",
        "PRIORITY",
        "RUN AT",
        "LAST ERROR",
    ]);
    for j in &jobs {
        t.row(vec![
            j.queue.clone(),
            j.id.clone(),
            j.key.clone().unwrap_or_default(),
            j.state.to_string(),
            j.attempt.to_string(),
            j.priority.to_string(),
            format_time(j.run_at),
            j.last_error.clone().unwrap_or_default(),
        ]);
    }
    write(out, &t.render())
}

/// `show`: every job with the id (one, unless the same message was
/// enqueued twice).
pub async fn show(services: &Services, id: &str, json: bool, out: &mut impl Write) -> Result<()> {
    let jobs = queues(services).await?.show(id).await.map_err(explain)?;
    if jobs.is_empty() {
        return Err(Error::NoSuchJob(format!(
            "no job with id {id} is waiting or running (finished jobs are deleted; a dead one is in `consumer dead-letters list`)"
        )));
    }
    for j in &jobs {
        let headers: Value =
            serde_json::from_str(&j.headers).unwrap_or_else(|_| Value::String(j.headers.clone()));
        let (body, encoding) = match std::str::from_utf8(&j.payload) {
            Ok(text) => (text.to_owned(), "utf-8"),
            Err(_) => (
                base64::engine::general_purpose::STANDARD.encode(&j.payload),
                "base64",
            ),
        };
        if json {
            let mut v = info_json(&j.info);
            if let Value::Object(m) = &mut v {
                m.insert("headers".into(), headers);
                m.insert("body".into(), Value::String(body));
                m.insert("body_encoding".into(), Value::String(encoding.into()));
            }
            writeln!(out, "{}", line(&v)).map_err(Error::io("writing the output"))?;
            continue;
        }
        // One header a line where the table's JSON reads back as headers.
        let header_lines = match consumer_core::store::headers_from_json(&j.headers) {
            Some(h) => h
                .iter()
                .map(|(name, value)| format!("\n    {name}: {}", String::from_utf8_lossy(value)))
                .collect::<String>(),
            None => format!(" {}", line(&headers)),
        };
        let i = &j.info;
        let text = format!(
            "job {id} in queue {queue}\n  state:      {state}\n  key:        {key}\n  attempt:    {attempt}\n  priority:   {priority}\n  run at:     {run_at}\n  created at: {created}\n  claims:     {claims}\n  held by:    {holder}\n  last error: {error}\n  unique key: {unique}\n  headers:{header_lines}\n  body ({encoding}): {body}\n",
            id = i.id,
            queue = i.queue,
            state = i.state,
            key = i.key.as_deref().unwrap_or("-"),
            attempt = i.attempt,
            priority = i.priority,
            run_at = format_time(i.run_at),
            created = format_time(i.created_at),
            claims = i.claims,
            holder = i.lease_holder.as_deref().unwrap_or("-"),
            error = i.last_error.as_deref().unwrap_or("-"),
            unique = i.unique_key.as_deref().unwrap_or("-"),
        );
        write(out, &text)?;
    }
    Ok(())
}

/// `retry`.
pub async fn retry(services: &Services, queue: &str, id: &str, out: &mut impl Write) -> Result<()> {
    let changed = queues(services)
        .await?
        .retry_now(queue, id)
        .await
        .map_err(explain)?;
    match changed {
        Changed::Done => write(
            out,
            &format!("job {id} of {queue} is due now: its queue's workers take it next\n"),
        ),
        Changed::Running => Err(Error::Refused(format!(
            "job {id} of {queue} is running: a worker holds it"
        ))),
        _ => Err(Error::NoSuchJob(format!(
            "job {id} of {queue} is not waiting (due already, finished, or never there): `consumer jobs list --queue {queue}` shows its jobs; a dead one is replayed with `consumer dead-letters replay`"
        ))),
    }
}

/// `cancel`.
pub async fn cancel(
    services: &Services,
    queue: &str,
    id: &str,
    out: &mut impl Write,
) -> Result<()> {
    let changed = queues(services)
        .await?
        .cancel(queue, id)
        .await
        .map_err(explain)?;
    match changed {
        Changed::Done => write(
            out,
            &format!("job {id} of {queue} cancelled: it will not run\n"),
        ),
        Changed::Running => Err(Error::Refused(format!(
            "job {id} of {queue} is running: a worker holds it, so it was not cancelled"
        ))),
        _ => Err(Error::NoSuchJob(format!(
            "no job {id} in queue {queue} (finished, cancelled, or never there): `consumer jobs list --queue {queue}` shows its jobs"
        ))),
    }
}

/// `pause`.
pub async fn pause(
    services: &Services,
    queue: &str,
    by: Option<String>,
    reason: &str,
    out: &mut impl Write,
) -> Result<()> {
    if queue.trim().is_empty() {
        return Err(Error::Usage("the queue's name is empty".to_owned()));
    }
    let by = crate::pauses::operator(by);
    if queues(services)
        .await?
        .pause(queue, &by, reason)
        .await
        .map_err(explain)?
    {
        return write(
            out,
            &format!(
                "queue {queue} paused by {by}: its jobs are not claimed (running ones finish); `consumer jobs resume {queue}` lets them go on\n"
            ),
        );
    }
    write(
        out,
        &format!("queue {queue} was paused already: `consumer jobs paused` says by whom and why\n"),
    )
}

/// `resume`.
pub async fn resume(services: &Services, queue: &str, out: &mut impl Write) -> Result<()> {
    if queues(services)
        .await?
        .resume(queue)
        .await
        .map_err(explain)?
    {
        return write(
            out,
            &format!("queue {queue} resumed: its workers claim its jobs again\n"),
        );
    }
    Err(Error::Refused(format!(
        "queue {queue} is not paused: `consumer jobs paused` lists the paused queues"
    )))
}

/// `paused`: one row per paused queue.
pub async fn paused(services: &Services, json: bool, out: &mut impl Write) -> Result<()> {
    let paused = queues(services).await?.paused().await.map_err(explain)?;
    if json {
        for p in &paused {
            let v = json!({
                "queue": p.queue,
                "by": p.by,
                "reason": p.reason,
                "since": format_time(p.at),
            });
            writeln!(out, "{}", line(&v)).map_err(Error::io("writing the output"))?;
        }
        return Ok(());
    }
    let mut t = Table::new(&["QUEUE", "SINCE", "BY", "REASON"]);
    for p in &paused {
        t.row(vec![
            p.queue.clone(),
            format_time(p.at),
            p.by.clone(),
            p.reason.clone(),
        ]);
    }
    write(out, &t.render())
}
