//! Rendering a template's tokens for one database.

use super::Dialect;

/// `template` for `DB`: each `{token}` replaced by what `DB` writes for it
/// (see the [module](super) for the tokens); everything else as written.
/// For statements built at run time (the outbox's, on a table name the
/// application chose); fixed ones are [`Statement`](super::Statement)s.
pub fn render<DB: Dialect>(template: &str) -> String {
    let mut out = String::with_capacity(template.len() + 32);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            out.push_str(&rest[open..]);
            return out;
        };
        let token = &after[..close];
        if let Some((expr, _ty)) = token.split_once("::") {
            DB::cast(expr.trim(), token, &mut out);
        } else {
            let (name, arg) = token.split_once(' ').unwrap_or((token, ""));
            if !DB::token(name, arg.trim(), &mut out) {
                // Not a token (a template never holds one it does not
                // mean; a test renders each): kept as written.
                out.push('{');
                out.push_str(token);
                out.push('}');
            }
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(all(test, feature = "postgres", feature = "sqlite"))]
mod tests {
    use super::render;
    use sqlx::{Postgres, Sqlite};

    const T: &str = "UPDATE t SET at = {now}, due = {at $2}, next = {later $3}, doc = {$4::jsonb} \
                     WHERE id IN (SELECT id FROM t WHERE {ms created_at} < $1 {skip_locked})";

    #[test]
    fn postgres_keeps_its_types_and_clock() {
        assert_eq!(
            render::<Postgres>(T),
            "UPDATE t SET at = now(), due = to_timestamp($2::double precision / 1000), \
             next = now() + ($3::bigint * interval '1 millisecond'), doc = $4::jsonb \
             WHERE id IN (SELECT id FROM t WHERE (extract(epoch FROM created_at) * 1000)::bigint < $1 FOR UPDATE SKIP LOCKED)"
        );
    }

    #[test]
    fn sqlite_stores_unix_milliseconds_and_drops_casts() {
        let now = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";
        assert_eq!(
            render::<Sqlite>(T),
            format!(
                "UPDATE t SET at = {now}, due = $2, next = ({now} + $3), doc = $4 \
                 WHERE id IN (SELECT id FROM t WHERE created_at < $1 )"
            )
        );
    }

    #[test]
    fn what_is_not_a_token_stays() {
        assert_eq!(
            render::<Sqlite>("SELECT '{}' || '{x y' "),
            "SELECT '{}' || '{x y' "
        );
    }
}
