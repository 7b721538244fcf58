//! Payload schemas in the draft-07 dialect, every subschema moved under
//! `components.schemas`.
//!
//! Two `schemars` generators, one per contract: what a handler accepts is
//! the type's Deserialize schema, what the outbox sends its Serialize
//! schema (they differ, for example, on `#[serde(default)]` fields). A
//! definition both contracts make identically is written once under its
//! name; one they make differently (or that refers to one that differs) is
//! written twice, as `<name>.Deserialize` and `<name>.Serialize`. Every
//! `#/definitions/..` reference is rewritten to `#/components/schemas/..`;
//! a reference anywhere else is an error, so none can dangle.

use std::collections::{BTreeMap, BTreeSet};

use schemars::generate::{Contract, SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value};

use consumer_core::describe::PayloadType;

const DEFINITIONS: &str = "#/definitions/";
const COMPONENTS: &str = "#/components/schemas/";

/// Which side of a message a schema describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Side {
    /// What a handler decodes (Deserialize).
    Receive,
    /// What the outbox encodes (Serialize).
    Send,
}

impl Side {
    /// How names of this side's variants end.
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            Self::Receive => "Deserialize",
            Self::Send => "Serialize",
        }
    }
}

/// A payload schema not yet rewritten: references still point into its
/// generator's definitions.
#[derive(Debug, Clone)]
pub(crate) struct RawSchema {
    side: Side,
    schema: Value,
}

impl RawSchema {
    /// The side the schema describes.
    pub(crate) fn side(&self) -> Side {
        self.side
    }
}

/// Collects payload schemas; see the module docs.
pub(crate) struct Schemas {
    receive: SchemaGenerator,
    send: SchemaGenerator,
}

impl Schemas {
    pub(crate) fn new() -> Self {
        Self {
            receive: settings(Side::Receive).into_generator(),
            send: settings(Side::Send).into_generator(),
        }
    }

    /// The schema of `payload` on `side`; `None` when the type has none.
    pub(crate) fn payload(&mut self, side: Side, payload: &PayloadType) -> Option<RawSchema> {
        let generator = match side {
            Side::Receive => &mut self.receive,
            Side::Send => &mut self.send,
        };
        let schema = subschema(generator, payload)?;
        debug_assert_eq!(*generator.contract(), contract(side));
        Some(RawSchema { side, schema })
    }

    /// The definitions under their final names, and how to rewrite the
    /// payloads that refer to them.
    pub(crate) fn finish(mut self) -> Result<Finished, Vec<String>> {
        let receive = self.receive.take_definitions(true);
        let send = self.send.take_definitions(true);
        let split = differing(&receive, &send);
        let finished = Finished {
            split,
            components: Map::new(),
        };
        let mut components = Map::new();
        let mut problems = Vec::new();
        for (side, definitions) in [(Side::Receive, receive), (Side::Send, send)] {
            for (name, mut schema) in definitions {
                let key = finished.name(side, &name);
                if components.contains_key(&key) {
                    continue;
                }
                if let Err(e) = finished.rewrite_value(side, &mut schema) {
                    problems.push(format!("schema `{name}`: {e}"));
                }
                components.insert(key, schema);
            }
        }
        if problems.is_empty() {
            Ok(finished.with(components))
        } else {
            Err(problems)
        }
    }
}

/// The generator settings of each side: draft-07, the dialect the AsyncAPI
/// parser checks, for the side's serde contract. The document and the
/// standalone schemas ([`standalone`]) both come from here.
fn settings(side: Side) -> SchemaSettings {
    match side {
        Side::Receive => SchemaSettings::draft07().for_deserialize(),
        Side::Send => SchemaSettings::draft07().for_serialize(),
    }
}

