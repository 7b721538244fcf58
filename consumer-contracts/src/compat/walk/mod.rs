//! Walks a writer's schema and a reader's side by side and lists every
//! difference, as Confluent Schema Registry's JSON Schema diff does: the
//! reader's `$ref`s and the writer's are followed into their own
//! documents, and a pair already being compared (a recursive type) is taken
//! as compatible instead of walked again.

mod arrays;
mod combined;
mod members;
mod objects;
mod scalars;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use serde_json::Value;

use super::CompatError;
use super::report::Finding;
use super::rule::Rule;
use scalars::{compare_types, enums, has_type, numbers, strings, types};

/// How many `$ref`s in a row may lead to another `$ref` before the chain is
/// taken for a loop.
const MAX_REF_CHAIN: usize = 64;

/// Every difference between the schema data is written with (`writer`, a
/// producer's `Serialize` schema or an older snapshot) and the schema it is
/// read with (`reader`, a consumer's `Deserialize` schema), compatible ones
/// included; the reader can read everything the writer writes when none is
/// incompatible (see [`is_compatible`]).
///
/// Both are draft-07 JSON Schemas as `schemars` emits them: `$ref`s point
/// into the same document (`#/definitions/...`) and are resolved there.
///
/// # Errors
///
/// [`CompatError::Reference`] when a `$ref` is not local or points at
/// nothing, or a chain of `$ref`s never reaches a schema.
pub fn compare(writer: &Value, reader: &Value) -> Result<Vec<Finding>, CompatError> {
    let mut walk = Walk {
        writer_root: writer,
        reader_root: reader,
        in_progress: HashSet::new(),
        memo: HashMap::new(),
        made: Vec::new(),
    };
    walk.diff(writer, reader)
}

/// Whether none of the findings stops the reader from reading the writer's
/// data.
pub fn is_compatible(findings: &[Finding]) -> bool {
    findings.iter().all(|f| f.rule.is_compatible())
}

/// Which pair of schemas is being compared: their addresses, in the two
/// documents or in what the walk made.
type PairKey = (usize, usize);

/// One comparison of a writer's document with a reader's.
pub(super) struct Walk<'a> {
    pub(super) writer_root: &'a Value,
    pub(super) reader_root: &'a Value,
    /// Pairs on the current path: meeting one again is recursion.
    in_progress: HashSet<PairKey>,
    /// Finished pairs, with paths relative to the pair, so a definition
    /// used from many places is compared once.
    memo: HashMap<PairKey, Vec<Finding>>,
    /// Schemas made during the walk (a `type` array split by type, the
    /// keywords beside a combinator), kept until it ends so no two
    /// schemas compared ever share an address.
    made: Vec<Rc<Value>>,
}

impl<'a> Walk<'a> {
    /// Every difference between `writer` and `reader`, paths relative to
    /// them, `$ref`s on each side resolved in its own document.
    pub(super) fn diff(
        &mut self,
        writer: &Value,
        reader: &Value,
    ) -> Result<Vec<Finding>, CompatError> {
        let w = resolve(self.writer_root, writer, "writer")?;
        let r = resolve(self.reader_root, reader, "reader")?;
        // Every schema compared lives in a document or in `made` until the
        // walk ends, so an address names one schema for the whole walk.
        let key = (w as *const Value as usize, r as *const Value as usize);
        if let Some(done) = self.memo.get(&key) {
            return Ok(done.clone());
        }
        if !self.in_progress.insert(key) {
            return Ok(Vec::new());
        }
        let found = self.diff_resolved(w, r);
        self.in_progress.remove(&key);
        if let Ok(found) = &found {
            self.memo.insert(key, found.clone());
        }
        found
    }

    /// Keeps a schema made during the walk for as long as the walk lasts.
    pub(super) fn made(&mut self, schema: Value) -> Rc<Value> {
        let schema = Rc::new(schema);
        self.made.push(Rc::clone(&schema));
        schema
    }

    /// Compares `writer` and `reader` and appends what differs under
    /// `segments` (JSON pointer segments, unescaped); returns it unprefixed.
    pub(super) fn nested(
        &mut self,
        out: &mut Vec<Finding>,
        segments: &[&str],
        writer: &Value,
        reader: &Value,
    ) -> Result<Vec<Finding>, CompatError> {
        let found = self.diff(writer, reader)?;
        out.extend(found.iter().cloned().map(|f| f.under(segments)));
        Ok(found)
    }

