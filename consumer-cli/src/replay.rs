//! `dead-letters replay`: sends letters back to the handler that failed
//! them, safely.
//!
//! 1. **A bounded snapshot**: the letters present at the start ([`Letters::snapshot`]);
//!    one that arrives meanwhile (a canary failing again, say) is behind it.
//! 2. **Checks before anything is sent**: a letter the journal says an
//!    earlier run sent is only removed; one whose message the handler has
//!    committed is reported `already processed` and left alone; one whose
//!    payload was left out is skipped; letters older than the dedup
//!    retention refuse the whole run unless `--force` (past the retention
//!    the dedup row that would absorb a second run may be gone).
//! 3. **Per letter**: reset its attempts in the store, publish the replay
//!    ([`crate::route`]) with a confirm, journal it ([`crate::journal`]),
//!    remove it from its place.
//! 4. **Canary**: the first N go alone; the run waits until the store says
//!    each was processed or dead-lettered again, and stops (exit 4) on the
//!    first dead one, the rest untouched.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use time::OffsetDateTime;

use crate::args::{Rate, ReplayArgs, Services};
use crate::database;
use crate::error::{Error, Result};
use crate::handler_state::{HandlerState, Outcome};
use crate::journal::Journal;
use crate::json::line;
use crate::letter::{Filter, Letter};
use crate::places::{Held, Letters};
use crate::route::Route;

/// What happened to one letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Sent,
    WouldSend,
    AlreadySent,
    AlreadyProcessed,
    PayloadOmitted,
}

impl Fate {
    fn as_str(self) -> &'static str {
        match self {
            Self::Sent => "sent",
            Self::WouldSend => "would send",
            Self::AlreadySent => "already sent (by an earlier replay; removed)",
            Self::AlreadyProcessed => "already processed (left in place)",
            Self::PayloadOmitted => "payload omitted (replay it from the dead-letter table)",
        }
    }
}

/// Runs a replay; the summary goes to `out`.
pub async fn run(services: &Services, args: &ReplayArgs, out: &mut impl Write) -> Result<()> {
    let filter = Filter::from_args(&args.filter)?;
    let pool = database::connect(services).await?;
    let state = HandlerState::new(pool.clone());
    let journal = Journal::open(pool, !args.dry_run).await?;
    // Released when the connection closes, however the run ends.
    let _lock = if args.dry_run {
        None
    } else {
        Some(journal.lock().await?)
    };
    let mut letters = Letters::open(services, &args.place).await?;
    check_destination(&letters, args.to_topic.as_deref())?;
    let route = Route::new(
        services,
        args.to_topic.as_deref(),
        args.to_stream.as_deref(),
    )
    .await?;
    #[cfg(feature = "sqs")]
    let route = if letters.is_sqs() {
        route.with_sqs(services).await?
    } else {
        route
    };
    let result = replay(args, &filter, &state, &journal, &route, &mut letters, out).await;
    route.close().await;
    // Whatever happened, what was not removed goes back as it was.
    let released = letters.release().await;
    result.and(released)
}

/// Refuses to replay letters of a Kafka topic without `to_topic`, the
/// failed group's own retry topic.
pub fn check_destination(letters: &Letters, to_topic: Option<&str>) -> Result<()> {
    if letters.is_kafka() && to_topic.is_none() {
        return Err(Error::Usage(format!(
            "letters from {} need --to-topic: the failed group's own retry topic (a work topic is read by every consumer group, and a replay there would run them all)",
            letters.describe()
        )));
    }
    Ok(())
}

async fn replay(
    args: &ReplayArgs,
    filter: &Filter,
    state: &HandlerState,
    journal: &Journal,
    route: &Route,
    letters: &mut Letters,
    out: &mut impl Write,
) -> Result<()> {
    let snapshot = letters.snapshot().await?;
    if let Some(r) = snapshot.remarks() {
        eprintln!("note: {r}");
    }
    let chosen = choose(args, filter, state, &snapshot.letters).await?;
    let mut report = Report::new(args.json, route);
    let todo = triage(args, state, journal, letters, &chosen, &mut report, out).await?;
    if args.dry_run {
        for held in &todo {
            report.letter(out, &held.letter, Fate::WouldSend)?;
        }
        return report.summary(out, true);
    }
    let run = Run {
        args,
        state,
        journal,
        route,
    };
    run.send_all(letters, &todo, &mut report, out).await?;
    report.summary(out, false)
}

