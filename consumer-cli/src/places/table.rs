//! The store's dead-letter table, `consumer_dead_letters`: letters the
//! broker refused for good, whole (payload included).

use consumer_core::store::{LetterRow, headers_from_json, insert_dead_letter};
use consumer_core::{DeadLetter, DeadLetterKind, envelope::Origin};
use sqlx::postgres::PgPool;
use sqlx::{Postgres, Row};
use time::OffsetDateTime;

use super::{Held, Snapshot};
use crate::args::Services;
use crate::database;
use crate::error::{Error, Result};
use crate::letter::Letter;

/// The table on one store.
#[derive(Debug)]
pub struct DeadLetterTable {
    pool: PgPool,
    schema: Option<String>,
}

/// Every column of the table, read as [`read_row`] decodes them, then
/// `$rest` (the order, a filter).
macro_rules! select {
    ($rest:literal) => {
        concat!(
            "SELECT id, handler, message_id, kind, error, causes::text AS causes, attempts, \
             (EXTRACT(EPOCH FROM first_failure_at) * 1000)::bigint AS first_ms, \
             (EXTRACT(EPOCH FROM last_failure_at) * 1000)::bigint AS last_ms, \
             destination, position, partition_key, headers::text AS headers, payload, refusal, \
             (EXTRACT(EPOCH FROM stored_at) * 1000)::bigint AS stored_ms \
             FROM consumer_dead_letters ",
            $rest
        )
    };
}

/// Letters of one handler with one error, counted by the database.
#[derive(Debug, sqlx::FromRow)]
pub struct GroupCount {
    /// The handler.
    pub handler: String,
    /// The error.
    pub error: String,
    /// How many letters.
    pub count: i64,
    /// The earliest last failure, in Unix milliseconds.
    pub first_ms: i64,
    /// The latest last failure, in Unix milliseconds.
    pub last_ms: i64,
}

impl DeadLetterTable {
    /// Connects to the store.
    pub async fn open(services: &Services) -> Result<Self> {
        Ok(Self {
            pool: database::connect(services).await?,
            schema: services.schema.clone(),
        })
    }

    /// `the dead-letter table (schema x)`.
    pub fn describe(&self) -> String {
        match &self.schema {
            Some(s) => format!("the dead-letter table (schema {s})"),
            None => "the dead-letter table".to_owned(),
        }
    }

