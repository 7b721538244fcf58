//! What the registry said once and will never say differently: a schema by
//! its id, a subject's numbered version, the id a schema was registered
//! under. Latest versions and compatibility answers move, and are never
//! kept here.
//!
//! The maps only grow: a topic's schemas number in the tens, and a schema
//! kept is one request fewer on the path of every message that names it.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, PoisonError, RwLock};

use super::api::{Schema, SubjectVersion};

/// The client's caches, shared by its clones.
#[derive(Debug, Default)]
pub(crate) struct SchemaCache {
    by_id: RwLock<HashMap<u32, Arc<Schema>>>,
    by_version: RwLock<HashMap<(String, u32), Arc<SubjectVersion>>>,
    id_by_schema: RwLock<HashMap<(String, Schema), u32>>,
}

impl SchemaCache {
    pub(crate) fn schema(&self, id: u32) -> Option<Arc<Schema>> {
        read(&self.by_id, &id)
    }

    pub(crate) fn keep_schema(&self, id: u32, schema: Arc<Schema>) {
        write(&self.by_id, id, schema);
    }

    pub(crate) fn version(&self, subject: &str, version: u32) -> Option<Arc<SubjectVersion>> {
        read(&self.by_version, &(subject.to_owned(), version))
    }

    /// Keeps a subject's version, its schema by id, and its id by schema.
    pub(crate) fn keep_version(&self, version: Arc<SubjectVersion>) {
        self.keep_schema(version.id, Arc::new(version.schema.clone()));
        self.keep_id(&version.subject, &version.schema, version.id);
        write(
            &self.by_version,
            (version.subject.clone(), version.version),
            version,
        );
    }

    pub(crate) fn id(&self, subject: &str, schema: &Schema) -> Option<u32> {
        read(&self.id_by_schema, &(subject.to_owned(), schema.clone()))
    }

    pub(crate) fn keep_id(&self, subject: &str, schema: &Schema, id: u32) {
        write(&self.id_by_schema, (subject.to_owned(), schema.clone()), id);
    }
}

// A panic while holding the lock cannot leave a map half-written (one
// insert), so a poisoned lock's data is still good.
fn read<K: Eq + Hash, V: Clone>(map: &RwLock<HashMap<K, V>>, key: &K) -> Option<V> {
    map.read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(key)
        .cloned()
}

fn write<K: Eq + Hash, V>(map: &RwLock<HashMap<K, V>>, key: K, value: V) {
    map.write()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key, value);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_version_answers_by_version_by_id_and_by_schema() {
        let cache = SchemaCache::default();
        let schema = Schema::avro(r#""string""#);
        cache.keep_version(Arc::new(SubjectVersion {
            subject: "orders-value".into(),
            id: 41,
            version: 2,
            schema: schema.clone(),
        }));
        assert_eq!(cache.version("orders-value", 2).map(|v| v.id), Some(41));
        assert_eq!(cache.version("orders-value", 1), None);
        assert_eq!(cache.schema(41).as_deref(), Some(&schema));
        assert_eq!(cache.id("orders-value", &schema), Some(41));
        assert_eq!(cache.id("payments-value", &schema), None);
    }
}
