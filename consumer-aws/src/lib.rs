//! What the AWS backends of the `consumer` framework (`consumer-sqs`,
//! `consumer-kinesis`) share, so that it is written once: how a client is
//! configured (from the environment as every AWS SDK reads it, or for an
//! emulator such as moto with static test credentials), what an SDK error
//! is made of (the service's code and message, or a failure on the way),
//! [`ApiError`], the failed call each backend's client seam returns,
//! classified with the backend's own [`ServiceCodes`], and
//! [`answered_within`], the limit every call's wait for its answer has.
//!
//! ```
//! let config = consumer_aws::local_config("http://127.0.0.1:4566", "consumer-docs");
//! assert_eq!(config.endpoint_url(), Some("http://127.0.0.1:4566"));
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod api_error;
mod config;
mod deadline;
mod failure;

pub use api_error::{ApiError, ServiceCodes};
pub use config::{from_env, local_config};
pub use deadline::{ANSWER_WITHIN, answered_within};
pub use failure::{SdkFailure, sdk_failure};
