//! The queue's own promises, written once over the database and run by
//! `queue_postgres.rs` and `queue_sqlite.rs`: a rolled-back enqueue leaves
//! no job, a lease that ends hands its job to another worker, and each
//! key's jobs run in order while keys run in parallel.

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use consumer_core::source::{Acker, Source};
use consumer_core::{Envelope, Message};
use consumer_jobs::{Enqueued, Job, JobDatabase, JobSource, Jobs, Recurring};
use sqlx::Pool;

/// Every wait in these tests ends within this, or the test fails.
pub const WITHIN: Duration = Duration::from_secs(20);

pub async fn within<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(WITHIN, f)
        .await
        .unwrap_or_else(|_| panic!("not done within {WITHIN:?}"))
}

pub async fn next<DB: JobDatabase>(
    source: &mut JobSource<DB>,
) -> (Arc<Envelope>, consumer_jobs::JobAcker<DB>) {
    within(source.recv())
        .await
        .unwrap_or_else(|e| panic!("recv: {e}"))
        .unwrap_or_else(|| panic!("the source closed"))
}

fn job(key: &str, n: u32) -> Message {
    Message::json("Step", &serde_json::json!({ "key": key, "n": n }))
        .unwrap_or_else(|e| panic!("{e}"))
        .with_key(key)
}

fn step_of(envelope: &Envelope) -> (String, u32) {
    let v: serde_json::Value =
        serde_json::from_slice(&envelope.payload).unwrap_or_else(|e| panic!("{e}"));
    let key = v["key"].as_str().unwrap_or_default().to_owned();
    let n = v["n"]
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(u32::MAX);
    (key, n)
}

pub async fn an_enqueue_rolled_back_with_its_transaction_leaves_no_job<DB: JobDatabase>(
    pool: Pool<DB>,
) {
    let jobs = Jobs::new("rollback");
    let mut tx = pool.begin().await.unwrap_or_else(|e| panic!("{e}"));
    jobs.enqueue(&mut tx, job("k", 1))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    tx.rollback().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        jobs.pending(&pool).await.unwrap_or_else(|e| panic!("{e}")),
        0
    );

    let mut tx = pool.begin().await.unwrap_or_else(|e| panic!("{e}"));
    let id = jobs
        .enqueue(&mut tx, job("k", 2))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    tx.commit().await.unwrap_or_else(|e| panic!("{e}"));
    jobs.notify(&pool).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        jobs.pending(&pool).await.unwrap_or_else(|e| panic!("{e}")),
        1
    );

    let mut source = jobs.source(pool.clone());
    let channels = source
        .channels()
        .unwrap_or_else(|| panic!("the source's channels"));
    assert_eq!(channels.input.address, "rollback");
    let (envelope, acker) = next(&mut source).await;
    assert_eq!(Some(envelope.id.as_str()), id.id());
    assert_eq!(
        step_of(&envelope),
        ("k".to_owned(), 2),
        "only the committed job"
    );
    assert_eq!((envelope.attempt, envelope.key.as_deref()), (1, Some("k")));
    acker.ack().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        jobs.pending(&pool).await.unwrap_or_else(|e| panic!("{e}")),
        0,
        "an ack deletes the job"
    );
    source.close().await;
}

pub async fn a_worker_whose_lease_ended_gives_its_job_to_another<DB: JobDatabase>(pool: Pool<DB>) {
    let jobs = Jobs::new("lease");
    let lease = Duration::from_millis(300);
    jobs.enqueue_now(&pool, job("k", 1))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut first = jobs.source(pool.clone()).with_lease(lease);
    let (taken, stale) = next(&mut first).await;

    // While the first worker's heartbeat renews its lease (several leases
    // long), nobody else gets the job.
    let mut second = jobs
        .source(pool.clone())
        .with_lease(lease)
        .with_poll_interval(Duration::from_millis(20));
    let waited = tokio::time::timeout(lease * 4, second.recv()).await;
    assert!(waited.is_err(), "a renewed lease keeps the job");

    // The first worker dies: no heartbeat any more, no settle.
    drop(first);
    let (again, acker) = next(&mut second).await;
    assert_eq!(again.id, taken.id, "the same job, delivered again");

    // The dead worker's late ack touches nothing of the new delivery.
    stale.ack().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        jobs.pending(&pool).await.unwrap_or_else(|e| panic!("{e}")),
        1
    );
    acker.ack().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        jobs.pending(&pool).await.unwrap_or_else(|e| panic!("{e}")),
        0
    );
    second.close().await;
}