/// The schema of `payload` in `generator`, references into its definitions
/// left as they are; `None` when the type has none.
fn subschema(generator: &mut SchemaGenerator, payload: &PayloadType) -> Option<Value> {
    let make = payload.schema_fn()?;
    let mut schema = make(generator);
    schema.remove("$schema");
    // A type schemars inlines (a primitive, a Vec, a map) comes back as
    // itself: give it the dialect's transforms, as definitions get.
    if schema.get("$ref").is_none() {
        let mut transforms = generator.settings().transforms.clone();
        for t in &mut transforms {
            t.transform(&mut schema);
        }
    }
    Some(schema.to_value())
}

/// The schema of `payload` on `side` as a document of its own: draft-07
/// (`$schema`), the type's own schema at the root, the definitions it
/// refers to under `definitions`. `None` when the type has none.
pub(crate) fn standalone(side: Side, payload: &PayloadType) -> Option<Value> {
    let mut generator = settings(side).into_generator();
    let meta_schema = generator.settings().meta_schema.clone();
    let mut root = subschema(&mut generator, payload)?;
    let mut definitions = generator.take_definitions(true);
    // The type itself at the root, rather than a `$ref` to it; kept among
    // the definitions only when something refers to it (a recursive type).
    let name = root
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix(DEFINITIONS))
        .map(unescape);
    if let Some(name) = name
        && let Some(own) = definitions.get(&name).cloned()
    {
        root = own;
        let mut refs = BTreeSet::new();
        references(&root, &mut refs);
        for schema in definitions.values() {
            references(schema, &mut refs);
        }
        if !refs.contains(&name) {
            definitions.remove(&name);
        }
    }
    let Value::Object(mut map) = root else {
        // `true` / `false` schemas: nothing to add beside them.
        return Some(root);
    };
    let mut document = Map::new();
    if let Some(meta_schema) = meta_schema {
        document.insert(
            "$schema".to_owned(),
            Value::String(meta_schema.into_owned()),
        );
    }
    document.append(&mut map);
    if !definitions.is_empty() {
        document.insert("definitions".to_owned(), Value::Object(definitions));
    }
    Some(Value::Object(document))
}

fn contract(side: Side) -> Contract {
    match side {
        Side::Receive => Contract::Deserialize,
        Side::Send => Contract::Serialize,
    }
}

/// The names both contracts define differently, directly or through a
/// reference to one that differs.
fn differing(receive: &Map<String, Value>, send: &Map<String, Value>) -> BTreeSet<String> {
    let both: Vec<&String> = receive.keys().filter(|k| send.contains_key(*k)).collect();
    let mut split: BTreeSet<String> = both
        .iter()
        .filter(|k| receive.get(**k) != send.get(**k))
        .map(|k| (*k).clone())
        .collect();
    loop {
        let before = split.len();
        for name in &both {
            if split.contains(*name) {
                continue;
            }
            let refers = |defs: &Map<String, Value>| {
                let mut refs = BTreeSet::new();
                if let Some(schema) = defs.get(*name) {
                    references(schema, &mut refs);
                }
                refs.iter().any(|r| split.contains(r))
            };
            if refers(receive) || refers(send) {
                split.insert((*name).clone());
            }
        }
        if split.len() == before {
            return split;
        }
    }
}

/// The definition names `value` refers to.
fn references(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                if k == "$ref"
                    && let Some(name) = v.as_str().and_then(|r| r.strip_prefix(DEFINITIONS))
                {
                    out.insert(unescape(name));
                } else {
                    references(v, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| references(v, out)),
        _ => {}
    }
}

