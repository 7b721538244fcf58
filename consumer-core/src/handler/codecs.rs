//! [`Codecs`]: the payload codecs a consumer holds for its handlers
//! (`#[handler(codec = ..)]`), and what a handler needs of them
//! ([`CodecNeed`]).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use consumer_codec::Codec;

/// The codecs of one consumer, one per type: what
/// [`Consumer::with_codec`](crate::runtime::Consumer::with_codec) adds to
/// and a handler's attempt decodes with. Cheap to clone.
#[derive(Clone, Default)]
pub struct Codecs {
    by_type: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl Codecs {
    /// Adds `codec`, replacing one of the same type.
    pub(crate) fn insert<C: Codec>(&mut self, codec: C) {
        self.by_type.insert(TypeId::of::<C>(), Arc::new(codec));
    }

    /// The codec of type `C`, if the consumer has one.
    pub fn get<C: Codec>(&self) -> Option<&C> {
        self.by_type.get(&TypeId::of::<C>())?.downcast_ref::<C>()
    }

    /// Whether the consumer has what `need` names.
    pub(crate) fn has(&self, need: CodecNeed) -> bool {
        self.by_type.contains_key(&need.type_id)
    }
}

impl fmt::Debug for Codecs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Codecs")
            .field("count", &self.by_type.len())
            .finish()
    }
}

/// The codec a handler decodes with, by type: a consumer refuses to start
/// without it ([`Handler::codec`](super::Handler::codec)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodecNeed {
    type_id: TypeId,
    name: &'static str,
    type_name: &'static str,
}

impl CodecNeed {
    /// The need of codec `C`.
    pub fn of<C: Codec>() -> Self {
        Self {
            type_id: TypeId::of::<C>(),
            name: C::NAME,
            type_name: std::any::type_name::<C>(),
        }
    }

    /// The codec's format (`avro`).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The codec's type, as Rust writes it.
    pub fn type_name(&self) -> &'static str {
        self.type_name
    }
}