    fn diff_resolved(&mut self, w: &Value, r: &Value) -> Result<Vec<Finding>, CompatError> {
        let mut out = Vec::new();
        if w == &Value::Bool(false) || accepts_anything(r) {
            // Nothing is written, or anything is read.
            if accepts_anything(w) && accepts_anything(r) {
                annotations(&mut out, w, r);
            }
            return Ok(out);
        }
        if accepts_anything(w) || r == &Value::Bool(false) {
            out.push(Finding::new(Rule::TypeChanged));
            return Ok(out);
        }
        let (Some(wo), Some(ro)) = (w.as_object(), r.as_object()) else {
            // Neither a boolean nor an object: not a schema; they differ.
            if w != r {
                out.push(Finding::new(Rule::TypeChanged));
            }
            return Ok(out);
        };
        if let Some(done) = self.combinators(w, wo, r, ro)? {
            return Ok(done);
        }
        annotations(&mut out, w, r);
        let w_types = types(wo);
        let r_types = types(ro);
        if !compare_types(&mut out, &w_types, &r_types) {
            return Ok(out);
        }
        enums(&mut out, wo, ro);
        let shared = |kind: &str| has_type(&w_types, kind) && has_type(&r_types, kind);
        if shared("string") {
            strings(&mut out, wo, ro);
        }
        if shared("number") || shared("integer") {
            numbers(&mut out, wo, ro);
        }
        if shared("object") {
            self.objects(&mut out, wo, ro)?;
        }
        if shared("array") {
            self.arrays(&mut out, wo, ro)?;
        }
        Ok(out)
    }
}

/// Follows `$ref`s from `schema` inside `root`.
pub(super) fn resolve<'v>(
    root: &'v Value,
    schema: &'v Value,
    side: &'static str,
) -> Result<&'v Value, CompatError> {
    let mut current = schema;
    for _ in 0..MAX_REF_CHAIN {
        let Some(reference) = current.get("$ref").and_then(Value::as_str) else {
            return Ok(current);
        };
        let Some(pointer) = reference.strip_prefix('#') else {
            return Err(CompatError::Reference {
                side,
                reference: reference.to_owned(),
                reason: "only references inside the same document (`#/...`) are resolved",
            });
        };
        current = root
            .pointer(pointer)
            .ok_or_else(|| CompatError::Reference {
                side,
                reference: reference.to_owned(),
                reason: "it points at nothing in the document",
            })?;
    }
    Err(CompatError::Reference {
        side,
        reference: schema
            .get("$ref")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        reason: "the chain of references never reaches a schema",
    })
}

/// The keywords that constrain values; a schema with none of them (only
/// annotations) accepts anything.
const ASSERTIONS: &[&str] = &[
    "type",
    "enum",
    "const",
    "not",
    "allOf",
    "anyOf",
    "oneOf",
    "if",
    "$ref",
    "properties",
    "required",
    "additionalProperties",
    "patternProperties",
    "propertyNames",
    "dependencies",
    "minProperties",
    "maxProperties",
    "items",
    "additionalItems",
    "contains",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
];

pub(super) fn accepts_anything(schema: &Value) -> bool {
    match schema {
        Value::Bool(b) => *b,
        Value::Object(o) => !o.keys().any(|k| ASSERTIONS.contains(&k.as_str())),
        _ => false,
    }
}

fn annotations(out: &mut Vec<Finding>, w: &Value, r: &Value) {
    for (keyword, rule) in [
        ("$id", Rule::IdChanged),
        ("title", Rule::TitleChanged),
        ("description", Rule::DescriptionChanged),
        ("default", Rule::DefaultChanged),
    ] {
        if w.get(keyword) != r.get(keyword) {
            out.push(Finding::at(&[keyword], rule));
        }
    }
}

/// Whether `additionalProperties`/`additionalItems` lets extra members in.
pub(super) fn permits(extra: Option<&Value>) -> bool {
    extra != Some(&Value::Bool(false))
}

/// The schema extra members must pass, when it is one (not a boolean).
pub(super) fn schema_of(extra: Option<&Value>) -> Option<&Value> {
    extra.filter(|v| !v.is_boolean())
}
