//! `dedup counts | purge`: the dedup store's rows per handler, and purging
//! rows past the retention in bounded batches.

use std::io::Write;
use std::time::Duration;

use consumer_core::PgStore;

use crate::args::Services;
use crate::database;
use crate::error::{Error, Result};
use crate::json::line;
use crate::render::Table;

/// Rows of one handler.
#[derive(Debug, sqlx::FromRow, serde::Serialize)]
struct Counts {
    handler: String,
    processed: i64,
    attempts: i64,
    dead_lettered: i64,
}

/// `counts`.
pub async fn counts(services: &Services, json: bool, out: &mut impl Write) -> Result<()> {
    let pool = database::connect(services).await?;
    let rows: Vec<Counts> = sqlx::query_as(
        "SELECT handler, sum(p)::bigint AS processed, sum(a)::bigint AS attempts, sum(d)::bigint AS dead_lettered FROM ( \
           SELECT handler, count(*) AS p, 0::bigint AS a, 0::bigint AS d FROM consumer_processed GROUP BY handler \
           UNION ALL \
           SELECT handler, 0, count(*), count(dead_lettered_at) FROM consumer_attempts GROUP BY handler \
         ) c GROUP BY handler ORDER BY handler",
    )
    .fetch_all(&pool)
    .await
    .map_err(|e| database::explain(e, "consumer_processed"))?;
    if json {
        for r in &rows {
            writeln!(out, "{}", line(r)).map_err(Error::io("writing the output"))?;
        }
        return Ok(());
    }
    let mut t = Table::new(&["HANDLER", "PROCESSED", "ATTEMPT ROWS", "DEAD-LETTERED"]);
    for r in &rows {
        t.row(vec![
            r.handler.clone(),
            r.processed.to_string(),
            r.attempts.to_string(),
            r.dead_lettered.to_string(),
        ]);
    }
    out.write_all(t.render().as_bytes())
        .map_err(Error::io("writing the output"))
}

/// `purge --older-than`: the store's own purge, `batch` rows per statement.
pub async fn purge(
    services: &Services,
    older_than: Duration,
    batch: u32,
    out: &mut impl Write,
) -> Result<()> {
    let pool = database::connect(services).await?;
    let spinner = indicatif::ProgressBar::new_spinner();
    spinner.set_message(format!(
        "purging rows older than {}",
        humantime::format_duration(older_than)
    ));
    spinner.enable_steady_tick(Duration::from_millis(200));
    let deleted = PgStore::new(pool)
        .with_retention(older_than)
        .with_purge_batch(batch)
        .purge()
        .await
        .map_err(|e| Error::Other(format!("purging the dedup store: {e}")));
    spinner.finish_and_clear();
    writeln!(out, "deleted {} dedup and attempt row(s)", deleted?)
        .map_err(Error::io("writing the output"))
}