/// What the workers saw: per key the steps in the order they started, the
/// keys running now, and the most keys that ran at once.
#[derive(Default)]
struct Seen {
    order: HashMap<String, Vec<u32>>,
    running: HashSet<String>,
    most_at_once: usize,
    done: usize,
}

pub async fn per_key_order_holds_with_many_keys_in_parallel<DB: JobDatabase>(
    pool: Pool<DB>,
    workers: usize,
) {
    const KEYS: u32 = 20;
    const STEPS: u32 = 8;
    let jobs = Jobs::new("order");
    let publisher = jobs.publisher(pool.clone());
    // Interleaved, in one batch per step: every key's step n before its n+1.
    for n in 0..STEPS {
        let batch: Vec<_> = (0..KEYS)
            .map(|k| consumer_core::Outgoing {
                destination: "order".into(),
                message: job(&format!("key-{k}"), n),
            })
            .collect();
        for r in consumer_core::Publisher::publish(&publisher, &batch).await {
            r.unwrap_or_else(|e| panic!("{e}"));
        }
    }
    let seen = Arc::new(Mutex::new(Seen::default()));
    // The first two jobs taken wait for each other: they meet only if two
    // keys run at once (a queue that ran keys one at a time fails here).
    let rendezvous = Arc::new(tokio::sync::Barrier::new(2));
    let taken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let total = usize::try_from(KEYS * STEPS).unwrap_or(usize::MAX);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..workers {
        let mut source = jobs
            .source(pool.clone())
            .with_batch_size(4)
            .with_poll_interval(Duration::from_millis(20));
        let seen = Arc::clone(&seen);
        let (rendezvous, taken) = (Arc::clone(&rendezvous), Arc::clone(&taken));
        tasks.spawn(async move {
            loop {
                if seen.lock().unwrap_or_else(|e| e.into_inner()).done >= total {
                    break;
                }
                let Ok(Ok(Some((envelope, acker)))) =
                    tokio::time::timeout(Duration::from_millis(200), source.recv()).await
                else {
                    continue;
                };
                let (key, n) = step_of(&envelope);
                {
                    let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
                    assert!(s.running.insert(key.clone()), "{key} ran twice at once");
                    s.most_at_once = s.most_at_once.max(s.running.len());
                    s.order.entry(key.clone()).or_default().push(n);
                }
                if taken.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 2 {
                    within(rendezvous.wait()).await;
                }
                tokio::task::yield_now().await;
                {
                    let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
                    s.running.remove(&key);
                    s.done += 1;
                }
                acker.ack().await.unwrap_or_else(|e| panic!("{e}"));
            }
            source.close().await;
        });
    }
    within(async {
        while let Some(r) = tasks.join_next().await {
            r.unwrap_or_else(|e| panic!("a worker failed: {e}"));
        }
    })
    .await;
    assert_eq!(
        jobs.pending(&pool).await.unwrap_or_else(|e| panic!("{e}")),
        0
    );
    let s = seen.lock().unwrap_or_else(|e| e.into_inner());
    let in_order: Vec<u32> = (0..STEPS).collect();
    for k in 0..KEYS {
        assert_eq!(s.order.get(&format!("key-{k}")), Some(&in_order), "key-{k}");
    }
    assert!(
        s.most_at_once > 1,
        "keys ran one at a time: {}",
        s.most_at_once
    );
}

