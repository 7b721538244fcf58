//! The campaign's follow-up events and saga: every [`OPEN_EVERY`]th event
//! of an aggregate, once applied, opens a settlement. The consumer's
//! effect writes a `SettlementOpened` event to the outbox in its own
//! transaction; it starts the `settlement` saga, which sends a
//! `ConfirmSettlement` command and waits [`CONFIRM_WITHIN`] for the
//! reply; the participant (a `#[handler]` in the same consumers) confirms
//! it, replying through the outbox in its transaction. The saga completes
//! on the reply, or fails when its reply timeout (a scheduled outbox
//! event) comes first. Every message of a settlement goes to the
//! campaign's queue or topic, keyed by the settlement, so the same
//! relays, broker and consumers carry it through the same faults.

use std::sync::OnceLock;
use std::time::Duration;

use consumer::outbox::ScheduleToken;
use consumer::saga::{NotFound, SagaBuilder, SagaHandler, Step};
use consumer::{NewEvent, Outbox, PgTx, Saga, handler};
use serde::{Deserialize, Serialize};

use super::history::{Event, Kind, record_in_tx};
use super::workload::ApplyError;

/// The saga's type, its rows' `saga_type`.
pub const SAGA: &str = "settlement";

/// Every how many events of an aggregate one opens a settlement.
pub const OPEN_EVERY: i64 = 3;

/// How long a settlement waits for its confirmation: short enough that a
/// crash of PostgreSQL or a long pause outlasts it now and then (the saga
/// then fails), long enough that most complete.
pub const CONFIRM_WITHIN: Duration = Duration::from_secs(3);

/// The reason a settlement that timed out fails with.
pub const TIMED_OUT: &str = "no confirmation in time";

/// The outbox the consumers' handlers write to: every event to the
/// campaign's queue (set once per consumer process).
static OUTBOX: OnceLock<Outbox> = OnceLock::new();

/// Sets where the consumers' follow-up events and replies go.
pub fn send_to(destination: String) {
    let _ = OUTBOX.set(Outbox::new().with_default_destination(destination));
}

fn outbox() -> Outbox {
    OUTBOX.get().cloned().unwrap_or_default()
}

/// The settlement the effect of `event_id` opens.
pub fn settlement_of(event_id: &str) -> String {
    format!("s-{event_id}")
}

/// The follow-up event of an applied event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SettlementOpened {
    pub settlement: String,
    pub aggregate: String,
    pub seq: i64,
}

/// The saga's command, the participant's reply and the saga's timeout.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Settlement {
    pub settlement: String,
}

/// Opens the settlement of event `seq` of `aggregate` (`event_id`) in the
/// transaction that applies it, and records it there.
pub async fn open(
    tx: &mut PgTx,
    process: &str,
    event_id: &str,
    aggregate: &str,
    seq: i64,
) -> Result<(), ApplyError> {
    let opened = SettlementOpened {
        settlement: settlement_of(event_id),
        aggregate: aggregate.to_owned(),
        seq,
    };
    let event = NewEvent::new(SAGA, &opened.settlement, "SettlementOpened", &opened)?;
    outbox().enqueue(tx, event).await?;
    record_in_tx(
        tx,
        process,
        &Kind::Opened {
            settlement: opened.settlement,
            aggregate: opened.aggregate,
            seq,
        },
    )
    .await?;
    Ok(())
}

/// The participant: confirms a settlement once (deduplicated by it),
/// replying keyed by it, and records the confirmation with its reply.
#[handler(name = "confirm", event_type = "ConfirmSettlement", idempotency_key = cmd.settlement)]
pub async fn confirm(cmd: Settlement, tx: &mut PgTx) -> Result<(), ApplyError> {
    let event = NewEvent::new(SAGA, &cmd.settlement, "SettlementConfirmed", &cmd)?;
    outbox().enqueue(tx, event).await?;
    record_in_tx(
        tx,
        &super::workload::process_name(),
        &Kind::Confirmed {
            settlement: cmd.settlement,
        },
    )
    .await?;
    Ok(())
}

