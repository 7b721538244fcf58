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