fn unkeyed(n: u32) -> Message {
    Message::json("Step", &serde_json::json!({ "key": "", "n": n }))
        .unwrap_or_else(|e| panic!("{e}"))
}

pub async fn a_scheduled_job_waits_until_due_and_higher_priorities_go_first<DB: JobDatabase>(
    pool: Pool<DB>,
) {
    let jobs = Jobs::new("scheduled");
    let delay = Duration::from_millis(800);
    let enqueued_at = std::time::Instant::now();
    let later = Job::new(unkeyed(1)).with_due(delay).with_priority(100);
    jobs.enqueue_now(&pool, later)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    jobs.enqueue_now(&pool, unkeyed(2))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let urgent = Job::new(unkeyed(3)).with_priority(9);
    jobs.enqueue_now(&pool, urgent)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let past = time::OffsetDateTime::now_utc() - Duration::from_secs(60);
    let overdue = Job::new(unkeyed(4)).with_due(past);
    jobs.enqueue_now(&pool, overdue)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let mut source = jobs
        .source(pool.clone())
        .with_batch_size(1)
        .with_poll_interval(Duration::from_millis(20));
    let mut order = Vec::new();
    for _ in 0..4 {
        let (envelope, acker) = next(&mut source).await;
        let n = step_of(&envelope).1;
        if n == 1 {
            assert!(
                enqueued_at.elapsed() >= delay - Duration::from_millis(50),
                "a job due in {delay:?} ran after {:?}",
                enqueued_at.elapsed()
            );
        }
        order.push(n);
        acker.ack().await.unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(
        order,
        [3, 4, 2, 1],
        "priority first, then due time (the overdue one before the one due now); a job not due waits whatever its priority"
    );
    source.close().await;
}

pub async fn a_unique_job_is_written_once_while_pending<DB: JobDatabase>(pool: Pool<DB>) {
    let jobs = Jobs::new("unique");
    let unique = |n| Job::new(unkeyed(n)).unique_while_pending("digest-7");
    let first = jobs
        .enqueue_now(&pool, unique(1))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(first.id().is_some(), "{first:?}");
    let again = jobs
        .enqueue_now(&pool, unique(2))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again, Enqueued::AlreadyPending);
    let other = Jobs::new("elsewhere");
    let elsewhere = other
        .enqueue_now(&pool, unique(3))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(elsewhere.id().is_some(), "unique per queue: {elsewhere:?}");

    let mut source = jobs.source(pool.clone());
    let (envelope, acker) = next(&mut source).await;
    assert_eq!(step_of(&envelope).1, 1);
    let running = jobs
        .enqueue_now(&pool, unique(4))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        running,
        Enqueued::AlreadyPending,
        "a running job is pending"
    );
    acker.ack().await.unwrap_or_else(|e| panic!("{e}"));
    let after = jobs
        .enqueue_now(&pool, unique(5))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        after.id().is_some(),
        "the key is free once the job is done: {after:?}"
    );
    source.close().await;
}