/// A settlement's state: the reply timeout it waits on.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Waiting {
    timeout: Option<ScheduleToken>,
}

/// The settlement saga, sending its commands `to` the campaign's queue
/// (no transition of it fails).
pub struct Settlements {
    to: String,
}

impl Saga for Settlements {
    type State = Waiting;
    type Error = std::convert::Infallible;

    fn name(&self) -> &'static str {
        SAGA
    }
}

impl Settlements {
    fn opened(
        &self,
        state: &mut Waiting,
        e: SettlementOpened,
        step: &mut Step<'_>,
    ) -> Result<(), std::convert::Infallible> {
        let settlement = Settlement {
            settlement: e.settlement,
        };
        step.send(&self.to, "ConfirmSettlement", &settlement);
        state.timeout =
            Some(step.schedule_timeout("SettlementTimedOut", &settlement, CONFIRM_WITHIN));
        Ok(())
    }

    fn confirmed(
        &self,
        _: &mut Waiting,
        _: Settlement,
        step: &mut Step<'_>,
    ) -> Result<(), std::convert::Infallible> {
        step.complete(); // cancels the reply timeout
        Ok(())
    }

    fn timed_out(
        &self,
        _: &mut Waiting,
        _: Settlement,
        step: &mut Step<'_>,
    ) -> Result<(), std::convert::Infallible> {
        step.fail(TIMED_OUT);
        Ok(())
    }
}

/// The saga's handler, sending (commands and timeouts) to `destination`.
pub fn saga(destination: &str) -> SagaHandler<Settlements> {
    let of = |s: &Settlement| s.settlement.clone();
    SagaBuilder::new(
        Settlements {
            to: destination.to_owned(),
        },
        Outbox::new(),
    )
    .on(
        "SettlementOpened",
        |e: &SettlementOpened| e.settlement.clone(),
        NotFound::Start,
        Settlements::opened,
    )
    // The reply follows the saga's first commit; it cannot overtake it.
    .on(
        "SettlementConfirmed",
        of,
        NotFound::dead_letter("a confirmation of no settlement"),
        Settlements::confirmed,
    )
    .on_timeout("SettlementTimedOut", Settlements::timed_out)
    .with_timeouts_to(destination)
    .build()
    .expect("the settlement saga")
}

/// Settlements opened whose saga has not finished (absent, running or
/// compensating) or whose command is not confirmed: what the campaign
/// still waits for.
pub async fn unfinished(pool: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM campaign_history o WHERE o.kind = 'opened' \
         AND (NOT EXISTS (SELECT 1 FROM consumer_sagas s WHERE s.saga_type = $1 \
                          AND s.saga_id = o.event_id AND s.status NOT IN ('running', 'compensating')) \
              OR NOT EXISTS (SELECT 1 FROM campaign_history c WHERE c.kind = 'confirmed' \
                             AND c.event_id = o.event_id))",
    )
    .bind(SAGA)
    .fetch_one(pool)
    .await
    .expect("unfinished settlements")
}

/// Each settlement saga as it ended (or stands), at its last save.
pub async fn ended(pool: &sqlx::PgPool) -> Vec<Event> {
    let rows: Vec<(i64, String, String, Option<String>, i64)> = sqlx::query_as(
        "SELECT (extract(epoch FROM updated_at) * 1000000)::bigint, saga_id, status, reason, version \
         FROM consumer_sagas WHERE saga_type = $1",
    )
    .bind(SAGA)
    .fetch_all(pool)
    .await
    .expect("consumer_sagas");
    rows.into_iter()
        .map(|(at_us, settlement, status, reason, version)| Event {
            at_us,
            process: "sagas".to_owned(),
            kind: Kind::SagaEnded {
                settlement,
                status,
                reason,
                version,
            },
        })
        .collect()
}
