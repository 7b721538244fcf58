//! [`LastUsable`]: the schema id a decoder last found usable, remembered in
//! one atomic word ([`LastId`]).

use std::sync::atomic::{AtomicU64, Ordering};

use super::{RegistryClient, SchemaType};
use crate::error::Result;

/// Set when the word holds an id (an id is 32 bits; 0 is an id).
const HELD: u64 = 1 << 32;

/// The last schema id a decoder checked with the registry and could use.
/// A topic carries one version at a time for long stretches, so one
/// atomic load answers for most payloads, before the client's cache (a
/// lock and a map) is asked.
#[derive(Debug, Default)]
pub(crate) struct LastUsable(LastId);

/// One schema id, or none, in an atomic word: the last a decoder found to
/// have some property (usable, the reader's own).
#[derive(Debug, Default)]
pub(crate) struct LastId(AtomicU64);

impl LastId {
    /// Whether `id` is the one held.
    pub(crate) fn is(&self, id: u32) -> bool {
        self.0.load(Ordering::Relaxed) == HELD | u64::from(id)
    }

    /// Holds `id`, in place of the one before.
    pub(crate) fn hold(&self, id: u32) {
        self.0.store(HELD | u64::from(id), Ordering::Relaxed);
    }
}

impl LastUsable {
    /// `Ok` when `id` names a schema of `expected` the registry knows and
    /// a decoder can use; what [`RegistryClient::writer_schema`] says
    /// otherwise.
    pub(crate) async fn check(
        &self,
        registry: &RegistryClient,
        id: u32,
        expected: SchemaType,
    ) -> Result<()> {
        if self.0.is(id) {
            return Ok(());
        }
        registry.writer_schema(id, expected).await?;
        self.0.hold(id);
        Ok(())
    }
}
