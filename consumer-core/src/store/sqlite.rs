//! The store's batch claim on SQLite: multi-row inserts in chunks.

use sqlx::{Sqlite, SqliteConnection};

use super::{StoreDatabase, now_ms};

impl StoreDatabase for Sqlite {
    async fn claim_many(
        conn: &mut SqliteConnection,
        handler: &str,
        claims: &[(&str, &str)],
    ) -> Result<Vec<bool>, sqlx::Error> {
        let now = now_ms();
        let mut fresh = std::collections::HashSet::new();
        // SQLite binds at most 32 766 parameters per statement; 4 per row.
        for chunk in claims.chunks(1000) {
            let mut q = sqlx::QueryBuilder::<Sqlite>::new(
                "INSERT INTO consumer_processed (handler, key, message_id, processed_at) ",
            );
            q.push_values(chunk, |mut row, (key, id)| {
                row.push_bind(handler)
                    .push_bind(*key)
                    .push_bind(*id)
                    .push_bind(now);
            });
            q.push(" ON CONFLICT (handler, key) DO NOTHING RETURNING key");
            let keys: Vec<String> = q.build_query_scalar().fetch_all(&mut *conn).await?;
            fresh.extend(keys);
        }
        Ok(claims.iter().map(|(k, _)| fresh.contains(*k)).collect())
    }
}
