//! [`KinesisClient`]: how the backend reaches Kinesis, shared by its
//! publishers (and, later, its sources).

use std::sync::Arc;

use crate::client::{AwsKinesis, KinesisApi};

/// A handle on Kinesis: cheap to clone.
#[derive(Clone)]
pub struct KinesisClient {
    api: Arc<dyn KinesisApi>,
}

impl std::fmt::Debug for KinesisClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KinesisClient").finish_non_exhaustive()
    }
}

impl KinesisClient {
    /// The AWS SDK's default configuration (region, credentials and
    /// endpoint from the environment; `AWS_ENDPOINT_URL_KINESIS` included).
    pub async fn from_env() -> Self {
        Self::from_api(Arc::new(AwsKinesis::from_env().await))
    }

    /// An emulator at `endpoint` (moto, LocalStack), with static test
    /// credentials and region `us-east-1`.
    pub fn local(endpoint: impl Into<String>) -> Self {
        Self::from_api(Arc::new(AwsKinesis::local(endpoint)))
    }

    /// Through an SDK client configured by the application.
    pub fn from_sdk(client: aws_sdk_kinesis::Client) -> Self {
        Self::from_api(Arc::new(AwsKinesis::new(client)))
    }

    /// Through any [`KinesisApi`]: a wrapper that injects faults, in tests.
    pub fn from_api(api: Arc<dyn KinesisApi>) -> Self {
        Self { api }
    }

    /// The calls behind this handle.
    pub fn api(&self) -> Arc<dyn KinesisApi> {
        Arc::clone(&self.api)
    }
}