pub async fn close_gives_back_what_was_claimed_and_not_handed_out<DB: JobDatabase>(pool: Pool<DB>) {
    let jobs = Jobs::new("close");
    for n in 0..5 {
        jobs.enqueue_now(&pool, unkeyed(n))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    // A lease far longer than the test: only a release gives jobs back.
    let lease = Duration::from_secs(600);
    let mut first = jobs
        .source(pool.clone())
        .with_batch_size(5)
        .with_lease(lease);
    let (_running, acker) = next(&mut first).await;
    first.close().await;

    let mut second = jobs
        .source(pool.clone())
        .with_lease(lease)
        .with_poll_interval(Duration::from_millis(20));
    let mut rest = Vec::new();
    for _ in 0..4 {
        let (envelope, a) = next(&mut second).await;
        rest.push(step_of(&envelope).1);
        a.ack().await.unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(
        rest.len(),
        4,
        "the four never handed out came back at close"
    );
    assert_eq!(
        jobs.pending(&pool).await.unwrap_or_else(|e| panic!("{e}")),
        1,
        "the running one is held"
    );
    acker.release().await.unwrap_or_else(|e| panic!("{e}"));
    let (envelope, a) = next(&mut second).await;
    assert!(
        !rest.contains(&step_of(&envelope).1),
        "the released one, once"
    );
    a.ack().await.unwrap_or_else(|e| panic!("{e}"));
    second.close().await;
}

pub async fn a_retry_reschedules_the_job_with_its_attempt_and_error<DB: JobDatabase>(
    pool: Pool<DB>,
) {
    use consumer_core::sql::{Columns, Statement};
    static ROW: Statement = Statement::new("SELECT attempt, last_error FROM consumer_jobs");

    let jobs = Jobs::new("retry");
    jobs.enqueue_now(&pool, job("k", 1))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut source = jobs
        .source(pool.clone())
        .with_poll_interval(Duration::from_millis(20));
    let (envelope, mut acker) = next(&mut source).await;
    let delay = Duration::from_millis(400);
    let copy = consumer_core::backend::RetryCopy::new(
        &envelope,
        2,
        time::OffsetDateTime::now_utc(),
        delay,
    )
    .with_error("the partner timed out");
    let retried_at = std::time::Instant::now();
    acker
        .publish_retry(&copy)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    acker.ack().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        jobs.pending(&pool).await.unwrap_or_else(|e| panic!("{e}")),
        1,
        "the ack after a retry leaves the rescheduled job"
    );
    let mut conn = pool.acquire().await.unwrap_or_else(|e| panic!("{e}"));
    let row = DB::fetch_optional(&mut conn, ROW.sql::<DB>(), &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("the job's row"));
    let mut c = Columns::<DB>::of(&row);
    let attempt = c.int().unwrap_or_else(|e| panic!("{e}"));
    let error = c.maybe_text().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (attempt, error.as_deref()),
        (2, Some("the partner timed out"))
    );
    drop(conn);

    let (again, acker) = next(&mut source).await;
    assert!(
        retried_at.elapsed() >= delay - Duration::from_millis(50),
        "retried after {:?}, before its delay",
        retried_at.elapsed()
    );
    assert_eq!(
        (again.id.as_str(), again.attempt),
        (envelope.id.as_str(), 2)
    );
    acker.ack().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        jobs.pending(&pool).await.unwrap_or_else(|e| panic!("{e}")),
        0
    );
    source.close().await;
}

pub async fn the_gauges_count_ready_waiting_and_running_jobs<DB: JobDatabase>(pool: Pool<DB>) {
    use consumer_core::backend::{QueueRole, SourceReadings};
    let jobs = Jobs::new("gauges");
    for n in 0..2 {
        jobs.enqueue_now(&pool, unkeyed(n))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let later = Job::new(unkeyed(9)).with_due(Duration::from_secs(3600));
    jobs.enqueue_now(&pool, later)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Due an hour ago, last in priority: the oldest ready job.
    let hour_ago = time::OffsetDateTime::now_utc() - Duration::from_secs(3600);
    let overdue = Job::new(unkeyed(8)).with_due(hour_ago).with_priority(-1);
    jobs.enqueue_now(&pool, overdue)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut source = jobs.source(pool.clone()).with_batch_size(1);
    let gauges = source
        .gauges()
        .unwrap_or_else(|| panic!("the source has gauges"));
    let mut before = SourceReadings::default();
    gauges.observe(&mut before);
    assert!(
        before.queues_read().is_empty(),
        "nothing counted, nothing read"
    );

    let (_running, acker) = next(&mut source).await;
    let backlog = source
        .read_backlog()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (
            backlog.ready,
            backlog.waiting,
            backlog.retrying,
            backlog.running
        ),
        (2, 1, 0, 1)
    );
    assert!(
        backlog.oldest_ready >= Duration::from_secs(3600),
        "{:?}",
        backlog.oldest_ready
    );
    let mut readings = SourceReadings::default();
    gauges.observe(&mut readings);
    let read: Vec<(QueueRole, u64)> = readings
        .queues_read()
        .iter()
        .map(|q| (q.role, q.depth))
        .collect();
    assert_eq!(
        read,
        [
            (QueueRole::Work, 2),
            (QueueRole::Delay, 0),
            (QueueRole::Scheduled, 1),
            (QueueRole::InFlight, 1)
        ]
    );
    let oldest = readings.oldest_read();
    assert_eq!(oldest.len(), 1);
    assert_eq!(&*oldest[0].0, "gauges");
    assert!(oldest[0].1 >= Duration::from_secs(3600), "{oldest:?}");
    acker.ack().await.unwrap_or_else(|e| panic!("{e}"));
    source.close().await;
}

