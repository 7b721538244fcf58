//! [`answered_within`]: a limit on how long a call to an AWS service may
//! wait for its answer. The AWS SDK for Rust sets a connect timeout and
//! no read timeout: a request written to a connection that a NAT, a load
//! balancer or a firewall has silently dropped waits for an answer that
//! never comes, and a source waiting on it receives nothing, ever. Every
//! call the backends make goes through this limit, whatever timeouts the
//! application's SDK configuration sets (or does not).

use std::future::Future;
use std::time::Duration;

use consumer_backend::BrokerErrorKind;

use crate::{ApiError, ServiceCodes};

/// How long a call waits for its answer beyond what it asked the service
/// to wait (an SQS receive's long poll): an answer that takes longer is
/// taken for one that will not come.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// `call`'s outcome, or, once `limit` has passed without one, an error of
/// kind [`Unavailable`](BrokerErrorKind::Unavailable) naming `operation`
/// (the call is dropped, and its connection with it).
///
/// ```
/// # use std::time::Duration;
/// # struct Codes;
/// # impl consumer_aws::ServiceCodes for Codes {
/// #     const SERVICE: &'static str = "SQS";
/// #     fn kind_of_code(_: &str, _: &str) -> Option<consumer_backend::BrokerErrorKind> { None }
/// # }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let never = std::future::pending::<Result<(), consumer_aws::ApiError<Codes>>>();
/// let e = consumer_aws::answered_within("ReceiveMessage", Duration::from_millis(10), never)
///     .await
///     .unwrap_err();
/// assert!(e.kind().is_retriable());
/// assert!(e.message().contains("no answer within"), "{}", e.message());
/// # }
/// ```
pub async fn answered_within<T, C: ServiceCodes>(
    operation: &str,
    limit: Duration,
    call: impl Future<Output = Result<T, ApiError<C>>>,
) -> Result<T, ApiError<C>> {
    match tokio::time::timeout(limit, call).await {
        Ok(outcome) => outcome,
        Err(_) => Err(ApiError::new(
            BrokerErrorKind::Unavailable,
            format!(
                "{operation}: {} gave no answer within {limit:?} (a connection dropped on the way without a reset, or an overloaded endpoint); the call is abandoned and tried again on a new connection",
                C::SERVICE
            ),
        )),
    }
}
