//! One history of a campaign, recorded by the processes themselves.
//!
//! Where a claim depends on a record, the record is written with what it
//! records, so it is true whatever the nemesis does:
//!
//! * a writer's commit ([`Kind::Committed`]), a consumer's effect
//!   ([`Kind::Applied`]), the settlement that effect opened
//!   ([`Kind::Opened`]) and a participant's confirmation of it
//!   ([`Kind::Confirmed`]) are rows of `campaign_history` inserted in the
//!   very transaction that commits the business row and its outbox event,
//!   the state row, its dedup row and its follow-up event, or the
//!   participant's dedup row and its reply: the record exists if and only
//!   if what it records does;
//! * a settlement saga's end ([`Kind::SagaEnded`]) is its row in
//!   `consumer_sagas`, which each transition saves in its own transaction,
//!   read at the end;
//! * a dead letter ([`Kind::DeadLettered`]) is the mark the consumer
//!   writes in `consumer_attempts` in the transaction that gives up on the
//!   message, and a dedup row ([`Kind::DedupRow`]) is `consumer_processed`,
//!   both read at the end;
//! * publishes and deliveries ([`Kind::Published`], [`Kind::Delivered`])
//!   are context for a reader, no claim rests on them: JSON lines appended
//!   to a file per process ([`JsonLines`]), not fsync'd, a line torn by a
//!   SIGKILL ignored on reading;
//! * the nemesis' faults ([`Kind::Fault`]) are JSON lines in the history
//!   directory, fsync'd, so the schedule survives the run that injected it.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// The table of commits and effects, in the workload's schema.
pub const HISTORY_DDL: &str = "CREATE TABLE campaign_history (\
     id BIGSERIAL PRIMARY KEY, \
     at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(), \
     process TEXT NOT NULL, \
     kind TEXT NOT NULL CHECK (kind IN ('committed', 'applied', 'opened', 'confirmed')), \
     event_id TEXT NOT NULL, \
     aggregate TEXT NOT NULL, \
     seq BIGINT NOT NULL, \
     poison BOOLEAN NOT NULL)";

/// One thing that happened, where, and when (microseconds since the Unix
/// epoch, on the clock of whoever recorded it: PostgreSQL's for rows,
/// the process's for lines).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub at_us: i64,
    pub process: String,
    #[serde(flatten)]
    pub kind: Kind,
}

impl Event {
    /// `kind`, by `process`, at `at_us`: the checker's tests' histories.
    #[cfg(test)]
    pub fn at(at_us: i64, process: &str, kind: Kind) -> Self {
        Self {
            at_us,
            process: process.to_owned(),
            kind,
        }
    }
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Kind {
    /// A writer committed event `seq` of `aggregate` with its business row.
    Committed {
        event_id: String,
        aggregate: String,
        seq: i64,
        /// The workload meant this one to be refused by the handler.
        poison: bool,
    },
    /// A relay's publish of the event was confirmed by the broker.
    Published { event_id: String },
    /// A consumer's handler was called with the event.
    Delivered { event_id: String, attempt: u32 },
    /// A consumer committed the event's effect on its aggregate's state.
    Applied {
        event_id: String,
        aggregate: String,
        seq: i64,
    },
    /// A consumer's effect of event `seq` of `aggregate` opened
    /// `settlement` (a follow-up event through the outbox, which starts
    /// its saga).
    Opened {
        settlement: String,
        aggregate: String,
        seq: i64,
    },
    /// The participant confirmed `settlement` (its reply went out with
    /// this record).
    Confirmed { settlement: String },
    /// The saga of `settlement` as it ended: its status, why, and how
    /// many transitions it saved (its version).
    SagaEnded {
        settlement: String,
        status: String,
        reason: Option<String>,
        version: i64,
    },
    /// The consumer's dedup table holds a row for the event.
    DedupRow { event_id: String },
    /// The consumer gave up on the event (dead letter).
    DeadLettered { event_id: String },
    /// The nemesis injected a fault.
    Fault { what: String },
}

impl Kind {
    /// The event id this is about, if any.
    pub fn event_id(&self) -> Option<&str> {
        match self {
            Self::Committed { event_id, .. }
            | Self::Published { event_id }
            | Self::Delivered { event_id, .. }
            | Self::Applied { event_id, .. }
            | Self::DedupRow { event_id }
            | Self::DeadLettered { event_id } => Some(event_id),
            Self::Opened { settlement, .. }
            | Self::Confirmed { settlement }
            | Self::SagaEnded { settlement, .. } => Some(settlement),
            Self::Fault { .. } => None,
        }
    }

    /// The aggregate this is about, where the record says it.
    pub fn aggregate(&self) -> Option<&str> {
        match self {
            Self::Committed { aggregate, .. }
            | Self::Applied { aggregate, .. }
            | Self::Opened { aggregate, .. } => Some(aggregate),
            _ => None,
        }
    }

    /// A short name for counts.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Committed { .. } => "committed",
            Self::Published { .. } => "published",
            Self::Delivered { .. } => "delivered",
            Self::Applied { .. } => "applied",
            Self::Opened { .. } => "settlements opened",
            Self::Confirmed { .. } => "settlements confirmed",
            Self::SagaEnded { status, .. } => match status.as_str() {
                "completed" => "sagas completed",
                "failed" => "sagas failed",
                _ => "sagas in another status",
            },
            Self::DedupRow { .. } => "dedup rows",
            Self::DeadLettered { .. } => "dead-lettered",
            Self::Fault { .. } => "faults",
        }
    }
}