/// The snapshot's letters the filter picks; refuses an unknown handler,
/// and letters past the dedup retention unless `--force`.
async fn choose<'s>(
    args: &ReplayArgs,
    filter: &Filter,
    state: &HandlerState,
    held: &'s [Held],
) -> Result<Vec<&'s Held>> {
    let chosen: Vec<&Held> = held.iter().filter(|h| filter.matches(&h.letter)).collect();
    if let Some(handler) = &args.filter.handler
        && chosen.is_empty()
        && !state.knows(handler).await?
    {
        return Err(Error::UnknownHandler(handler.clone()));
    }
    let now = OffsetDateTime::now_utc();
    let too_old: Vec<&Letter> = chosen
        .iter()
        .map(|h| &h.letter)
        .filter(|l| now - l.letter.last_failure > args.retention)
        .collect();
    if !too_old.is_empty() && !args.force {
        let ids: Vec<&str> = too_old.iter().take(10).map(|l| l.id.as_str()).collect();
        return Err(Error::Refused(format!(
            "{} letter(s) are older than the dedup retention ({}): their dedup rows may be purged, so a replay could run them twice (e.g. {}); nothing was sent. Pass --force to replay them anyway, or --since to leave them out",
            too_old.len(),
            humantime::format_duration(args.retention),
            ids.join(", ")
        )));
    }
    Ok(chosen)
}

/// Reports the letters that must not be sent (already sent by an earlier
/// run: removed unless dry; already processed; payload omitted) and
/// returns the rest, in order.
async fn triage<'s>(
    args: &ReplayArgs,
    state: &HandlerState,
    journal: &Journal,
    letters: &mut Letters,
    chosen: &[&'s Held],
    report: &mut Report<'_>,
    out: &mut impl Write,
) -> Result<Vec<&'s Held>> {
    let mut todo = Vec::new();
    let processed = state
        .processed_among(&chosen.iter().map(|h| &h.letter).collect::<Vec<_>>())
        .await?;
    for &held in chosen {
        let l = &held.letter;
        let fate = if journal.was_sent(l).await? {
            if !args.dry_run {
                letters.remove(held).await?;
            }
            Some(Fate::AlreadySent)
        } else if processed.contains(&format!("{}\0{}", l.letter.handler, l.letter.message_id)) {
            Some(Fate::AlreadyProcessed)
        } else if l.letter.payload_omitted.is_some() {
            Some(Fate::PayloadOmitted)
        } else {
            None
        };
        match fate {
            Some(f) => report.letter(out, l, f)?,
            None => todo.push(held),
        }
    }
    Ok(todo)
}

/// What sending needs besides the letters.
struct Run<'a> {
    args: &'a ReplayArgs,
    state: &'a HandlerState,
    journal: &'a Journal,
    route: &'a Route,
}

impl Run<'_> {
    /// Sends `todo` at the paced rate: the canaries first, alone, watched
    /// until processed; then the rest. Ctrl-C stops the run between two
    /// letters, never inside one.
    async fn send_all(
        &self,
        letters: &mut Letters,
        todo: &[&Held],
        report: &mut Report<'_>,
        out: &mut impl Write,
    ) -> Result<()> {
        let interrupted = Arc::new(AtomicBool::new(false));
        let watcher = tokio::spawn({
            let flag = Arc::clone(&interrupted);
            async move {
                if tokio::signal::ctrl_c().await.is_ok() {
                    flag.store(true, Ordering::SeqCst);
                }
            }
        });
        let result = self
            .send_paced(letters, todo, report, out, &interrupted)
            .await;
        watcher.abort();
        result
    }

    async fn send_paced(
        &self,
        letters: &mut Letters,
        todo: &[&Held],
        report: &mut Report<'_>,
        out: &mut impl Write,
        interrupted: &AtomicBool,
    ) -> Result<()> {
        let stop = || interrupted.load(Ordering::SeqCst);
        let mut pacer = Pacer::new(self.args.rate);
        let canaries = self.args.canary.unwrap_or(0).min(todo.len());
        let (first, rest) = todo.split_at(canaries);
        if !first.is_empty() {
            for held in first {
                pacer.wait().await;
                if stop() {
                    return Err(Error::Interrupted(report.sent()));
                }
                send(self.state, self.route, self.journal, letters, held).await?;
                report.letter(out, &held.letter, Fate::Sent)?;
            }
            let canary_letters: Vec<&Letter> = first.iter().map(|h| &h.letter).collect();
            watch_canaries(self.state, &canary_letters, self.args.canary_timeout).await?;
            report.note(out, &format!("canary: {} letter(s) processed", first.len()))?;
        }
        let bar = crate::progress::bar(
            rest.len() as u64,
            "replaying",
            self.args.json || rest.len() < 100,
        );
        for held in rest {
            pacer.wait().await;
            if stop() {
                bar.finish_and_clear();
                return Err(Error::Interrupted(report.sent()));
            }
            send(self.state, self.route, self.journal, letters, held).await?;
            report.letter(out, &held.letter, Fate::Sent)?;
            bar.inc(1);
        }
        bar.finish_and_clear();
        Ok(())
    }
}

