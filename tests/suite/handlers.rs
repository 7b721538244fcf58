//! The handlers the suite runs, on the store of the test crate that
//! includes it (`crate::SuiteTx`, `crate::SuiteHarness`).

use consumer::{MessageContext, handler};

use crate::conformance::support::{self, Harness, Job, JobError};
use crate::{SuiteHarness, SuiteTx};

/// The workhorse: writes one effect row per successful call; the message
/// says how it should misbehave.
#[handler(
    idempotency_key = job.id,
    retry = exponential(base = "10ms", max_delay = "200ms", attempts = 4),
    terminal = JobError::Terminal(_),
)]
pub async fn work(job: Job, tx: &mut SuiteTx, ctx: &MessageContext) -> Result<(), JobError> {
    support::behave(&job, ctx).await?;
    SuiteHarness::insert_effect(tx, "work", &job, ctx.message_id()).await?;
    Ok(())
}

/// Same logic with longer delays, so backoff shows over the overhead of
/// each attempt on a loaded machine.
#[handler(
    idempotency_key = job.id,
    retry = exponential(base = "50ms", max_delay = "2s", attempts = 4),
)]
pub async fn backoff(job: Job, tx: &mut SuiteTx, ctx: &MessageContext) -> Result<(), JobError> {
    support::behave(&job, ctx).await?;
    SuiteHarness::insert_effect(tx, "backoff", &job, ctx.message_id()).await?;
    Ok(())
}

/// Same logic, retries go back through the broker.
#[handler(
    idempotency_key = job.id,
    retry = exponential(base = "10ms", max_delay = "100ms", attempts = 4, mode = redeliver),
    terminal = JobError::Terminal(_),
)]
pub async fn work_redeliver(
    job: Job,
    tx: &mut SuiteTx,
    ctx: &MessageContext,
) -> Result<(), JobError> {
    support::behave(&job, ctx).await?;
    SuiteHarness::insert_effect(tx, "work_redeliver", &job, ctx.message_id()).await?;
    Ok(())
}

/// Retries through the broker, deduplicated on the message id (no key
/// expression): what keeps a message published without an id to one
/// effect is the id its retry copy carries.
#[handler(retry = exponential(base = "10ms", max_delay = "100ms", attempts = 4, mode = redeliver))]
pub async fn by_message_id(
    job: Job,
    tx: &mut SuiteTx,
    ctx: &MessageContext,
) -> Result<(), JobError> {
    support::behave(&job, ctx).await?;
    SuiteHarness::insert_effect(tx, "by_message_id", &job, ctx.message_id()).await?;
    Ok(())
}

/// A second handler of the same messages, under its own name.
#[handler(name = "audit", idempotency_key = job.id, retry = none)]
pub async fn audit(job: Job, tx: &mut SuiteTx, ctx: &MessageContext) -> Result<(), JobError> {
    SuiteHarness::insert_effect(tx, "audit", &job, ctx.message_id()).await?;
    Ok(())
}

/// Many attempts, for outages longer than `work` would wait.
#[handler(
    idempotency_key = job.id,
    retry = exponential(base = "20ms", max_delay = "250ms", attempts = 200),
)]
pub async fn patient(job: Job, tx: &mut SuiteTx, ctx: &MessageContext) -> Result<(), JobError> {
    SuiteHarness::insert_effect(tx, "patient", &job, ctx.message_id()).await?;
    Ok(())
}
