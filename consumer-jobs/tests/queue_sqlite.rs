//! The queue's own tests on SQLite: a fresh database file per test (WAL,
//! like a deployment).

mod queue;

async fn pool() -> sqlx::SqlitePool {
    let dir = std::env::temp_dir().join("consumer-jobs-tests");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("temp dir: {e}"));
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(dir.join(format!("{}.db", uuid::Uuid::new_v4())))
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .busy_timeout(std::time::Duration::from_secs(30));
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .unwrap_or_else(|e| panic!("a SQLite file in the temp dir: {e}"));
    consumer_core::Store::new(pool.clone())
        .with_extension(consumer_jobs::JobTables)
        .migrate()
        .await
        .unwrap_or_else(|e| panic!("migrations: {e}"));
    pool
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_reschedules_the_job_with_its_attempt_and_error() {
    queue::a_retry_reschedules_the_job_with_its_attempt_and_error(pool().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gauges_count_ready_waiting_and_running_jobs() {
    queue::the_gauges_count_ready_waiting_and_running_jobs(pool().await).await;
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