async fn send(
    state: &HandlerState,
    route: &Route,
    journal: &Journal,
    letters: &mut Letters,
    held: &Held,
) -> Result<()> {
    state.reset_attempts(&held.letter).await?;
    route.send(&held.letter).await?;
    journal
        .record(&held.letter, &route.of(&held.letter))
        .await?;
    letters.remove(held).await
}

/// Waits until each canary was processed, or one came back dead.
async fn watch_canaries(
    state: &HandlerState,
    canaries: &[&Letter],
    timeout: Duration,
) -> Result<()> {
    // A timeout past what the clock can count (`--canary-timeout 1000000years`)
    // is no deadline at all, not a panic.
    let deadline = Instant::now().checked_add(timeout);
    let mut pending: Vec<&Letter> = canaries.to_vec();
    loop {
        let mut still = Vec::new();
        for l in pending {
            match state.outcome(l).await? {
                Outcome::Processed => {}
                Outcome::DeadAgain => {
                    return Err(Error::CanaryFailed(format!(
                        "letter {} (handler {}, message {}) was dead-lettered again; nothing more was sent: fix the handler, then replay again",
                        l.id, l.letter.handler, l.letter.message_id
                    )));
                }
                Outcome::Pending => still.push(l),
            }
        }
        if still.is_empty() {
            return Ok(());
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            let ids: Vec<&str> = still.iter().map(|l| l.id.as_str()).collect();
            return Err(Error::CanaryTimeout(format!(
                "no outcome for {} within {} (is the consumer of handler {} running?); nothing more was sent",
                ids.join(", "),
                humantime::format_duration(timeout),
                still[0].letter.handler
            )));
        }
        // The store has no event to await; a CLI polling it is fine.
        tokio::time::sleep(Duration::from_millis(100)).await;
        pending = still;
    }
}

/// At most `rate` sends per second.
struct Pacer {
    interval: Option<tokio::time::Interval>,
}

impl Pacer {
    fn new(rate: Option<Rate>) -> Self {
        Self {
            interval: rate.map(|r| {
                let mut i = tokio::time::interval(r.interval());
                i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                i
            }),
        }
    }

    async fn wait(&mut self) {
        if let Some(i) = &mut self.interval {
            i.tick().await;
        }
    }
}

/// Per-letter lines and the totals.
struct Report<'r> {
    json: bool,
    route: &'r Route,
    counts: [usize; 5],
}

impl<'r> Report<'r> {
    fn new(json: bool, route: &'r Route) -> Self {
        Self {
            json,
            route,
            counts: [0; 5],
        }
    }

    fn letter(&mut self, out: &mut impl Write, l: &Letter, fate: Fate) -> Result<()> {
        let slot = match fate {
            Fate::Sent => 0,
            Fate::WouldSend => 1,
            Fate::AlreadySent => 2,
            Fate::AlreadyProcessed => 3,
            Fate::PayloadOmitted => 4,
        };
        self.counts[slot] += 1;
        let text = if self.json {
            line(&serde_json::json!({
                "id": l.id,
                "handler": l.letter.handler,
                "message_id": l.letter.message_id,
                "route": self.route.of(l),
                "outcome": match fate {
                    Fate::Sent => "sent",
                    Fate::WouldSend => "would_send",
                    Fate::AlreadySent => "already_sent",
                    Fate::AlreadyProcessed => "already_processed",
                    Fate::PayloadOmitted => "payload_omitted",
                },
            }))
        } else {
            format!(
                "{}  {:<10} {:<24} {}{}",
                l.id,
                l.letter.handler,
                l.letter.message_id,
                fate.as_str(),
                if matches!(fate, Fate::Sent | Fate::WouldSend) {
                    format!(" -> {}", self.route.of(l))
                } else {
                    String::new()
                }
            )
        };
        writeln!(out, "{text}").map_err(Error::io("writing the output"))
    }

    fn sent(&self) -> usize {
        self.counts[0]
    }

    fn note(&self, out: &mut impl Write, text: &str) -> Result<()> {
        if self.json {
            return Ok(());
        }
        writeln!(out, "{text}").map_err(Error::io("writing the output"))
    }

    fn summary(&self, out: &mut impl Write, dry_run: bool) -> Result<()> {
        if self.json {
            return Ok(());
        }
        let [sent, would, already_sent, processed, omitted] = self.counts;
        let head = if dry_run {
            format!("dry run: {would} would be sent, nothing was changed")
        } else {
            format!("replayed {sent}")
        };
        writeln!(
            out,
            "{head}; already processed {processed}, already sent {already_sent}, payload omitted {omitted}"
        )
        .map_err(Error::io("writing the output"))
    }
}