fn period_of(envelope: &Envelope) -> String {
    envelope
        .headers
        .get(consumer_jobs::PERIOD_HEADER)
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("a recurring job carries its period"))
        .to_owned()
}

/// 2026-01-01T10:00:30Z plus `secs`.
fn at(secs: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(1_767_261_630 + secs)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A tick enqueues the latest period that has started, once across
/// instances; after a gap only the latest missed period runs, and a tick
/// from a clock behind the last period enqueued writes nothing.
pub async fn a_missed_period_runs_once_for_the_latest_only<DB: JobDatabase>(pool: Pool<DB>) {
    let minutely = Recurring::new("minutely", "* * * * *", Message::raw(&b"{}"[..]))
        .unwrap_or_else(|e| panic!("{e}"));
    let jobs = Jobs::new("missed");
    let (a, b) = (
        jobs.scheduler(pool.clone()).with(minutely.clone()),
        Jobs::new("missed").scheduler(pool.clone()).with(minutely),
    );
    let tick = async |s: &consumer_jobs::Scheduler<DB>, t: time::OffsetDateTime| {
        s.tick_at(t)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .into_iter()
            .map(|f| f.period)
            .collect::<Vec<time::OffsetDateTime>>()
    };
    assert_eq!(tick(&a, at(0)).await, vec![at(-30)], "10:00 starts");
    assert_eq!(
        tick(&b, at(0)).await,
        Vec::<time::OffsetDateTime>::new(),
        "another instance: taken"
    );
    assert_eq!(
        tick(&a, at(15)).await,
        Vec::<time::OffsetDateTime>::new(),
        "the same period"
    );
    // Down from 10:00:45 to 10:05:30: 10:01 to 10:04 are missed.
    assert_eq!(tick(&b, at(300)).await, vec![at(270)], "only 10:05");
    assert_eq!(
        tick(&a, at(180)).await,
        Vec::<time::OffsetDateTime>::new(),
        "a clock behind: nothing"
    );
    assert_eq!(
        jobs.pending(&pool).await.unwrap_or_else(|e| panic!("{e}")),
        2
    );
    let mut source = jobs.source(pool.clone());
    let mut periods = Vec::new();
    for _ in 0..2 {
        let (envelope, acker) = next(&mut source).await;
        assert!(
            envelope.id.starts_with("missed:minutely:"),
            "{}",
            envelope.id
        );
        periods.push(period_of(&envelope));
        acker.ack().await.unwrap_or_else(|e| panic!("{e}"));
    }
    periods.sort();
    assert_eq!(periods, ["2026-01-01T10:00:00Z", "2026-01-01T10:05:00Z"]);
    source.close().await;
}

/// Three instances run the same every-second schedule over several
/// periods: each period's job is enqueued, and run, exactly once.
pub async fn three_schedulers_enqueue_one_job_per_period<DB: JobDatabase>(pool: Pool<DB>) {
    const PERIODS: usize = 4;
    let tick = Message::json("Tick", &serde_json::json!({})).unwrap_or_else(|e| panic!("{e}"));
    let every_second =
        Recurring::new("tick", "* * * * * *", tick).unwrap_or_else(|e| panic!("{e}"));
    let instances: Vec<_> = (0..3)
        .map(|_| {
            Jobs::new("cron")
                .scheduler(pool.clone())
                .with(every_second.clone())
                .spawn()
        })
        .collect();
    let jobs = Jobs::new("cron");
    let mut source = jobs
        .source(pool.clone())
        .with_poll_interval(Duration::from_millis(50));
    let mut runs: HashMap<String, usize> = HashMap::new();
    let take = async |source: &mut JobSource<DB>| {
        let (envelope, acker) = next(source).await;
        acker.ack().await.unwrap_or_else(|e| panic!("{e}"));
        period_of(&envelope)
    };
    while runs.len() < PERIODS {
        *runs.entry(take(&mut source).await).or_default() += 1;
    }
    for instance in instances {
        instance.stop().await;
    }
    // What the instances enqueued before they stopped, run to the end.
    while jobs.pending(&pool).await.unwrap_or_else(|e| panic!("{e}")) > 0 {
        *runs.entry(take(&mut source).await).or_default() += 1;
    }
    source.close().await;
    assert!(runs.len() >= PERIODS, "{runs:?}");
    let twice: Vec<_> = runs.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "periods run more than once: {twice:?}");
}

