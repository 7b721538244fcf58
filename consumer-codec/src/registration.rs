//! A producer's schema under its subject, and the id the registry gives
//! it: found once, registered only when auto-registration is on.

use tokio::sync::OnceCell;

use crate::error::Result;
use crate::registry::{RegistryClient, Schema};

/// The schema a producer writes with, under its subject.
#[derive(Debug)]
pub(crate) struct Registration {
    pub(crate) registry: RegistryClient,
    pub(crate) subject: String,
    pub(crate) schema: Schema,
    pub(crate) auto_register: bool,
    schema_id: OnceCell<u32>,
}

impl Registration {
    /// Auto-registration off: a producer must not add a version nobody
    /// checked.
    pub(crate) fn new(registry: RegistryClient, subject: String, schema: Schema) -> Self {
        Self {
            registry,
            subject,
            schema,
            auto_register: false,
            schema_id: OnceCell::new(),
        }
    }

    /// The schema's id, asked once: registered when auto-registration is
    /// on, else looked up under the subject. A failure is not kept: the
    /// next call asks again.
    pub(crate) async fn schema_id(&self) -> Result<u32> {
        let id = self
            .schema_id
            .get_or_try_init(|| async {
                if self.auto_register {
                    self.registry.register(&self.subject, &self.schema).await
                } else {
                    Ok(self.registry.lookup(&self.subject, &self.schema).await?.id)
                }
            })
            .await?;
        Ok(*id)
    }
}
