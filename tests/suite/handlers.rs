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

/// `work` without retries, whose dead letters hold their key (sequenced
/// dead letters): a key's later messages wait for a release.
#[handler(
    idempotency_key = job.id,
    retry = none,
    terminal = JobError::Terminal(_),
    on_dead_letter = hold_key,
)]
pub async fn holds_key(job: Job, tx: &mut SuiteTx, ctx: &MessageContext) -> Result<(), JobError> {
    support::behave(&job, ctx).await?;
    SuiteHarness::insert_effect(tx, "holds_key", &job, ctx.message_id()).await?;
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

/// The handlers of the suite's router: one per event type of an order,
/// and one that takes two types. Each has its own name (dedup scope) and
/// retry policy; `placed` has terminal errors, `paid` none.
#[handler(
    event_type = "OrderPlaced",
    idempotency_key = job.id,
    retry = exponential(base = "10ms", max_delay = "100ms", attempts = 3),
    terminal = JobError::Terminal(_),
)]
pub async fn placed(job: Job, tx: &mut SuiteTx, ctx: &MessageContext) -> Result<(), JobError> {
    support::behave(&job, ctx).await?;
    SuiteHarness::insert_effect(tx, "placed", &job, ctx.message_id()).await?;
    Ok(())
}

#[handler(
    event_type = "OrderPaid",
    idempotency_key = job.id,
    retry = exponential(base = "10ms", max_delay = "100ms", attempts = 5),
)]
pub async fn paid(job: Job, tx: &mut SuiteTx, ctx: &MessageContext) -> Result<(), JobError> {
    support::behave(&job, ctx).await?;
    SuiteHarness::insert_effect(tx, "paid", &job, ctx.message_id()).await?;
    Ok(())
}

#[handler(
    event_type = ["OrderShipped", "OrderDelivered"],
    idempotency_key = job.id,
    retry = exponential(base = "10ms", max_delay = "100ms", attempts = 3),
)]
pub async fn shipping(job: Job, tx: &mut SuiteTx, ctx: &MessageContext) -> Result<(), JobError> {
    support::behave(&job, ctx).await?;
    SuiteHarness::insert_effect(tx, "shipping", &job, ctx.message_id()).await?;
    Ok(())
}

/// The event types of an order in the order they happen, and the handler
/// of each.
pub const ORDER_EVENTS: [(&str, &str); 4] = [
    ("OrderPlaced", "placed"),
    ("OrderPaid", "paid"),
    ("OrderShipped", "shipping"),
    ("OrderDelivered", "shipping"),
];

/// The suite's router.
pub fn orders_router(ignore_unknown: bool) -> consumer::Router<crate::suite::cases::SuiteStore> {
    let builder = consumer::Router::builder("orders")
        .route(placed)
        .route(paid)
        .route(shipping);
    let builder = if ignore_unknown {
        builder.ignore_unknown_types()
    } else {
        builder
    };
    builder.build().expect("a valid router")
}

/// The workhorse in batches: one effect per message, marked failures for
/// the misbehaving ones, and each call's batch size logged by job id.
pub struct BatchWork;

/// The batch workhorse in its `#[handler(batch)]` form, which says nothing
/// about whose failure it returns: the first one of its batch, as `?`
/// gives it. The batcher narrows the batch down to that message, and
/// `terminal` classifies the error there.
#[handler(
    batch,
    name = "batch-macro",
    idempotency_key = |job| job.id,
    retry = exponential(base = "10ms", max_delay = "200ms", attempts = 4),
    terminal = JobError::Terminal(_),
)]
pub async fn batch_unattributed(
    jobs: &mut consumer::batch::Batch<Job>,
    tx: &mut SuiteTx,
) -> Result<(), JobError> {
    let len = jobs.len();
    for (_, item) in jobs.iter() {
        let job = item.message();
        log_batch_size(&job.id, len);
        support::behave(job, item.context()).await?;
        SuiteHarness::insert_effect(tx, "batch-macro", job, item.context().message_id()).await?;
    }
    Ok(())
}

/// The size of the batch each call of a job ran in, by job id.
pub fn batch_sizes(job_id: &str) -> Vec<usize> {
    batch_log()
        .lock()
        .expect("log")
        .get(job_id)
        .cloned()
        .unwrap_or_default()
}

fn log_batch_size(job_id: &str, len: usize) {
    batch_log()
        .lock()
        .expect("log")
        .entry(job_id.to_owned())
        .or_default()
        .push(len);
}

fn batch_log() -> &'static std::sync::Mutex<std::collections::HashMap<String, Vec<usize>>> {
    static LOG: std::sync::OnceLock<
        std::sync::Mutex<std::collections::HashMap<String, Vec<usize>>>,
    > = std::sync::OnceLock::new();
    LOG.get_or_init(Default::default)
}

impl consumer::batch::BatchHandler<crate::suite::cases::SuiteStore> for BatchWork {
    type Message = Job;

    fn name(&self) -> &'static str {
        "batch"
    }

    fn retry_policy(&self) -> consumer::RetryPolicy {
        consumer::RetryPolicy::exponential(
            std::time::Duration::from_millis(10),
            std::time::Duration::from_millis(200),
            4,
        )
    }

    fn idempotency_key(&self, job: &Job, _: &MessageContext) -> String {
        job.id.clone()
    }

    async fn handle_batch(
        &self,
        batch: &mut consumer::batch::Batch<Job>,
        tx: &mut SuiteTx,
    ) -> Result<(), consumer::BoxError> {
        let mut failures = Vec::new();
        for (i, item) in batch.iter() {
            let job = item.message();
            log_batch_size(&job.id, batch.len());
            match support::behave(job, item.context()).await {
                Ok(()) => {
                    SuiteHarness::insert_effect(tx, "batch", job, item.context().message_id())
                        .await?;
                }
                Err(e) => failures.push((i, e)),
            }
        }
        for (i, e) in failures {
            match e {
                JobError::Terminal(_) => batch.fail_terminal(i, e),
                e => batch.fail(i, e),
            }
        }
        Ok(())
    }
}