/// An operator's view: jobs by queue and state, one shown in full, a
/// scheduled one made due now, one cancelled; a running one is left alone.
pub async fn an_operator_lists_shows_retries_and_cancels_jobs<DB: JobDatabase>(pool: Pool<DB>) {
    use consumer_jobs::{Changed, JobQueues, JobState};
    let ok = |e: consumer_core::Error| -> ! { panic!("{e}") };
    let (mail, bills) = (Jobs::new("ops-mail"), Jobs::new("ops-bills"));
    let later = Job::new(job("a", 1)).with_due(Duration::from_secs(3600));
    let later = mail
        .enqueue_now(&pool, later)
        .await
        .unwrap_or_else(|e| ok(e));
    let now = mail
        .enqueue_now(&pool, job("b", 1))
        .await
        .unwrap_or_else(|e| ok(e));
    let bill = bills
        .enqueue_now(&pool, job("c", 1))
        .await
        .unwrap_or_else(|e| ok(e));
    let id = |e: &Enqueued| e.id().unwrap_or_else(|| panic!("written")).to_owned();
    let (later, now, bill) = (id(&later), id(&now), id(&bill));
    let queues = JobQueues::new(pool.clone());
    let list = async |queue, state| {
        queues
            .list(queue, state, 0, 100)
            .await
            .unwrap_or_else(|e| ok(e))
            .into_iter()
            .map(|j| (j.id, j.state))
            .collect::<Vec<_>>()
    };
    assert_eq!(list(None, None).await.len(), 3);
    assert_eq!(
        list(Some("ops-mail"), None).await,
        [
            (later.clone(), JobState::Scheduled),
            (now.clone(), JobState::Ready)
        ]
    );
    assert_eq!(
        list(None, Some(JobState::Ready)).await,
        [
            (now.clone(), JobState::Ready),
            (bill.clone(), JobState::Ready)
        ]
    );

    let shown = queues.show(&later).await.unwrap_or_else(|e| ok(e));
    assert_eq!(shown.len(), 1);
    assert_eq!(shown[0].info.key.as_deref(), Some("a"));
    assert_eq!(step_of_payload(&shown[0].payload), ("a".to_owned(), 1));
    assert!(shown[0].headers.contains("ce_id"), "{}", shown[0].headers);

    // A running job is neither made due nor cancelled.
    let mut source = bills.source(pool.clone());
    let (_, acker) = next(&mut source).await;
    let cancel = queues.cancel("ops-bills", &bill).await;
    assert_eq!(cancel.unwrap_or_else(|e| ok(e)), Changed::Running);
    acker.ack().await.unwrap_or_else(|e| panic!("{e}"));
    source.close().await;

    let retried = queues.retry_now("ops-mail", &later).await;
    assert_eq!(retried.unwrap_or_else(|e| ok(e)), Changed::Done);
    assert_eq!(
        list(Some("ops-mail"), Some(JobState::Ready)).await.len(),
        2,
        "the scheduled job is due now"
    );
    let again = queues.retry_now("ops-mail", &later).await;
    assert_eq!(
        again.unwrap_or_else(|e| ok(e)),
        Changed::NotFound,
        "due already"
    );
    let cancelled = queues.cancel("ops-mail", &now).await;
    assert_eq!(cancelled.unwrap_or_else(|e| ok(e)), Changed::Done);
    assert_eq!(
        list(Some("ops-mail"), None).await,
        [(later, JobState::Ready)]
    );
    let gone = queues.cancel("ops-mail", &now).await;
    assert_eq!(gone.unwrap_or_else(|e| ok(e)), Changed::NotFound);

    // A job waiting an hour to retry: listed and counted as retrying, then
    // made due now.
    bills
        .enqueue_now(&pool, job("d", 1))
        .await
        .unwrap_or_else(|e| ok(e));
    let mut source = bills.source(pool.clone());
    let (envelope, mut acker) = next(&mut source).await;
    let hour = Duration::from_secs(3600);
    let copy =
        consumer_core::backend::RetryCopy::new(&envelope, 2, time::OffsetDateTime::now_utc(), hour);
    acker
        .publish_retry(&copy)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    acker.ack().await.unwrap_or_else(|e| panic!("{e}"));
    let retrying = list(Some("ops-bills"), Some(JobState::Retrying)).await;
    assert_eq!(retrying, [(envelope.id.clone(), JobState::Retrying)]);
    let backlog = source.read_backlog().await.unwrap_or_else(|e| ok(e));
    assert_eq!((backlog.waiting, backlog.retrying), (1, 1));
    let retried = queues.retry_now("ops-bills", &envelope.id).await;
    assert_eq!(retried.unwrap_or_else(|e| ok(e)), Changed::Done);
    let (again, acker) = next(&mut source).await;
    assert_eq!(
        (again.id.as_str(), again.attempt),
        (envelope.id.as_str(), 2)
    );
    acker.ack().await.unwrap_or_else(|e| panic!("{e}"));
    source.close().await;
}

