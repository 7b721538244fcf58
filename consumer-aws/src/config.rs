//! The SDK configuration every AWS backend's client is built from.

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_credential_types::Credentials;
use aws_credential_types::provider::SharedCredentialsProvider;

/// The region an emulator is addressed in (moto, LocalStack and ElasticMQ
/// accept any; this one is their default).
const LOCAL_REGION: &str = "us-east-1";

/// The AWS SDK's default configuration: region, credentials and endpoint
/// from the environment, profile files, instance or task roles, as every
/// AWS SDK reads them (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_SQS`,
/// `AWS_ENDPOINT_URL_KINESIS` included).
pub async fn from_env() -> SdkConfig {
    aws_config::load_defaults(BehaviorVersion::latest()).await
}

/// An emulator (moto, LocalStack, ElasticMQ) at `endpoint`, with static
/// test credentials (named `provider` in the SDK's logs) and region
/// `us-east-1`: nothing is read from the environment, so a developer's
/// real credentials never reach an emulator, nor an emulator's a real
/// account.
pub fn local_config(endpoint: impl Into<String>, provider: &'static str) -> SdkConfig {
    SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(LOCAL_REGION))
        .endpoint_url(endpoint)
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "test", "test", None, None, provider,
        )))
        .build()
}