/// JSON Pointer unescaping of one reference token.
fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// A component key: what `components.schemas` accepts
/// (`^[a-zA-Z0-9.\-_]+$`), other characters replaced by `_`.
pub(crate) fn component_key(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The definitions under their final names, and the rewriting of payloads.
#[derive(Debug, Default)]
pub(crate) struct Finished {
    split: BTreeSet<String>,
    components: Map<String, Value>,
}

impl Finished {
    fn with(mut self, components: Map<String, Value>) -> Self {
        self.components = components;
        self
    }

    fn name(&self, side: Side, definition: &str) -> String {
        if self.split.contains(definition) {
            component_key(&format!("{definition}.{}", side.suffix()))
        } else {
            component_key(definition)
        }
    }

    /// `components.schemas`, the payloads' definitions.
    pub(crate) fn into_components(self) -> Map<String, Value> {
        self.components
    }

    /// `raw` with its references rewritten.
    pub(crate) fn rewrite(&self, raw: &RawSchema) -> Result<Value, String> {
        let mut schema = raw.schema.clone();
        self.rewrite_value(raw.side, &mut schema)?;
        Ok(schema)
    }

    fn rewrite_value(&self, side: Side, value: &mut Value) -> Result<(), String> {
        match value {
            Value::Object(map) => {
                for (k, v) in map.iter_mut() {
                    if k == "$ref"
                        && let Value::String(target) = v
                    {
                        let Some(name) = target.strip_prefix(DEFINITIONS) else {
                            return Err(format!(
                                "reference `{target}` points outside the generated definitions"
                            ));
                        };
                        *v = Value::String(format!(
                            "{COMPONENTS}{}",
                            self.name(side, &unescape(name))
                        ));
                    } else {
                        self.rewrite_value(side, v)?;
                    }
                }
                Ok(())
            }
            Value::Array(items) => items
                .iter_mut()
                .try_for_each(|v| self.rewrite_value(side, v)),
            _ => Ok(()),
        }
    }
}

/// Every `$ref` in `value`, for the check that none is left dangling.
pub(crate) fn all_refs(value: &Value, out: &mut BTreeMap<String, usize>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                if k == "$ref" {
                    if let Some(r) = v.as_str() {
                        *out.entry(r.to_owned()).or_default() += 1;
                    }
                } else {
                    all_refs(v, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| all_refs(v, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Read with a default, so its two contracts differ.
    #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Inner {
        #[serde(default)]
        n: u32,
    }

    /// The same in both contracts, but it refers to `Inner`.
    #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Outer {
        inner: Inner,
    }

    /// The same in both contracts, and referring to nothing that differs.
    #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Plain {
        a: String,
    }

    #[test]
    fn what_differs_between_contracts_is_named_per_side_and_what_refers_to_it_too() {
        let mut schemas = Schemas::new();
        let received = schemas
            .payload(Side::Receive, &PayloadType::of::<Outer>())
            .expect("a schema");
        let sent = schemas
            .payload(Side::Send, &PayloadType::of::<Outer>())
            .expect("a schema");
        let plain = schemas
            .payload(Side::Send, &PayloadType::of::<Plain>())
            .expect("a schema");
        let _ = schemas.payload(Side::Receive, &PayloadType::of::<Plain>());
        let finished = schemas.finish().expect("no problem");
        assert_eq!(
            finished.rewrite(&received).expect("rewritten")["$ref"],
            "#/components/schemas/Outer.Deserialize"
        );
        assert_eq!(
            finished.rewrite(&sent).expect("rewritten")["$ref"],
            "#/components/schemas/Outer.Serialize"
        );
        assert_eq!(
            finished.rewrite(&plain).expect("rewritten")["$ref"],
            "#/components/schemas/Plain"
        );
        let components = finished.into_components();
        let mut keys: Vec<&str> = components.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "Inner.Deserialize",
                "Inner.Serialize",
                "Outer.Deserialize",
                "Outer.Serialize",
                "Plain"
            ]
        );
        assert_eq!(
            components["Outer.Serialize"]["properties"]["inner"]["$ref"],
            "#/components/schemas/Inner.Serialize"
        );
    }

    #[test]
    fn a_reference_outside_the_definitions_is_refused() {
        let finished = Finished::default();
        let raw = RawSchema {
            side: Side::Receive,
            schema: serde_json::json!({ "items": { "$ref": "https://example.com/x.json" } }),
        };
        let err = finished.rewrite(&raw).expect_err("an outside reference");
        assert!(err.contains("points outside"), "{err}");
    }

    #[test]
    fn component_keys_keep_only_what_the_spec_allows() {
        assert_eq!(component_key("Batch<Line>"), "Batch_Line_");
        assert_eq!(component_key("a.b-c_D9"), "a.b-c_D9");
    }
}
