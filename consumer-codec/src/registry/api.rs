//! The Confluent-compatible API's request and reply bodies.

use serde::{Deserialize, Serialize};

/// The format of a registered schema. The API omits it for Avro.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
#[non_exhaustive]
pub enum SchemaType {
    /// Apache Avro (the API's default).
    #[default]
    Avro,
    /// Protocol Buffers.
    Protobuf,
    /// JSON Schema.
    Json,
}

/// A reference from one schema to another registered one (an imported
/// Protobuf file, a named Avro type of another subject).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SchemaReference {
    /// The name the referring schema uses (an import path, a full name).
    pub name: String,
    /// The subject the referenced schema is registered under.
    pub subject: String,
    /// The referenced version.
    pub version: i32,
}

/// A schema as the registry holds it under an id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Schema {
    /// Its format.
    #[serde(default)]
    pub schema_type: SchemaType,
    /// Its text (Avro and JSON Schema: JSON; Protobuf: a `.proto` file).
    pub schema: String,
    /// The schemas it refers to.
    #[serde(default)]
    pub references: Vec<SchemaReference>,
}

impl Schema {
    /// An Avro schema, given as its JSON text, with no references.
    pub fn avro(schema: impl Into<String>) -> Self {
        Self {
            schema_type: SchemaType::Avro,
            schema: schema.into(),
            references: Vec::new(),
        }
    }

    /// The request body of register, lookup and compatibility checks:
    /// `schemaType` is left out for Avro, as the serializers do.
    pub(crate) fn to_body(&self) -> serde_json::Value {
        let mut body = serde_json::json!({ "schema": self.schema });
        if self.schema_type != SchemaType::Avro {
            body["schemaType"] = serde_json::json!(self.schema_type);
        }
        if !self.references.is_empty() {
            body["references"] = serde_json::json!(self.references);
        }
        body
    }
}

/// One version of a subject: the schema, its global id and its version
/// number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubjectVersion {
    /// The subject.
    pub subject: String,
    /// The schema's global id (what payloads carry).
    pub id: u32,
    /// The version number within the subject.
    pub version: u32,
    /// The schema.
    #[serde(flatten)]
    pub schema: Schema,
}

/// Which version of a subject to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    /// The newest version; never cached, since it moves.
    Latest,
    /// A version number; cached, since a version never changes.
    Number(u32),
}

/// A subject's compatibility rule (`PUT /config/{subject}`): which earlier
/// versions a new one must be readable with, or able to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum Compatibility {
    /// New readers read the previous version's data.
    Backward,
    /// New readers read every earlier version's data.
    BackwardTransitive,
    /// The previous version's readers read new data.
    Forward,
    /// Every earlier version's readers read new data.
    ForwardTransitive,
    /// Backward and forward with the previous version.
    Full,
    /// Backward and forward with every earlier version.
    FullTransitive,
    /// No check.
    None,
}

/// The answer of a compatibility check.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct CompatibilityCheck {
    /// Whether the schema may be registered as the subject's next version.
    pub is_compatible: bool,
    /// Why not, when the registry says (Confluent's `verbose=true`).
    #[serde(default)]
    pub messages: Vec<String>,
}

#[derive(Deserialize)]
pub(crate) struct RegisteredId {
    pub(crate) id: u32,
}

#[derive(Serialize, Deserialize)]
pub(crate) struct CompatibilityConfig {
    pub(crate) compatibility: Compatibility,
}

/// The body of an error reply: `{"error_code": 40403, "message": "..."}`.
#[derive(Deserialize, Default)]
pub(crate) struct ErrorBody {
    #[serde(default)]
    pub(crate) error_code: i64,
    #[serde(default)]
    pub(crate) message: String,
}
