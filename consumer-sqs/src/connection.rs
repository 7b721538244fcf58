//! [`SqsClient`]: how the backend reaches SQS, shared by sources and
//! publishers.

use std::sync::Arc;

use crate::client::{AwsSqs, SqsApi};

/// A handle on SQS: cheap to clone, shared by every source and publisher
/// made from it.
#[derive(Clone)]
pub struct SqsClient {
    api: Arc<dyn SqsApi>,
}

impl std::fmt::Debug for SqsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqsClient").finish_non_exhaustive()
    }
}

impl SqsClient {
    /// The AWS SDK's default configuration (region, credentials and
    /// endpoint from the environment, profile files, instance or task
    /// roles; `AWS_ENDPOINT_URL_SQS` included).
    pub async fn from_env() -> Self {
        Self::from_api(Arc::new(AwsSqs::from_env().await))
    }

    /// An emulator at `endpoint` (moto, LocalStack, ElasticMQ), with static
    /// test credentials and region `us-east-1`.
    pub fn local(endpoint: impl Into<String>) -> Self {
        Self::from_api(Arc::new(AwsSqs::local(endpoint)))
    }

    /// Through an SDK client configured by the application.
    pub fn from_sdk(client: aws_sdk_sqs::Client) -> Self {
        Self::from_api(Arc::new(AwsSqs::new(client)))
    }

    /// Through any [`SqsApi`]: a wrapper that injects faults, in tests.
    pub fn from_api(api: Arc<dyn SqsApi>) -> Self {
        Self { api }
    }

    /// The calls behind this handle.
    pub fn api(&self) -> Arc<dyn SqsApi> {
        Arc::clone(&self.api)
    }
}