    /// Every row, oldest first: one statement, so one consistent snapshot;
    /// rows stored after it are not in it.
    pub async fn snapshot(&self) -> Result<Snapshot> {
        let rows = sqlx::query(select!("ORDER BY id"))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| database::explain(e, "consumer_dead_letters"))?;
        let mut letters = Vec::with_capacity(rows.len());
        for row in &rows {
            let (id, letter) = read_numbered(row)?;
            letters.push(Held {
                letter,
                handle: u64::try_from(id).unwrap_or(0),
            });
        }
        Ok(Snapshot {
            letters,
            ..Snapshot::default()
        })
    }

    /// The letters counted per handler and error, the largest groups
    /// first, at most `limit` groups: one `GROUP BY`, no letter read.
    pub async fn groups(&self, limit: u32) -> Result<Vec<GroupCount>> {
        sqlx::query_as(
            "SELECT handler, error, count(*) AS count, \
             (EXTRACT(EPOCH FROM min(last_failure_at)) * 1000)::bigint AS first_ms, \
             (EXTRACT(EPOCH FROM max(last_failure_at)) * 1000)::bigint AS last_ms \
             FROM consumer_dead_letters GROUP BY handler, error \
             ORDER BY count DESC, handler, error LIMIT $1",
        )
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| database::explain(e, "consumer_dead_letters"))
    }

    /// At most `limit` letters after row `after`, in row order, of
    /// `handler` and with exactly `error` when given: a keyset page on the
    /// primary key, however many rows the table holds.
    pub async fn page(
        &self,
        handler: Option<&str>,
        error: Option<&str>,
        after: i64,
        limit: u32,
    ) -> Result<Vec<(i64, Letter)>> {
        let rows = sqlx::query(select!(
            "WHERE id > $1 AND ($2::text IS NULL OR handler = $2) \
             AND ($3::text IS NULL OR error = $3) ORDER BY id LIMIT $4"
        ))
        .bind(after)
        .bind(handler)
        .bind(error)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| database::explain(e, "consumer_dead_letters"))?;
        rows.iter().map(read_numbered).collect()
    }

    /// The letter at row `id`, if there is one.
    pub async fn row(&self, id: i64) -> Result<Option<Letter>> {
        let row = sqlx::query(select!("WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| database::explain(e, "consumer_dead_letters"))?;
        row.as_ref()
            .map(|r| read_numbered(r).map(|(_, l)| l))
            .transpose()
    }

    /// Deletes the row.
    pub async fn remove(&self, row_id: u64) -> Result<()> {
        sqlx::query("DELETE FROM consumer_dead_letters WHERE id = $1")
            .bind(i64::try_from(row_id).unwrap_or(i64::MAX))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Stores `letter` as the settle fallback would (same columns, same
    /// encoding), with the refusal it came with.
    pub async fn append(&self, letter: &Letter) -> Result<()> {
        let refusal = letter.refusal.as_deref().unwrap_or("imported");
        let mut conn = self.pool.acquire().await?;
        insert_dead_letter::<Postgres>(&mut conn, &LetterRow::of(&letter.letter, refusal))
            .await
            .map_err(|e| database::explain(e, "consumer_dead_letters"))?;
        Ok(())
    }
}

/// The row's id and its letter, or a sentence naming the malformed row.
fn read_numbered(row: &sqlx::postgres::PgRow) -> Result<(i64, Letter)> {
    let id: i64 = row.try_get("id")?;
    let letter = read_row(row).map_err(|reason| {
        Error::Other(format!("dead-letter table row {id} is malformed: {reason}"))
    })?;
    Ok((id, letter))
}

fn read_row(row: &sqlx::postgres::PgRow) -> Result<Letter, String> {
    let get_err = |e: sqlx::Error| e.to_string();
    let ms = |name: &str| -> Result<OffsetDateTime, String> {
        let ms: i64 = row.try_get(name).map_err(get_err)?;
        OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
            .map_err(|e| format!("{name}: {e}"))
    };
    let kind: String = row.try_get("kind").map_err(get_err)?;
    let causes: String = row.try_get("causes").map_err(get_err)?;
    let headers: String = row.try_get("headers").map_err(get_err)?;
    let payload: Vec<u8> = row.try_get("payload").map_err(get_err)?;
    let attempts: i32 = row.try_get("attempts").map_err(get_err)?;
    let dl = DeadLetter {
        kind: DeadLetterKind::parse(&kind).ok_or_else(|| format!("unknown kind {kind:?}"))?,
        error: row.try_get("error").map_err(get_err)?,
        causes: serde_json::from_str(&causes).map_err(|e| format!("causes: {e}"))?,
        attempts: u32::try_from(attempts).unwrap_or(0),
        first_failure: ms("first_ms")?,
        last_failure: ms("last_ms")?,
        handler: row.try_get("handler").map_err(get_err)?,
        message_id: row.try_get("message_id").map_err(get_err)?,
        key: row.try_get("partition_key").map_err(get_err)?,
        origin: Origin {
            channel: row
                .try_get::<String, _>("destination")
                .map_err(get_err)?
                .into(),
            position: row
                .try_get::<String, _>("position")
                .map_err(get_err)?
                .into(),
            ..Origin::default()
        },
        original_headers: headers_from_json(&headers).ok_or("headers are malformed")?,
        payload: payload.into(),
        payload_omitted: None,
    };
    let mut letter = Letter::new(dl);
    letter.refusal = Some(row.try_get("refusal").map_err(get_err)?);
    letter.stored_at = Some(ms("stored_ms")?);
    Ok(letter)
}