fn step_of_payload(payload: &[u8]) -> (String, u32) {
    let v: serde_json::Value = serde_json::from_slice(payload).unwrap_or_else(|e| panic!("{e}"));
    let key = v["key"].as_str().unwrap_or_default().to_owned();
    let n = v["n"].as_u64().and_then(|n| u32::try_from(n).ok());
    (key, n.unwrap_or(u32::MAX))
}

/// A paused queue's jobs are not claimed; other queues' are; once resumed
/// the waiting worker takes its job (woken by the resume).
pub async fn a_paused_queue_is_not_claimed_until_resumed<DB: JobDatabase>(pool: Pool<DB>) {
    use consumer_jobs::JobQueues;
    let queues = JobQueues::new(pool.clone());
    let (paused, other) = (Jobs::new("paused"), Jobs::new("not-paused"));
    let pause = queues.pause("paused", "ops", "migration").await;
    assert!(pause.unwrap_or_else(|e| panic!("{e}")));
    let again = queues.pause("paused", "someone", "else").await;
    assert!(!again.unwrap_or_else(|e| panic!("{e}")), "paused already");
    let listed = queues.paused().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (
            listed[0].queue.as_str(),
            listed[0].by.as_str(),
            listed[0].reason.as_str()
        ),
        ("paused", "ops", "migration")
    );
    for jobs in [&paused, &other] {
        jobs.enqueue_now(&pool, job("k", 1))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let mut source = other.source(pool.clone());
    let (_, acker) = next(&mut source).await;
    acker.ack().await.unwrap_or_else(|e| panic!("{e}"));
    source.close().await;

    // A claim of the paused queue finds nothing: a worker polling it
    // several times over gets no job.
    let mut waiting = paused
        .source(pool.clone())
        .with_poll_interval(Duration::from_millis(20));
    let none = tokio::time::timeout(Duration::from_millis(300), waiting.recv()).await;
    assert!(none.is_err(), "a paused queue's job was claimed");
    assert_eq!(
        paused
            .pending(&pool)
            .await
            .unwrap_or_else(|e| panic!("{e}")),
        1
    );
    let resumed = queues.resume("paused").await;
    assert!(resumed.unwrap_or_else(|e| panic!("{e}")));
    let (_, acker) = next(&mut waiting).await;
    acker.ack().await.unwrap_or_else(|e| panic!("{e}"));
    waiting.close().await;
    let not_paused = queues.resume("paused").await;
    assert!(!not_paused.unwrap_or_else(|e| panic!("{e}")));
}

