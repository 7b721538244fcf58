//! `console`: the operator's console in the browser ([`consumer_console`])
//! on this tool's own engine: the dead-letter table's readers
//! ([`DeadLetterTable`]) or, given a broker's place at start (the flags of
//! `dead-letters`), that place's reader ([`broker`]), the replay engine ([`crate::replay`], run as
//! `dead-letters replay --json` would run it), the store's [`SagaStore`]
//! (as `sagas` uses it), its held keys and pauses (as `held-keys`,
//! `pause`, `resume` and `paused` use them), the outbox's status (as
//! `outbox status` reads it), and the console's audit log ([`AuditLog`]).
//!
//! [`SagaStore`]: consumer_saga::SagaStore

mod broker;

use std::io::Write;
use std::time::Duration;

use consumer_console::operator::{
    AuditEntry, FailedEvent, FailureKind, HeldKey, HeldQuery, LetterGroup, LetterGroups,
    LetterQuery, OutboxBacklog, PausedHandler, ReplayReport, ReplayRequest, ReplayedLetter,
    SagaAction, SagaQuery, Selection, StoredLetter,
};
use consumer_console::{Console, Operator, OperatorError, Token};
use consumer_core::store::held::{HeldKeys, Release};
use consumer_core::store::paused::{Pause, PausedHandlers};
use consumer_saga::{SagaFilter, SagaRecord};
use sqlx::postgres::PgPool;
use time::OffsetDateTime;

use crate::args::{ConsoleArgs, FilterArgs, Rate, ReplayArgs, Services};
use crate::audit::AuditLog;
use crate::database;
use crate::error::{Error, Result, exit};
use crate::letter::Letter;
use crate::places::table::DeadLetterTable;

/// Where the console reads dead letters.
#[derive(Debug)]
enum Place {
    /// The store's table, paged and grouped by the database.
    Table(DeadLetterTable),
    /// A broker's place, read as a snapshot per page.
    Broker(Box<broker::BrokerPlace>),
}

/// The engine behind the console's pages.
#[derive(Debug)]
struct CliOperator {
    services: Services,
    pool: PgPool,
    place: Place,
    /// The flags that name the place, for the replay engine.
    place_args: crate::args::PlaceArgs,
    to_topic: Option<String>,
    to_stream: Option<String>,
    audit: AuditLog,
    outbox_table: String,
    canary_timeout: Duration,
    retention: Duration,
}

/// The tool's error as the console's: its kind from the exit code.
fn failure(e: Error) -> OperatorError {
    let kind = match e.exit_code() {
        exit::NOT_FOUND => FailureKind::NotFound,
        exit::REFUSED | exit::USAGE => FailureKind::Refused,
        _ => FailureKind::Failed,
    };
    OperatorError::new(kind, e.to_string())
}

