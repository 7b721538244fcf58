//! The store's batch claim on PostgreSQL: one insert over two arrays.

use sqlx::{PgConnection, Postgres};

use super::StoreDatabase;
use crate::sql::storable;

impl StoreDatabase for Postgres {
    async fn claim_many(
        conn: &mut PgConnection,
        handler: &str,
        claims: &[(&str, &str)],
    ) -> Result<Vec<bool>, sqlx::Error> {
        let keys: Vec<String> = claims
            .iter()
            .map(|(k, _)| storable(k).into_owned())
            .collect();
        let ids: Vec<String> = claims
            .iter()
            .map(|(_, m)| storable(m).into_owned())
            .collect();
        // Rows go in key order (the caller sorted them), so two batches that
        // share keys take their row locks in the same order: no deadlock.
        let fresh: Vec<String> = sqlx::query_scalar(
            "INSERT INTO consumer_processed (handler, key, message_id) \
             SELECT $1, c.key, c.message_id FROM unnest($2::text[], $3::text[]) AS c(key, message_id) \
             ORDER BY c.key \
             ON CONFLICT (handler, key) DO NOTHING RETURNING key",
        )
        .bind(storable(handler))
        .bind(&keys)
        .bind(&ids)
        .fetch_all(conn)
        .await?;
        let fresh: std::collections::HashSet<&str> = fresh.iter().map(String::as_str).collect();
        Ok(keys.iter().map(|k| fresh.contains(k.as_str())).collect())
    }
}