/// A job unique for a window is written once within it, pending or
/// finished; a rolled-back enqueue takes no key; an ended window frees the
/// key, and the store's purge deletes it.
pub async fn a_job_unique_for_a_window_is_written_once_within_it<DB: JobDatabase>(pool: Pool<DB>) {
    use consumer_core::store::StoreExtension;
    let jobs = Jobs::new("window");
    let hour = Duration::from_secs(3600);
    let digest = |n| Job::new(job("ada", n)).unique_for("digest/ada", hour);
    let first = jobs.enqueue_now(&pool, digest(1)).await;
    assert!(first.unwrap_or_else(|e| panic!("{e}")).id().is_some());
    let pending = jobs.enqueue_now(&pool, digest(2)).await;
    assert_eq!(
        pending.unwrap_or_else(|e| panic!("{e}")),
        Enqueued::WithinWindow
    );
    let mut source = jobs.source(pool.clone());
    let (_, acker) = next(&mut source).await;
    acker.ack().await.unwrap_or_else(|e| panic!("{e}"));
    source.close().await;
    assert_eq!(
        jobs.pending(&pool).await.unwrap_or_else(|e| panic!("{e}")),
        0
    );
    let finished = jobs.enqueue_now(&pool, digest(3)).await;
    assert_eq!(
        finished.unwrap_or_else(|e| panic!("{e}")),
        Enqueued::WithinWindow,
        "finished, still within its window"
    );

    let other = || Job::new(job("bob", 1)).unique_for("digest/bob", hour);
    let mut tx = pool.begin().await.unwrap_or_else(|e| panic!("{e}"));
    let taken = jobs.enqueue(&mut tx, other()).await;
    assert!(taken.unwrap_or_else(|e| panic!("{e}")).id().is_some());
    tx.rollback().await.unwrap_or_else(|e| panic!("{e}"));
    let after_rollback = jobs.enqueue_now(&pool, other()).await;
    assert!(
        after_rollback
            .unwrap_or_else(|e| panic!("{e}"))
            .id()
            .is_some(),
        "a rollback takes no key"
    );

    // A window of zero has ended as soon as it began.
    let ended = || Job::new(job("cy", 1)).unique_for("digest/cy", Duration::ZERO);
    for _ in 0..2 {
        let written = jobs.enqueue_now(&pool, ended()).await;
        assert!(written.unwrap_or_else(|e| panic!("{e}")).id().is_some());
    }
    let purged = consumer_jobs::JobTables.purge_batch(&pool, 0, 100).await;
    assert_eq!(
        purged.unwrap_or_else(|e| panic!("{e}")),
        1,
        "only the ended window"
    );
    let still = jobs.enqueue_now(&pool, digest(4)).await;
    assert_eq!(
        still.unwrap_or_else(|e| panic!("{e}")),
        Enqueued::WithinWindow
    );
}