fn at(ms: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

fn stored(row: i64, l: Letter) -> StoredLetter {
    StoredLetter {
        handle: row.to_string(),
        id: l.id,
        letter: l.letter,
        refusal: l.refusal,
        stored_at: l.stored_at,
        replayed: None,
    }
}

/// One line of `dead-letters replay --json`.
#[derive(Debug, serde::Deserialize)]
struct ReplayLine {
    id: String,
    handler: String,
    message_id: String,
    route: String,
    outcome: String,
}

impl Operator for CliOperator {
    fn place(&self) -> String {
        match &self.place {
            Place::Table(t) => t.describe(),
            Place::Broker(b) => b.describe().to_owned(),
        }
    }

    async fn letter_groups(&self, limit: u32) -> Result<LetterGroups, OperatorError> {
        let table = match &self.place {
            Place::Table(t) => t,
            Place::Broker(b) => return b.groups(limit).await.map_err(failure),
        };
        let groups = table.groups(limit).await.map_err(failure)?;
        Ok(LetterGroups {
            groups: groups
                .into_iter()
                .map(|g| LetterGroup {
                    handler: g.handler,
                    error: g.error,
                    count: g.count,
                    first: at(g.first_ms),
                    last: at(g.last_ms),
                })
                .collect(),
            left_out: None,
        })
    }

    async fn letters(&self, query: &LetterQuery) -> Result<Vec<StoredLetter>, OperatorError> {
        let table = match &self.place {
            Place::Table(t) => t,
            Place::Broker(b) => return b.page(query).await.map_err(failure),
        };
        let after = match query.after.as_deref() {
            None => 0,
            Some(a) => a.parse().map_err(|_| {
                OperatorError::new(
                    FailureKind::Refused,
                    format!("{a:?} is not a row of the dead-letter table."),
                )
            })?,
        };
        let page = table
            .page(
                query.handler.as_deref(),
                query.error.as_deref(),
                after,
                query.limit,
            )
            .await
            .map_err(failure)?;
        Ok(page.into_iter().map(|(row, l)| stored(row, l)).collect())
    }

    async fn letter(&self, handle: &str) -> Result<Option<StoredLetter>, OperatorError> {
        let table = match &self.place {
            Place::Table(t) => t,
            Place::Broker(b) => return b.letter(handle).await.map_err(failure),
        };
        // Not a row: no such letter.
        let Ok(row) = handle.parse::<i64>() else {
            return Ok(None);
        };
        let letter = table.row(row).await.map_err(failure)?;
        Ok(letter.map(|l| stored(row, l)))
    }

    async fn replay(&self, request: &ReplayRequest) -> Result<ReplayReport, OperatorError> {
        let mut filter = FilterArgs::default();
        match &request.selection {
            Selection::Letters(ids) => filter.ids = ids.clone(),
            Selection::Group { handler, error } => {
                filter.handler = Some(handler.clone());
                filter.error_is = Some(error.clone());
            }
        }
        let rate = request
            .rate
            .map(|r| Rate::parse(&r.to_string()))
            .transpose()
            .map_err(|e| OperatorError::new(FailureKind::Refused, format!("The rate {e}.")))?;
        let args = ReplayArgs {
            place: self.place_args.clone(),
            filter,
            to_topic: self.to_topic.clone(),
            to_stream: self.to_stream.clone(),
            rate,
            canary: Some(request.canary),
            canary_timeout: self.canary_timeout,
            dry_run: request.dry_run,
            retention: self.retention,
            force: false,
            json: true,
        };
        let mut out = Vec::new();
        let result = crate::replay::run(&self.services, &args, &mut out).await;
        let letters = String::from_utf8_lossy(&out)
            .lines()
            .filter_map(|l| serde_json::from_str::<ReplayLine>(l).ok())
            .map(|l| ReplayedLetter {
                id: l.id,
                handler: l.handler,
                message_id: l.message_id,
                route: l.route,
                outcome: l.outcome,
            })
            .collect::<Vec<_>>();
        match result {
            Ok(()) => Ok(ReplayReport {
                letters,
                stopped: None,
            }),
            // A run that stopped on its own terms (a canary, another
            // replay holding the lock) is a report, not a failure.
            Err(
                e @ (Error::CanaryFailed(_)
                | Error::CanaryTimeout(_)
                | Error::Refused(_)
                | Error::Interrupted(_)),
            ) => Ok(ReplayReport {
                letters,
                stopped: Some(e.to_string()),
            }),
            Err(e) if !letters.is_empty() => Ok(ReplayReport {
                letters,
                stopped: Some(e.to_string()),
            }),
            Err(e) => Err(failure(e)),
        }
    }

    async fn sagas(&self, query: &SagaQuery) -> Result<Vec<SagaRecord>, OperatorError> {
        let mut filter = SagaFilter::new().with_limit(query.limit);
        if let Some(t) = &query.saga_type {
            filter = filter.with_type(t);
        }
        if let Some(s) = query.status {
            filter = filter.with_status(s);
        }
        crate::sagas::store(self.pool.clone())
            .list(&filter)
            .await
            .map_err(|e| failure(crate::sagas::operator(e)))
    }

    async fn saga(
        &self,
        saga_type: &str,
        saga_id: &str,
    ) -> Result<Option<SagaRecord>, OperatorError> {
        crate::sagas::store(self.pool.clone())
            .get(saga_type, saga_id)
            .await
            .map_err(|e| failure(crate::sagas::operator(e)))
    }

    async fn saga_action(&self, action: &SagaAction) -> Result<SagaRecord, OperatorError> {
        let store = crate::sagas::store(self.pool.clone());
        match action {
            SagaAction::Resume { saga_type, saga_id } => store.resume(saga_type, saga_id).await,
            SagaAction::Abandon {
                saga_type,
                saga_id,
                reason,
            } => store.abandon(saga_type, saga_id, reason).await,
        }
        .map_err(|e| failure(crate::sagas::operator(e)))
    }

    async fn held_keys(&self, query: &HeldQuery) -> Result<Vec<HeldKey>, OperatorError> {
        let store = consumer_core::PgStore::new(self.pool.clone());
        let after = query.after.as_ref().map(|(h, k)| (h.as_str(), k.as_str()));
        store
            .held_keys(query.handler.as_deref(), after, query.limit)
            .await
            .map_err(|e| failure(crate::held_keys::explain(e)))
    }

    async fn release_key(
        &self,
        handler: &str,
        key: &str,
        skip_head: bool,
    ) -> Result<bool, OperatorError> {
        let store = consumer_core::PgStore::new(self.pool.clone());
        match store.release_key(handler, key, skip_head).await {
            Ok(Release::Released) => Ok(true),
            Ok(_) => Ok(false),
            Err(e) => Err(failure(crate::held_keys::explain(e))),
        }
    }

    async fn paused(&self) -> Result<Vec<PausedHandler>, OperatorError> {
        consumer_core::PgStore::new(self.pool.clone())
            .paused_handlers()
            .await
            .map_err(|e| failure(crate::pauses::explain(e)))
    }

    async fn pause(&self, handler: &str, by: &str, reason: &str) -> Result<bool, OperatorError> {
        match consumer_core::PgStore::new(self.pool.clone())
            .pause(handler, by, reason)
            .await
        {
            Ok(Pause::Paused) => Ok(true),
            Ok(_) => Ok(false),
            Err(e) => Err(failure(crate::pauses::explain(e))),
        }
    }

    async fn resume(&self, handler: &str) -> Result<bool, OperatorError> {
        consumer_core::PgStore::new(self.pool.clone())
            .resume(handler)
            .await
            .map_err(|e| failure(crate::pauses::explain(e)))
    }

    async fn outbox(&self) -> Result<OutboxBacklog, OperatorError> {
        let outbox = crate::outbox::outbox(&self.outbox_table).map_err(failure)?;
        let status = crate::outbox::read_status(&self.pool, outbox.table(), 0)
            .await
            .map_err(failure)?;
        Ok(OutboxBacklog {
            pending: status.pending,
            oldest: status.oldest_ms.map(at),
            scheduled: status.scheduled,
            failed: status
                .failed
                .into_iter()
                .map(|f| FailedEvent {
                    aggregate: format!("{}/{}", f.aggregate_type, f.aggregate_id),
                    event_type: f.event_type,
                    version: f.version,
                    attempts: f.attempts,
                    last_error: f.last_error,
                })
                .collect(),
        })
    }

    async fn audit(&self, entry: &AuditEntry) -> Result<(), OperatorError> {
        self.audit.write(entry).await.map_err(failure)
    }

    async fn audit_log(&self, limit: u32) -> Result<Vec<AuditEntry>, OperatorError> {
        self.audit.latest(limit).await.map_err(failure)
    }
}

/// The token of `--token-file`, else of `CONSUMER_CONSOLE_TOKEN`, if any.
fn token(args: &ConsoleArgs) -> Result<Option<Token>> {
    let text = match &args.token_file {
        Some(path) => Some(std::fs::read_to_string(path).map_err(Error::io(format!(
            "reading the token file {}",
            path.display()
        )))?),
        None => std::env::var("CONSUMER_CONSOLE_TOKEN").ok(),
    };
    text.map(|t| Token::new(&t).map_err(|e| Error::Usage(e.to_string())))
        .transpose()
}

/// Serves the console until Ctrl-C; says where on `out` once listening.
pub async fn run(services: &Services, args: &ConsoleArgs, out: &mut impl Write) -> Result<()> {
    let token = token(args)?;
    let listener = consumer_console::bind(args.listen, token.as_ref())
        .await
        .map_err(|e| match e {
            consumer_console::Error::Exposed(_) => Error::Usage(e.to_string()),
            e => Error::Other(e.to_string()),
        })?;
    let pool = database::connect(services).await?;
    let p = &args.place;
    let place = if p.queue.is_none()
        && p.topic.is_none()
        && p.sqs_queue.is_none()
        && p.kinesis_stream.is_none()
    {
        Place::Table(DeadLetterTable::open(services).await?)
    } else {
        Place::Broker(Box::new(
            broker::BrokerPlace::open(services, p, args.to_topic.as_deref()).await?,
        ))
    };
    let operator = CliOperator {
        services: services.clone(),
        place,
        place_args: args.place.clone(),
        to_topic: args.to_topic.clone(),
        to_stream: args.to_stream.clone(),
        audit: AuditLog::open(pool.clone()).await?,
        pool,
        outbox_table: args.outbox_table.clone(),
        canary_timeout: args.canary_timeout,
        retention: args.retention,
    };
    let address = listener
        .local_addr()
        .map_err(Error::io("reading the console's address"))?;
    writeln!(out, "console listening on http://{address}/")
        .and_then(|()| out.flush())
        .map_err(Error::io("writing the output"))?;
    Console::new(operator)
        .with_token(token)
        .serve(listener, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| Error::Other(e.to_string()))
}
