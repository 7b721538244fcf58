//! [`SagaStore`]: sagas as operators see them: list, show, their pending
//! timeouts; and what an operator may do to one by hand: resume its
//! compensation, compensate it, abandon it. Each change is a transition of
//! its own (the version goes up), so a delivery racing it conflicts and
//! applies on top.

use crate::statements;
use sqlx::Pool;

use super::compensation;
use super::error::OperatorError;
use super::handler::cancel_everything;
use super::history;
use super::record::{HistoryEntry, Meta, PendingTimeout, SagaRecord, SagaWrite};
use super::{SagaDatabase, SagaFilter, SagaStatus};
use consumer_core::outbox::{NewEvent, Outbox, ScheduleToken};

/// Attempts of an operator's change against deliveries changing the saga
/// at the same moment.
const MAX_CONFLICTS: u32 = 16;

/// The sagas of one store; see the module docs.
#[derive(Debug, Clone)]
pub struct SagaStore<DB: sqlx::Database> {
    pool: Pool<DB>,
    outbox: Outbox,
}

/// What an operator's change does to the saga's framework columns, and the
/// outbox writes it needs.
struct Change {
    sends: Vec<NewEvent>,
    cancels: Vec<ScheduleToken>,
    entry: HistoryEntry,
}

impl<DB: SagaDatabase> SagaStore<DB> {
    /// The sagas on `pool` (the store's pool), whose commands go through
    /// the default outbox table.
    pub fn new(pool: Pool<DB>) -> Self {
        Self {
            pool,
            outbox: Outbox::new(),
        }
    }

    /// The outbox the sagas write into, when not the default table: an
    /// operator's resend and cancels go there.
    #[must_use]
    pub fn with_outbox(mut self, outbox: Outbox) -> Self {
        self.outbox = outbox;
        self
    }

    /// One saga, tombstones included.
    pub async fn get(
        &self,
        saga_type: &str,
        saga_id: &str,
    ) -> Result<Option<SagaRecord>, OperatorError> {
        let mut conn = self.pool.acquire().await?;
        let Some(row) = statements::load::<DB>(&mut conn, saga_type, saga_id).await? else {
            return Ok(None);
        };
        let history = history::of_saga::<DB>(&mut conn, saga_type, saga_id, row.version).await?;
        Ok(Some(row.record(history)?))
    }

    /// The sagas `filter` selects, oldest first.
    pub async fn list(&self, filter: &SagaFilter) -> Result<Vec<SagaRecord>, OperatorError> {
        let rows = statements::list(&self.pool, filter).await?;
        Ok(rows
            .into_iter()
            .map(|(row, history)| row.record(history))
            .collect::<Result<_, _>>()?)
    }

    /// The timeouts a saga waits for, in the order they were scheduled.
    pub async fn pending_timeouts(
        &self,
        saga_type: &str,
        saga_id: &str,
    ) -> Result<Vec<PendingTimeout>, OperatorError> {
        Ok(self
            .get(saga_type, saga_id)
            .await?
            .map(|r| r.timeouts)
            .unwrap_or_default())
    }

    /// Stops a saga for `reason`: `abandoned`, its timeouts and scheduled
    /// resends cancelled, nothing undone. For an active saga, or one whose
    /// compensation failed and that an operator settled by other means.
    pub async fn abandon(
        &self,
        saga_type: &str,
        saga_id: &str,
        reason: &str,
    ) -> Result<SagaRecord, OperatorError> {
        self.change(saga_type, saga_id, "abandon", |meta| {
            if !meta.status.is_active() && meta.status != SagaStatus::CompensationFailed {
                return Err("it is finished already".to_owned());
            }
            meta.status = SagaStatus::Abandoned;
            meta.reason = Some(reason.to_owned());
            Ok(Vec::new())
        })
        .await
    }

    /// Resumes a compensation: each undo step that failed, and the one
    /// awaiting an outcome that never came, is sent again in a new round
    /// (a new id, so the participant does not take it for the repeat of a
    /// command it answered), last first as before. For a saga in
    /// `compensation_failed` (once the cause is fixed) or stuck
    /// `compensating`.
    pub async fn resume(
        &self,
        saga_type: &str,
        saga_id: &str,
    ) -> Result<SagaRecord, OperatorError> {
        self.change(saga_type, saga_id, "resume", |meta| {
            if !matches!(meta.status, SagaStatus::CompensationFailed | SagaStatus::Compensating) {
                return Err("only a compensation resumes (a running saga goes on with its next event): compensate or abandon it instead".to_owned());
            }
            if compensation::rearm(meta) == 0 {
                return Err("no undo step failed or awaits an outcome".to_owned());
            }
            meta.status = SagaStatus::Compensating;
            Ok(Vec::new())
        })
        .await
    }