/// Microseconds since the Unix epoch, now.
pub fn now_us() -> i64 {
    let now = time::OffsetDateTime::now_utc();
    i64::try_from(now.unix_timestamp_nanos() / 1000).unwrap_or(i64::MAX)
}

/// Records a commit, an effect, an opened settlement or a confirmation in
/// the transaction that makes it true.
pub async fn record_in_tx(
    tx: &mut sqlx::PgConnection,
    process: &str,
    kind: &Kind,
) -> Result<(), sqlx::Error> {
    let (name, event_id, aggregate, seq, poison) = match kind {
        Kind::Committed {
            event_id,
            aggregate,
            seq,
            poison,
        } => ("committed", event_id, aggregate, *seq, *poison),
        Kind::Applied {
            event_id,
            aggregate,
            seq,
        } => ("applied", event_id, aggregate, *seq, false),
        Kind::Opened {
            settlement,
            aggregate,
            seq,
        } => ("opened", settlement, aggregate, *seq, false),
        Kind::Confirmed { settlement } => ("confirmed", settlement, settlement, 0, false),
        other => panic!("{} is not recorded in a transaction", other.name()),
    };
    sqlx::query(
        "INSERT INTO campaign_history (process, kind, event_id, aggregate, seq, poison) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(process)
    .bind(name)
    .bind(event_id)
    .bind(aggregate)
    .bind(seq)
    .bind(poison)
    .execute(tx)
    .await?;
    Ok(())
}

/// A process's file of JSON lines, one [`Event`] a line.
pub struct JsonLines {
    file: Mutex<File>,
    process: String,
    sync: bool,
}

impl JsonLines {
    /// Appends to `dir/<process>.jsonl`; with `sync`, each line is
    /// fsync'd before [`append`](Self::append) returns.
    pub fn open(dir: &Path, process: &str, sync: bool) -> std::io::Result<Self> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(format!("{process}.jsonl")))?;
        Ok(Self {
            file: Mutex::new(file),
            process: process.to_owned(),
            sync,
        })
    }

    /// Appends `kind`, now, in one write (an O_APPEND write of one line is
    /// not interleaved with another process's).
    pub fn append(&self, kind: Kind) -> std::io::Result<()> {
        let event = Event {
            at_us: now_us(),
            process: self.process.clone(),
            kind,
        };
        let mut line = serde_json::to_vec(&event).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        file.write_all(&line)?;
        if self.sync {
            file.sync_data()?;
        }
        Ok(())
    }
}

/// Every event of a campaign: the rows of `campaign_history`, the
/// consumers' dead-letter marks and dedup rows of `handler`, and the
/// JSON lines of `dir`, ordered by time (rows of one table in their
/// insertion order first: an aggregate's effects are inserted under its
/// state row's lock, so their order is the order they were applied in).
pub async fn load(pool: &sqlx::PgPool, handler: &str, dir: &Path) -> Vec<Event> {
    let mut events = Vec::new();
    let rows: Vec<(i64, String, String, String, String, i64, bool)> = sqlx::query_as(
        "SELECT (extract(epoch FROM at) * 1000000)::bigint, process, kind, event_id, aggregate, seq, poison \
         FROM campaign_history ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .expect("campaign_history");
    for (at_us, process, kind, event_id, aggregate, seq, poison) in rows {
        let kind = match kind.as_str() {
            "committed" => Kind::Committed {
                event_id,
                aggregate,
                seq,
                poison,
            },
            "applied" => Kind::Applied {
                event_id,
                aggregate,
                seq,
            },
            "opened" => Kind::Opened {
                settlement: event_id,
                aggregate,
                seq,
            },
            _ => Kind::Confirmed {
                settlement: event_id,
            },
        };
        events.push(Event {
            at_us,
            process,
            kind,
        });
    }
    // Every handler's dead letters: `handler`'s by the event's id; the
    // settlements' (none is meant to be) by handler and message id, so
    // that no commit explains them.
    let dead: Vec<(i64, String, String)> = sqlx::query_as(
        "SELECT (extract(epoch FROM dead_lettered_at) * 1000000)::bigint, handler, message_id \
         FROM consumer_attempts WHERE dead_lettered_at IS NOT NULL",
    )
    .fetch_all(pool)
    .await
    .expect("consumer_attempts");
    events.extend(dead.into_iter().map(|(at_us, h, id)| Event {
        at_us,
        process: "consumers".to_owned(),
        kind: Kind::DeadLettered {
            event_id: if h == handler {
                id
            } else {
                format!("{h}: {id}")
            },
        },
    }));
    events.extend(super::settlement::ended(pool).await);
    let dedup: Vec<(i64, String)> = sqlx::query_as(
        "SELECT (extract(epoch FROM processed_at) * 1000000)::bigint, key \
         FROM consumer_processed WHERE handler = $1",
    )
    .bind(handler)
    .fetch_all(pool)
    .await
    .expect("consumer_processed");
    events.extend(dedup.into_iter().map(|(at_us, event_id)| Event {
        at_us,
        process: "consumers".to_owned(),
        kind: Kind::DedupRow { event_id },
    }));
    for path in jsonl_files(dir) {
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        // A line a SIGKILL tore in half is not an event.
        events.extend(
            text.lines()
                .filter_map(|l| serde_json::from_str::<Event>(l).ok()),
        );
    }
    events.sort_by_key(|e| e.at_us);
    events
}

fn jsonl_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    files
}
