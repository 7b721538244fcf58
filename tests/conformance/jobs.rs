//! The job queue (`consumer::jobs`) as a broker of the conformance suite:
//! a topic is a named queue; each harness has a database of its own for
//! the queue (a fresh PostgreSQL schema, or a fresh SQLite file), apart
//! from the suite's store. Dead letters are what the queue keeps: the rows
//! of that database's dead-letter table whose destination is the queue.

use std::future::Future;
use std::time::Duration;

use consumer::jobs::{JobDatabase, JobPublisher, JobSource, Jobs};
use consumer::sql::{Columns, render};
use consumer::testing::{Faults, FaultyPublisher};
use consumer::{DeadLetter, DeadLetterKind, Message};
use sqlx::{AssertSqlSafe, Pool, SqlSafeStr};

use super::broker::BrokerHarness;
use super::support::until_drained;

/// A database the queue's harness runs on: where it gets a fresh one.
pub trait JobsDb: JobDatabase {
    /// A fresh database with the store's tables and the queue's.
    fn fresh() -> impl Future<Output = Pool<Self>> + Send;
}

impl JobsDb for sqlx::Postgres {
    async fn fresh() -> Pool<Self> {
        let fresh = consumer::testing::FreshSchema::create("jq", 8)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        consumer::jobs::migrate(&fresh.pool)
            .await
            .expect("the queue's table");
        fresh.pool
    }
}

impl JobsDb for sqlx::Sqlite {
    async fn fresh() -> Pool<Self> {
        let dir = std::env::temp_dir().join("consumer-tests");
        std::fs::create_dir_all(&dir).expect("temp dir");
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(dir.join(format!("jobs-{}.db", uuid::Uuid::new_v4())))
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(30));
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .expect("SQLite database file could not be created in the temp dir");
        consumer::Store::new(pool.clone())
            .with_extension(consumer::jobs::JobTables)
            .migrate()
            .await
            .expect("migrations");
        pool
    }
}

/// The job queue with the suite's wrappers.
pub struct JobsBroker<DB: JobsDb> {
    pool: Pool<DB>,
    jobs: Jobs,
    faults: Faults,
    publisher: FaultyPublisher<JobPublisher<DB>>,
}

impl<DB: JobsDb> Clone for JobsBroker<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            jobs: self.jobs.clone(),
            faults: self.faults.clone(),
            publisher: self.publisher.clone(),
        }
    }
}

/// The dead-letter table's rows of one queue, as the letters they were.
const LETTERS: &str = "SELECT kind, error, {causes::text}, attempts, {ms first_failure_at}, \
     {ms last_failure_at}, handler, message_id, partition_key, destination, position, \
     {headers::text}, payload FROM consumer_dead_letters WHERE destination = $1 ORDER BY id";

fn letter<DB: JobDatabase>(row: &DB::Row) -> Result<DeadLetter, sqlx::Error> {
    let mut c = Columns::<DB>::of(row);
    let time = |ms: i64| {
        time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).expect("a time")
    };
    let kind = c.text()?;
    Ok(DeadLetter {
        kind: DeadLetterKind::parse(&kind).expect("a dead-letter kind"),
        error: c.text()?,
        causes: serde_json::from_str(&c.text()?).expect("causes"),
        attempts: u32::try_from(c.int()?).expect("attempts"),
        first_failure: time(c.int()?),
        last_failure: time(c.int()?),
        handler: c.text()?,
        message_id: c.text()?,
        key: c.maybe_text()?,
        origin: consumer::envelope::Origin {
            channel: c.text()?.into(),
            position: c.text()?.into(),
            ..Default::default()
        },
        original_headers: consumer::store::headers_from_json(&c.text()?).expect("headers"),
        payload: c.bytes()?.into(),
        payload_omitted: None,
    })
}

impl<DB: JobsDb> BrokerHarness for JobsBroker<DB> {
    type Inner = JobSource<DB>;
    type Publisher = JobPublisher<DB>;

    async fn new(_partitions: usize) -> Self {
        let pool = DB::fresh().await;
        let jobs = Jobs::default();
        let faults = Faults::new();
        Self {
            publisher: FaultyPublisher::new(jobs.publisher(pool.clone()), faults.clone()),
            pool,
            jobs,
            faults,
        }
    }

    fn faults(&self) -> &Faults {
        &self.faults
    }

    fn publisher(&self) -> &FaultyPublisher<JobPublisher<DB>> {
        &self.publisher
    }

    async fn prepare(&self, _topic: &str) {}

    fn publish_destination(&self, topic: &str) -> String {
        topic.to_owned()
    }

    fn destination(&self, topic: &str) -> String {
        topic.to_owned()
    }

    async fn connect(&self, topic: &str) -> Result<JobSource<DB>, consumer::backend::Error> {
        Ok(self
            .jobs
            .with_queue(topic)
            .source(self.pool.clone())
            .with_lease(Duration::from_secs(5))
            .with_poll_interval(Duration::from_millis(20)))
    }

    async fn wait_drained(&self, topic: &str) {
        until_drained(Duration::from_millis(20), || self.depth(topic)).await;
    }

    async fn dead_letters(&self, topic: &str) -> Vec<Message> {
        let sql = AssertSqlSafe(render::<DB>(LETTERS)).into_sql_str();
        let mut conn = self.pool.acquire().await.expect("a connection");
        let rows = DB::fetch_all(&mut conn, sql, consumer::sql::args![topic])
            .await
            .expect("the dead-letter table");
        rows.iter()
            .map(|r| letter::<DB>(r).expect("a dead-letter row").to_message())
            .collect()
    }

    async fn depth(&self, topic: &str) -> usize {
        let n = self
            .jobs
            .with_queue(topic)
            .pending(&self.pool)
            .await
            .expect("pending jobs");
        usize::try_from(n).unwrap_or(usize::MAX)
    }

    fn limit_dead_letter_bytes(&self, _topic: &str, _bytes: usize) {
        // The dead-letter table has no size limit: the case that needs one
        // is not declared for the queue.
    }

    fn remove_dead_letter_destination(&self, _topic: &str) {
        // The table cannot go away; the refusal is the wrapper's.
        self.faults
            .refuse_dead_letters(Some(consumer::error::BrokerErrorKind::NoDestination));
    }

    fn remove_retry_destination(&self, _topic: &str) {
        self.faults
            .refuse_retries(Some(consumer::error::BrokerErrorKind::NoDestination));
    }
}