    /// Compensates a running (or `failed`) saga by hand, for `reason`: its
    /// recorded undo steps are sent, last first, as if a transition had
    /// called [`Step::compensate`](super::Step::compensate).
    pub async fn compensate(
        &self,
        saga_type: &str,
        saga_id: &str,
        reason: &str,
    ) -> Result<SagaRecord, OperatorError> {
        self.change(saga_type, saga_id, "compensate", |meta| {
            if !matches!(meta.status, SagaStatus::Running | SagaStatus::Failed) {
                return Err("only a running or failed saga can be compensated".to_owned());
            }
            meta.status = SagaStatus::Compensating;
            meta.reason = Some(reason.to_owned());
            Ok(std::mem::take(&mut meta.timeouts)
                .into_iter()
                .map(|t| t.token())
                .collect())
        })
        .await
    }

    /// Applies `op` (which returns timeouts to cancel, or why it refuses)
    /// to the saga's row at its current version, moves its compensation on,
    /// and saves it at the next version with the outbox writes, in one
    /// transaction; again on a conflict.
    async fn change<F>(
        &self,
        saga_type: &str,
        saga_id: &str,
        what: &str,
        op: F,
    ) -> Result<SagaRecord, OperatorError>
    where
        F: Fn(&mut Meta) -> Result<Vec<ScheduleToken>, String>,
    {
        for _ in 0..MAX_CONFLICTS {
            let mut tx = self.pool.begin().await?;
            let Some(row) = statements::load::<DB>(&mut tx, saga_type, saga_id).await? else {
                return Err(OperatorError::NoSuchSaga {
                    saga_type: saga_type.to_owned(),
                    saga_id: saga_id.to_owned(),
                });
            };
            let mut meta = row.meta()?;
            let before = meta.status;
            let cancels = op(&mut meta).map_err(|reason| OperatorError::Refused {
                saga_type: saga_type.to_owned(),
                saga_id: saga_id.to_owned(),
                status: before,
                reason,
            })?;
            let change = self.settle(
                saga_type,
                saga_id,
                &mut meta,
                cancels,
                what,
                row.version + 1,
            )?;
            // An operator's change drops no entry: the next transition
            // prunes to the saga's limit.
            let write = SagaWrite::of(
                saga_type,
                saga_id,
                row.state.clone(),
                &meta,
                &change.entry,
                i64::MAX,
            )?;
            if !statements::update::<DB>(&mut tx, &write, row.version).await? {
                tx.rollback().await?;
                continue;
            }
            for event in change.sends {
                self.outbox.enqueue(&mut tx, event).await?;
            }
            for token in change.cancels {
                self.outbox.cancel(&mut tx, token).await?;
            }
            tx.commit().await?;
            return self
                .get(saga_type, saga_id)
                .await?
                .ok_or_else(|| OperatorError::NoSuchSaga {
                    saga_type: saga_type.to_owned(),
                    saga_id: saga_id.to_owned(),
                });
        }
        Err(OperatorError::Store(consumer_core::Error::Config(format!(
            "saga `{saga_type}` `{saga_id}` kept changing under `{what}`: try again"
        ))))
    }

    fn settle(
        &self,
        saga_type: &str,
        saga_id: &str,
        meta: &mut Meta,
        mut cancels: Vec<ScheduleToken>,
        what: &str,
        version: i64,
    ) -> Result<Change, consumer_core::Error> {
        let mut sends = Vec::new();
        compensation::advance(saga_type, saga_id, meta, &mut sends)?;
        if !meta.status.is_active() {
            cancels.extend(cancel_everything(meta));
        }
        let entry = HistoryEntry {
            version,
            event_type: "operator".to_owned(),
            message_id: format!("consumer sagas {what}"),
            status: meta.status,
            at_ms: consumer_core::store::now_ms(),
            note: meta.reason.clone().filter(|_| what != "resume"),
        };
        Ok(Change {
            sends,
            cancels,
            entry,
        })
    }
}
