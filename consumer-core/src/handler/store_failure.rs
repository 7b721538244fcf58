//! What a store that does not answer makes of an attempt: the message is
//! not at fault, so it waits for the database instead of spending the
//! handler's attempts and ending as a dead letter.

use std::time::Duration;

use super::{Failure, FailureKind};
use crate::error::{BoxError, Error, database_is_unavailable};
use crate::retry::{RetryMode, RetryPolicy};

/// How a message waits for a database that does not answer (a connection
/// refused or broken, a server restarting): in its lane (its key's later
/// messages wait behind it), up to 10 s between tries, and without a last
/// attempt, since the outage is not the message's fault and it heals.
/// Attempts made while waiting still count: a message that fails for
/// another reason after the outage has fewer left under its handler's
/// policy.
pub const STORE_UNAVAILABLE: RetryPolicy = RetryPolicy::exponential(
    Duration::from_millis(200),
    Duration::from_secs(10),
    u32::MAX,
)
.with_mode(RetryMode::InPlace);

/// A failure of the attempt's own work on the store (the claim, the
/// commit): transient, under [`STORE_UNAVAILABLE`] when the database did
/// not answer, under the handler's policy otherwise (a deadlock, a lock
/// timeout, a full disk).
pub(crate) fn classify(error: Error) -> Failure {
    let unavailable = error.is_unavailable();
    let failure = Failure::new(FailureKind::Transient, error);
    if unavailable {
        failure.with_retry(STORE_UNAVAILABLE)
    } else {
        failure
    }
}

/// A handler's transient error: under [`STORE_UNAVAILABLE`] when one of
/// its causes is the database not answering (the handler's statements run
/// on the attempt's own transaction, so that is the store going away
/// under it), under the handler's policy otherwise.
pub(crate) fn classify_handler_error(error: BoxError) -> Failure {
    let unavailable = caused_by_outage(&*error);
    let failure = Failure::new(FailureKind::Transient, error);
    if unavailable {
        failure.with_retry(STORE_UNAVAILABLE)
    } else {
        failure
    }
}

/// Whether `error` or one of its causes is a database that did not
/// answer, as sqlx reports it or wrapped in the framework's [`Error`].
fn caused_by_outage(error: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(error), |e| e.source()).any(|e| {
        e.downcast_ref::<sqlx::Error>()
            .is_some_and(database_is_unavailable)
            || e.downcast_ref::<Error>().is_some_and(Error::is_unavailable)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    enum HandlerError {
        #[error("database error")]
        Db(#[from] sqlx::Error),
        #[error("gateway said no")]
        Gateway,
    }

    fn refused() -> sqlx::Error {
        sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
    }

    #[test]
    fn a_database_that_does_not_answer_waits_without_a_last_attempt() {
        let claim = classify(Error::Database(refused()));
        assert_eq!(claim.kind, FailureKind::Transient);
        assert_eq!(claim.retry, Some(STORE_UNAVAILABLE));
        let timed_out = classify(Error::Database(sqlx::Error::PoolTimedOut));
        assert_eq!(timed_out.retry, Some(STORE_UNAVAILABLE));
        assert!(STORE_UNAVAILABLE.should_retry(1_000_000));
    }

    #[test]
    fn a_handler_error_caused_by_the_outage_waits_too_and_others_keep_their_policy() {
        let outage = classify_handler_error(Box::new(HandlerError::Db(refused())));
        assert_eq!(outage.retry, Some(STORE_UNAVAILABLE));
        let wrapped = classify_handler_error(Box::new(Error::Database(sqlx::Error::PoolTimedOut)));
        assert_eq!(wrapped.retry, Some(STORE_UNAVAILABLE));
        let other = classify_handler_error(Box::new(HandlerError::Gateway));
        assert_eq!(other.retry, None);
        let row = classify_handler_error(Box::new(HandlerError::Db(sqlx::Error::RowNotFound)));
        assert_eq!(row.retry, None);
        // What sqlx makes of a connection closed before the server's
        // first byte (a server going down, a pooler without a server).
        let closed = sqlx::Error::Protocol("unexpected response from SSLRequest: 0x00".into());
        assert_eq!(
            classify(Error::Database(closed)).retry,
            Some(STORE_UNAVAILABLE)
        );
    }
}
