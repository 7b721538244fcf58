//! The AsyncAPI 3.1.0 document model: only what the generator writes.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value};

/// The spec version written.
pub(crate) const ASYNCAPI_VERSION: &str = "3.1.0";

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Document {
    pub(crate) asyncapi: &'static str,
    pub(crate) info: Info,
    pub(crate) default_content_type: &'static str,
    pub(crate) channels: BTreeMap<String, Channel>,
    pub(crate) operations: BTreeMap<String, Operation>,
    pub(crate) components: Components,
}

#[derive(Debug, Serialize)]
pub(crate) struct Info {
    pub(crate) title: String,
    pub(crate) version: String,
    pub(crate) description: String,
}

#[derive(Debug, Serialize)]
pub(crate) struct Channel {
    pub(crate) address: String,
    pub(crate) description: String,
    pub(crate) messages: BTreeMap<String, Ref>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub(crate) parameters: Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) bindings: Option<Bindings>,
}

#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Action {
    Receive,
    Send,
}

#[derive(Debug, Serialize)]
pub(crate) struct Operation {
    pub(crate) action: Action,
    pub(crate) channel: Ref,
    pub(crate) summary: String,
    pub(crate) messages: Vec<Ref>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) bindings: Option<Bindings>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Components {
    pub(crate) messages: BTreeMap<String, Message>,
    pub(crate) schemas: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Message {
    pub(crate) name: String,
    pub(crate) summary: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) content_type: Option<&'static str>,
    pub(crate) headers: Ref,
    pub(crate) payload: Value,
}

/// A `$ref`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Ref {
    #[serde(rename = "$ref")]
    pub(crate) target: String,
}

impl Ref {
    pub(crate) fn new(target: String) -> Self {
        Self { target }
    }
}

/// Bindings by protocol (`kafka`, `amqp`).
pub(crate) type Bindings = BTreeMap<&'static str, Value>;

/// JSON Pointer escaping of one reference token.
pub(crate) fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}
