//! `retry = none`: every failure is final.

use consumer::{Handler, RetryPolicy, handler};

#[derive(serde::Deserialize)]
struct Audit {
    line: String,
}

#[derive(Debug, thiserror::Error)]
#[error("audit line is empty")]
struct AuditError;

#[handler(retry = none)]
async fn record_audit(audit: Audit) -> Result<(), AuditError> {
    if audit.line.is_empty() {
        return Err(AuditError);
    }
    Ok(())
}

fn assert_handler<H: Handler<consumer::SqliteStore>>(_: H) {}

pub fn main() {
    assert_handler(record_audit);
    let policy: RetryPolicy = Handler::<consumer::SqliteStore>::retry_policy(&record_audit);
    assert_eq!(policy.max_attempts(), RetryPolicy::none().max_attempts());
    // The function itself stays callable, for unit tests.
    drop(record_audit::call(Audit {
        line: String::new(),
    }));
}
