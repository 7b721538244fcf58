//! The queue's own tests on PostgreSQL (needs PostgreSQL: `DATABASE_URL`,
//! default postgres://postgres@127.0.0.1:5432/test; `scripts/services
//! postgres` starts it). Each test works in a fresh schema.

mod queue;

async fn pool() -> sqlx::PgPool {
    let fresh = consumer_core::testing::FreshSchema::create("jobs", 12)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    consumer_jobs::migrate(&fresh.pool)
        .await
        .unwrap_or_else(|e| panic!("migrating consumer_jobs: {e}"));
    fresh.pool
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_rolled_back_with_its_transaction_leaves_no_job() {
    queue::an_enqueue_rolled_back_with_its_transaction_leaves_no_job(pool().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_lease_ended_gives_its_job_to_another() {
    queue::a_worker_whose_lease_ended_gives_its_job_to_another(pool().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_key_order_holds_with_many_keys_in_parallel() {
    queue::per_key_order_holds_with_many_keys_in_parallel(pool().await, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_job_waits_until_due_and_higher_priorities_go_first() {
    queue::a_scheduled_job_waits_until_due_and_higher_priorities_go_first(pool().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unique_job_is_written_once_while_pending() {
    queue::a_unique_job_is_written_once_while_pending(pool().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_gives_back_what_was_claimed_and_not_handed_out() {
    queue::close_gives_back_what_was_claimed_and_not_handed_out(pool().await).await;
}

/// A job enqueued through another handle (another process: no in-process
/// wake-up reaches this worker) starts through `LISTEN/NOTIFY`, long before
/// the worker's poll interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_enqueued_elsewhere_wakes_a_listening_worker_at_once() {
    use consumer_core::source::Source;
    let pool = pool().await;
    let (here, elsewhere) = (
        consumer_jobs::Jobs::new("wake"),
        consumer_jobs::Jobs::new("wake"),
    );
    let poll = std::time::Duration::from_secs(60);
    let first = consumer_core::Message::raw(&b"{}"[..]);
    elsewhere
        .enqueue_now(&pool, first)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut source = here.source(pool.clone()).with_poll_interval(poll);
    // The first receive starts the listener, then finds the job there.
    let (_, acker) = queue::next(&mut source).await;
    consumer_core::source::Acker::ack(acker)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let waiting = tokio::spawn(async move {
        let received = source.recv().await;
        (received.map(|r| r.is_some()), std::time::Instant::now())
    });
    let second = consumer_core::Message::raw(&b"{}"[..]);
    let sent = std::time::Instant::now();
    elsewhere
        .enqueue_now(&pool, second)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (received, at) = queue::within(waiting)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(received, Ok(true)));
    let took = at.duration_since(sent);
    assert!(
        took < std::time::Duration::from_secs(5),
        "woken after {took:?}, not by NOTIFY"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_reschedules_the_job_with_its_attempt_and_error() {
    queue::a_retry_reschedules_the_job_with_its_attempt_and_error(pool().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gauges_count_ready_waiting_and_running_jobs() {
    queue::the_gauges_count_ready_waiting_and_running_jobs(pool().await).await;
}

/// A job enqueued by a handle that notifies from inside the transaction
/// wakes a listening worker when that transaction commits, with no
/// `notify` after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_notified_from_its_transaction_wakes_a_worker_at_commit() {
    use consumer_core::source::{Acker, Source};
    let pool = pool().await;
    let here = consumer_jobs::Jobs::new("in-tx");
    let writer = consumer_jobs::Jobs::new("in-tx").with_notify_in_transaction();
    let poll = std::time::Duration::from_secs(60);
    writer
        .enqueue_now(&pool, consumer_core::Message::raw(&b"{}"[..]))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut source = here.source(pool.clone()).with_poll_interval(poll);
    let (_, acker) = queue::next(&mut source).await; // the listener is up
    acker.ack().await.unwrap_or_else(|e| panic!("{e}"));

    let waiting = tokio::spawn(async move {
        let received = source.recv().await.map(|r| r.map(|(e, _)| e.id.clone()));
        (received, std::time::Instant::now())
    });
    let mut tx = pool.begin().await.unwrap_or_else(|e| panic!("{e}"));
    let enqueued = writer
        .enqueue(&mut tx, consumer_core::Message::raw(&b"{}"[..]))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let committed = std::time::Instant::now();
    tx.commit().await.unwrap_or_else(|e| panic!("{e}"));
    let (received, at) = queue::within(waiting)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let received = received.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(received.as_deref(), enqueued.id());
    let took = at.duration_since(committed);
    assert!(
        took < std::time::Duration::from_secs(5),
        "woken after {took:?}, not at commit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missed_period_runs_once_for_the_latest_only() {
    queue::a_missed_period_runs_once_for_the_latest_only(pool().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_schedulers_enqueue_one_job_per_period() {
    queue::three_schedulers_enqueue_one_job_per_period(pool().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_lists_shows_retries_and_cancels_jobs() {
    queue::an_operator_lists_shows_retries_and_cancels_jobs(pool().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_queue_is_not_claimed_until_resumed() {
    queue::a_paused_queue_is_not_claimed_until_resumed(pool().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_unique_for_a_window_is_written_once_within_it() {
    queue::a_job_unique_for_a_window_is_written_once_within_it(pool().await).await;
}
