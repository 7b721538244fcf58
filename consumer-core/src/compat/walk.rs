//! Walks a writer's schema and a reader's side by side and lists every
//! difference, as Confluent Schema Registry's JSON Schema diff does: the
//! reader's `$ref`s and the writer's are followed into their own
//! documents, and a pair already being compared (a recursive type) is taken
//! as compatible instead of walked again.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::CompatError;
use super::report::Finding;
use super::rule::Rule;

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
    };
    walk.diff(writer, reader)
}

/// Whether none of the findings stops the reader from reading the writer's
/// data.
pub fn is_compatible(findings: &[Finding]) -> bool {
    findings.iter().all(|f| f.rule.is_compatible())
}

/// Which pair of schemas is being compared: the addresses of two schemas
/// inside the two documents, reached through `$ref`s.
type PairKey = (usize, usize);

struct Walk<'a> {
    writer_root: &'a Value,
    reader_root: &'a Value,
    /// Pairs on the current path: meeting one again is recursion.
    in_progress: HashSet<PairKey>,
    /// Finished pairs, with paths relative to the pair, so a definition
    /// used from many places is compared once.
    memo: HashMap<PairKey, Vec<Finding>>,
}

/// The JSON types a schema accepts; `None` is every type.
type Types<'v> = Option<Vec<&'v str>>;

impl<'a> Walk<'a> {
    fn diff(&mut self, writer: &Value, reader: &Value) -> Result<Vec<Finding>, CompatError> {
        let (w, w_ref) = resolve(self.writer_root, writer, "writer")?;
        let (r, r_ref) = resolve(self.reader_root, reader, "reader")?;
        // Only schemas reached through a `$ref` are known to live in the
        // documents (others may be a split of a `type` array, made here):
        // those are the ones recursion and sharing go through.
        let key =
            (w_ref && r_ref).then_some((w as *const Value as usize, r as *const Value as usize));
        if let Some(key) = key {
            if let Some(done) = self.memo.get(&key) {
                return Ok(done.clone());
            }
            if !self.in_progress.insert(key) {
                return Ok(Vec::new());
            }
        }
        let found = self.diff_resolved(w, r);
        if let Some(key) = key {
            self.in_progress.remove(&key);
            if let Ok(found) = &found {
                self.memo.insert(key, found.clone());
            }
        }
        found
    }

    /// Compares `writer` and `reader` and appends what differs under
    /// `segments` (JSON pointer segments, unescaped).
    fn nested(
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
        if !self.compare_types(&mut out, &w_types, &r_types) {
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

    /// `anyOf`/`oneOf`/`allOf` on either side; `None` when neither has one
    /// and the schemas are compared keyword by keyword.
    fn combinators(
        &mut self,
        w: &Value,
        wo: &Map<String, Value>,
        r: &Value,
        ro: &Map<String, Value>,
    ) -> Result<Option<Vec<Finding>>, CompatError> {
        let wc = combinator(wo);
        let rc = combinator(ro);
        match (wc, rc) {
            (None, None) => Ok(None),
            (None, Some((r_kind, r_subs))) => {
                if let [only] = r_subs.as_slice() {
                    let found = self.diff(w, only)?;
                    if is_compatible(&found) {
                        return Ok(Some(found));
                    }
                }
                if r_kind != Combinator::AllOf {
                    // A writer with a `type` array is a sum of its types.
                    if let Some(split) = split_types(wo) {
                        return self
                            .both_combined(Combinator::AnyOf, &split, r_kind, &r_subs)
                            .map(Some);
                    }
                    for sub in r_subs.iter() {
                        let found = self.diff(w, sub)?;
                        if is_compatible(&found) {
                            let mut out = found;
                            out.push(Finding::new(Rule::SumTypeExtended));
                            return Ok(Some(out));
                        }
                    }
                }
                Ok(Some(vec![Finding::new(Rule::TypeChanged)]))
            }
            (Some((w_kind, w_subs)), None) => {
                if let [only] = w_subs.as_slice() {
                    let found = self.diff(only, r)?;
                    if is_compatible(&found) {
                        return Ok(Some(found));
                    }
                }
                if w_kind != Combinator::AllOf
                    && let Some(split) = split_types(ro)
                {
                    return self
                        .both_combined(w_kind, &w_subs, Combinator::AnyOf, &split)
                        .map(Some);
                }
                Ok(Some(vec![Finding::new(Rule::TypeChanged)]))
            }
            (Some((w_kind, w_subs)), Some((r_kind, r_subs))) => self
                .both_combined(w_kind, &w_subs, r_kind, &r_subs)
                .map(Some),
        }
    }

    /// Both sides combine alternatives: the criteria are compared, then the
    /// writer's alternatives are matched one to one with compatible reader
    /// alternatives (a maximum bipartite matching, as Confluent does).
    fn both_combined(
        &mut self,
        w_kind: Combinator,
        w_subs: &[Cow<'_, Value>],
        r_kind: Combinator,
        r_subs: &[Cow<'_, Value>],
    ) -> Result<Vec<Finding>, CompatError> {
        let mut out = Vec::new();
        if w_kind != r_kind {
            let rule = match r_kind {
                Combinator::AnyOf => Rule::CombinedTypeExtended,
                Combinator::OneOf if w_subs.len() == 1 => Rule::CombinedTypeExtended,
                Combinator::AllOf if w_subs.len() == 1 && r_subs.len() == 1 => {
                    Rule::CombinedTypeExtended
                }
                _ => Rule::CombinedTypeChanged,
            };
            out.push(Finding::new(rule));
            if rule == Rule::CombinedTypeChanged {
                return Ok(out);
            }
        }
        let w_subs = distinct(w_subs);
        let r_subs = distinct(r_subs);
        let product = r_kind == Combinator::AllOf;
        match w_subs.len().cmp(&r_subs.len()) {
            std::cmp::Ordering::Less => out.push(Finding::new(if product {
                Rule::ProductTypeExtended
            } else {
                Rule::SumTypeExtended
            })),
            std::cmp::Ordering::Greater => out.push(Finding::new(if product {
                Rule::ProductTypeNarrowed
            } else {
                Rule::SumTypeNarrowed
            })),
            std::cmp::Ordering::Equal => {}
        }
        // edges[i][j]: the findings when writer alternative i is read by
        // reader alternative j, kept only when compatible.
        let mut edges: Vec<Vec<Option<Vec<Finding>>>> = Vec::with_capacity(w_subs.len());
        for w_sub in &w_subs {
            let mut row = Vec::with_capacity(r_subs.len());
            for r_sub in &r_subs {
                let found = self.diff(w_sub, r_sub)?;
                row.push(is_compatible(&found).then_some(found));
            }
            edges.push(row);
        }
        let matched = max_matching(&edges);
        let keyword = w_kind.keyword();
        let mut matched_count = 0;
        for (i, j) in matched.iter().enumerate() {
            if let Some(j) = j {
                matched_count += 1;
                if let Some(found) = &edges[i][*j] {
                    let index = i.to_string();
                    out.extend(found.iter().cloned().map(|f| f.under(&[keyword, &index])));
                }
            }
        }
        if matched_count < w_subs.len().min(r_subs.len()) {
            out.push(Finding::new(Rule::CombinedTypeSubschemasChanged));
        }
        Ok(out)
    }

    /// Appends what the `type`s say; false when they share no type, so
    /// nothing else is worth comparing.
    fn compare_types(&self, out: &mut Vec<Finding>, w: &Types<'_>, r: &Types<'_>) -> bool {
        let (w, r) = match (w, r) {
            (_, None) => {
                if w.is_some() {
                    out.push(Finding::at(&["type"], Rule::TypeExtended));
                }
                return true;
            }
            (None, Some(_)) => {
                out.push(Finding::at(&["type"], Rule::TypeNarrowed));
                return true;
            }
            (Some(w), Some(r)) => (w, r),
        };
        let covered =
            |t: &str, by: &[&str]| by.contains(&t) || (t == "integer" && by.contains(&"number"));
        let w_in_r = w.iter().all(|t| covered(t, r));
        let r_in_w = r.iter().all(|t| covered(t, w));
        let overlap = w
            .iter()
            .any(|t| covered(t, r) || r.iter().any(|u| covered(u, &[t])));
        let rule = match (w_in_r, r_in_w) {
            (true, true) => None,
            (true, false) => Some(Rule::TypeExtended),
            (false, true) => Some(Rule::TypeNarrowed),
            (false, false) => Some(Rule::TypeChanged),
        };
        if let Some(rule) = rule {
            out.push(Finding::at(&["type"], rule));
        }
        overlap
    }

    fn objects(
        &mut self,
        out: &mut Vec<Finding>,
        wo: &Map<String, Value>,
        ro: &Map<String, Value>,
    ) -> Result<(), CompatError> {
        let empty = Map::new();
        let w_props = wo
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let r_props = ro
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let w_required = required(wo);
        let r_required = required(ro);

        for (name, _) in w_props
            .iter()
            .filter(|(name, _)| r_props.contains_key(*name))
        {
            let (was, is) = (
                w_required.contains(&name.as_str()),
                r_required.contains(&name.as_str()),
            );
            if was && !is {
                out.push(Finding::at(
                    &["required", name],
                    Rule::RequiredAttributeRemoved,
                ));
            } else if !was && is {
                let rule = if self.has_default(&r_props[name])? {
                    Rule::RequiredAttributeWithDefaultAdded
                } else {
                    Rule::RequiredAttributeAdded
                };
                out.push(Finding::at(&["required", name], rule));
            }
        }

        let w_model = ContentModel::of(wo, Side::Writer);
        let r_model = ContentModel::of(ro, Side::Reader);
        for (name, w_prop) in w_props {
            match r_props.get(name) {
                Some(r_prop) => {
                    self.nested(out, &["properties", name], w_prop, r_prop)?;
                }
                // Only the reader's model says whether it still takes the
                // property the writer sends.
                None => match &r_model {
                    ContentModel::Open => out.push(Finding::at(
                        &["properties", name],
                        Rule::PropertyRemovedFromOpenContentModel,
                    )),
                    ContentModel::Partial(extra) => {
                        let found = self.nested(out, &["properties", name], w_prop, extra)?;
                        let rule = if is_compatible(&found) {
                            Rule::PropertyRemovedIsCoveredByPartiallyOpenContentModel
                        } else {
                            Rule::PropertyRemovedNotCoveredByPartiallyOpenContentModel
                        };
                        out.push(Finding::at(&["properties", name], rule));
                    }
                    ContentModel::Closed => {
                        let rule = if w_prop == &Value::Bool(false) {
                            Rule::PropertyWithFalseRemovedFromClosedContentModel
                        } else {
                            Rule::PropertyRemovedFromClosedContentModel
                        };
                        out.push(Finding::at(&["properties", name], rule));
                    }
                },
            }
        }
        for (name, r_prop) in r_props
            .iter()
            .filter(|(name, _)| !w_props.contains_key(*name))
        {
            // Only the writer's model says what it may already have sent
            // under that name.
            match &w_model {
                ContentModel::Open => {
                    let rule = if accepts_anything(resolve(self.reader_root, r_prop, "reader")?.0) {
                        Rule::PropertyWithEmptySchemaAddedToOpenContentModel
                    } else {
                        Rule::PropertyAddedToOpenContentModel
                    };
                    out.push(Finding::at(&["properties", name], rule));
                }
                unopen => {
                    if let ContentModel::Partial(extra) = unopen {
                        let found = self.nested(out, &["properties", name], extra, r_prop)?;
                        let rule = if is_compatible(&found) {
                            Rule::PropertyAddedIsCoveredByPartiallyOpenContentModel
                        } else {
                            Rule::PropertyAddedNotCoveredByPartiallyOpenContentModel
                        };
                        out.push(Finding::at(&["properties", name], rule));
                    }
                    let rule = if !r_required.contains(&name.as_str()) {
                        Rule::OptionalPropertyAddedToUnopenContentModel
                    } else if self.has_default(r_prop)? {
                        Rule::RequiredPropertyWithDefaultAddedToUnopenContentModel
                    } else {
                        Rule::RequiredPropertyAddedToUnopenContentModel
                    };
                    out.push(Finding::at(&["properties", name], rule));
                }
            }
        }

        let w_extra = wo.get("additionalProperties");
        let r_extra = ro.get("additionalProperties");
        if permits(w_extra) != permits(r_extra) {
            let rule = if permits(r_extra) {
                Rule::AdditionalPropertiesAdded
            } else {
                Rule::AdditionalPropertiesRemoved
            };
            out.push(Finding::at(&["additionalProperties"], rule));
        } else {
            match (schema_of(w_extra), schema_of(r_extra)) {
                (None, Some(_)) => out.push(Finding::at(
                    &["additionalProperties"],
                    Rule::AdditionalPropertiesNarrowed,
                )),
                (Some(_), None) => out.push(Finding::at(
                    &["additionalProperties"],
                    Rule::AdditionalPropertiesExtended,
                )),
                (Some(w), Some(r)) => {
                    self.nested(out, &["additionalProperties"], w, r)?;
                }
                (None, None) => {}
            }
        }

        bound(
            out,
            wo,
            ro,
            "maxProperties",
            Bound::Max([
                Rule::MaxPropertiesAdded,
                Rule::MaxPropertiesRemoved,
                Rule::MaxPropertiesIncreased,
                Rule::MaxPropertiesDecreased,
            ]),
        );
        bound(
            out,
            wo,
            ro,
            "minProperties",
            Bound::Min([
                Rule::MinPropertiesAdded,
                Rule::MinPropertiesRemoved,
                Rule::MinPropertiesIncreased,
                Rule::MinPropertiesDecreased,
            ]),
        );
        Ok(())
    }

    /// Whether a reader's property schema carries a `default`, on itself or
    /// on the schema its `$ref` names.
    fn has_default(&self, prop: &Value) -> Result<bool, CompatError> {
        if prop.get("default").is_some() {
            return Ok(true);
        }
        Ok(resolve(self.reader_root, prop, "reader")?
            .0
            .get("default")
            .is_some())
    }

    fn arrays(
        &mut self,
        out: &mut Vec<Finding>,
        wo: &Map<String, Value>,
        ro: &Map<String, Value>,
    ) -> Result<(), CompatError> {
        let (w_all, w_tuple) = items(wo);
        let (r_all, r_tuple) = items(ro);
        match (w_all, r_all) {
            (None, Some(_)) => out.push(Finding::at(&["items"], Rule::SchemaAdded)),
            (Some(_), None) => out.push(Finding::at(&["items"], Rule::SchemaRemoved)),
            (Some(w), Some(r)) => {
                self.nested(out, &["items"], w, r)?;
            }
            (None, None) => {}
        }

        let w_model = tuple_model(wo);
        let r_model = tuple_model(ro);
        let longest = w_tuple.len().max(r_tuple.len());
        for index in 0..longest {
            let at = index.to_string();
            let path = ["items", at.as_str()];
            match (w_tuple.get(index), r_tuple.get(index)) {
                (Some(w), Some(r)) => {
                    self.nested(out, &path, w, r)?;
                }
                (Some(w), None) => match &r_model {
                    ContentModel::Open => {
                        out.push(Finding::at(&path, Rule::ItemRemovedFromOpenContentModel))
                    }
                    ContentModel::Partial(extra) => {
                        let found = self.nested(out, &path, w, extra)?;
                        out.push(Finding::at(
                            &path,
                            if is_compatible(&found) {
                                Rule::ItemRemovedIsCoveredByPartiallyOpenContentModel
                            } else {
                                Rule::ItemRemovedNotCoveredByPartiallyOpenContentModel
                            },
                        ));
                    }
                    ContentModel::Closed => out.push(Finding::at(
                        &path,
                        if w == &Value::Bool(false) {
                            Rule::ItemWithFalseRemovedFromClosedContentModel
                        } else {
                            Rule::ItemRemovedFromClosedContentModel
                        },
                    )),
                },
                (None, Some(r)) => match &w_model {
                    ContentModel::Open => {
                        let rule = if accepts_anything(resolve(self.reader_root, r, "reader")?.0) {
                            Rule::ItemWithEmptySchemaAddedToOpenContentModel
                        } else {
                            Rule::ItemAddedToOpenContentModel
                        };
                        out.push(Finding::at(&path, rule));
                    }
                    ContentModel::Partial(extra) => {
                        let found = self.nested(out, &path, extra, r)?;
                        out.push(Finding::at(
                            &path,
                            if is_compatible(&found) {
                                Rule::ItemAddedIsCoveredByPartiallyOpenContentModel
                            } else {
                                Rule::ItemAddedNotCoveredByPartiallyOpenContentModel
                            },
                        ));
                    }
                    ContentModel::Closed => {
                        out.push(Finding::at(&path, Rule::ItemAddedToClosedContentModel))
                    }
                },
                (None, None) => {}
            }
        }

        if !w_tuple.is_empty() || !r_tuple.is_empty() {
            let w_extra = wo.get("additionalItems");
            let r_extra = ro.get("additionalItems");
            if permits(w_extra) != permits(r_extra) {
                out.push(Finding::at(
                    &["additionalItems"],
                    if permits(r_extra) {
                        Rule::AdditionalItemsAdded
                    } else {
                        Rule::AdditionalItemsRemoved
                    },
                ));
            } else {
                match (schema_of(w_extra), schema_of(r_extra)) {
                    (None, Some(_)) => out.push(Finding::at(
                        &["additionalItems"],
                        Rule::AdditionalItemsNarrowed,
                    )),
                    (Some(_), None) => out.push(Finding::at(
                        &["additionalItems"],
                        Rule::AdditionalItemsExtended,
                    )),
                    (Some(w), Some(r)) => {
                        self.nested(out, &["additionalItems"], w, r)?;
                    }
                    (None, None) => {}
                }
            }
        }

        bound(
            out,
            wo,
            ro,
            "maxItems",
            Bound::Max([
                Rule::MaxItemsAdded,
                Rule::MaxItemsRemoved,
                Rule::MaxItemsIncreased,
                Rule::MaxItemsDecreased,
            ]),
        );
        bound(
            out,
            wo,
            ro,
            "minItems",
            Bound::Min([
                Rule::MinItemsAdded,
                Rule::MinItemsRemoved,
                Rule::MinItemsIncreased,
                Rule::MinItemsDecreased,
            ]),
        );
        let unique = |o: &Map<String, Value>| o.get("uniqueItems") == Some(&Value::Bool(true));
        match (unique(wo), unique(ro)) {
            (false, true) => out.push(Finding::at(&["uniqueItems"], Rule::UniqueItemsAdded)),
            (true, false) => out.push(Finding::at(&["uniqueItems"], Rule::UniqueItemsRemoved)),
            _ => {}
        }
        Ok(())
    }
}

/// Follows `$ref`s from `schema` inside `root`; also says whether one was
/// followed.
fn resolve<'v>(
    root: &'v Value,
    schema: &'v Value,
    side: &'static str,
) -> Result<(&'v Value, bool), CompatError> {
    let mut current = schema;
    let mut followed = false;
    for _ in 0..MAX_REF_CHAIN {
        let Some(reference) = current.get("$ref").and_then(Value::as_str) else {
            return Ok((current, followed));
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
        followed = true;
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

fn accepts_anything(schema: &Value) -> bool {
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

/// The keyword combining alternatives (named as the keywords are).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(clippy::enum_variant_names)]
enum Combinator {
    AllOf,
    AnyOf,
    OneOf,
}

impl Combinator {
    fn keyword(self) -> &'static str {
        match self {
            Combinator::AllOf => "allOf",
            Combinator::AnyOf => "anyOf",
            Combinator::OneOf => "oneOf",
        }
    }
}

fn combinator(o: &Map<String, Value>) -> Option<(Combinator, Vec<Cow<'_, Value>>)> {
    [Combinator::AllOf, Combinator::AnyOf, Combinator::OneOf]
        .into_iter()
        .find_map(|c| {
            o.get(c.keyword())
                .and_then(Value::as_array)
                .map(|subs| (c, subs.iter().map(Cow::Borrowed).collect()))
        })
}

/// A schema whose `type` names several types, as one schema per type (the
/// keywords kept on each): `["string", "null"]` is `anyOf` a string schema
/// and a null schema.
fn split_types(o: &Map<String, Value>) -> Option<Vec<Cow<'static, Value>>> {
    let types = o.get("type")?.as_array()?;
    if types.len() < 2 {
        return None;
    }
    Some(
        types
            .iter()
            .map(|t| {
                let mut one = o.clone();
                one.insert("type".to_owned(), t.clone());
                Cow::Owned(Value::Object(one))
            })
            .collect(),
    )
}

fn distinct<'v>(subs: &'v [Cow<'v, Value>]) -> Vec<&'v Value> {
    let mut seen: Vec<&Value> = Vec::with_capacity(subs.len());
    for sub in subs {
        if !seen.contains(&sub.as_ref()) {
            seen.push(sub.as_ref());
        }
    }
    seen
}

/// A maximum matching of writer alternatives to reader alternatives over
/// the compatible pairs (Kuhn's augmenting paths): for each writer
/// alternative, the reader alternative it is matched with.
fn max_matching(edges: &[Vec<Option<Vec<Finding>>>]) -> Vec<Option<usize>> {
    let readers = edges.first().map_or(0, Vec::len);
    let mut reader_of: Vec<Option<usize>> = vec![None; readers];
    fn augment(
        w: usize,
        edges: &[Vec<Option<Vec<Finding>>>],
        seen: &mut [bool],
        reader_of: &mut [Option<usize>],
    ) -> bool {
        for r in 0..seen.len() {
            if edges[w][r].is_some() && !seen[r] {
                seen[r] = true;
                if reader_of[r].is_none_or(|other| augment(other, edges, seen, reader_of)) {
                    reader_of[r] = Some(w);
                    return true;
                }
            }
        }
        false
    }
    for w in 0..edges.len() {
        let mut seen = vec![false; readers];
        augment(w, edges, &mut seen, &mut reader_of);
    }
    let mut matched = vec![None; edges.len()];
    for (r, w) in reader_of.iter().enumerate() {
        if let Some(w) = w {
            matched[*w] = Some(r);
        }
    }
    matched
}

/// The schema's `type` as a list; when absent, the types of its `enum` or
/// `const` values; `None` when nothing limits the type.
fn types(o: &Map<String, Value>) -> Types<'_> {
    match o.get("type") {
        Some(Value::String(t)) => return Some(vec![t.as_str()]),
        Some(Value::Array(ts)) => return Some(ts.iter().filter_map(Value::as_str).collect()),
        _ => {}
    }
    let values = enum_values(o)?;
    let mut found: Vec<&str> = Vec::new();
    for v in values {
        let t = json_type(v);
        if !found.contains(&t) {
            found.push(t);
        }
    }
    Some(found)
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn has_type(types: &Types<'_>, kind: &str) -> bool {
    match types {
        None => true,
        Some(ts) => ts.contains(&kind) || (kind == "number" && ts.contains(&"integer")),
    }
}

fn enum_values(o: &Map<String, Value>) -> Option<Vec<&Value>> {
    if let Some(values) = o.get("enum").and_then(Value::as_array) {
        return Some(values.iter().collect());
    }
    o.get("const").map(|c| vec![c])
}

fn enums(out: &mut Vec<Finding>, wo: &Map<String, Value>, ro: &Map<String, Value>) {
    let keyword =
        if ro.contains_key("const") || (!ro.contains_key("enum") && wo.contains_key("const")) {
            "const"
        } else {
            "enum"
        };
    let rule = match (enum_values(wo), enum_values(ro)) {
        (None, None) => return,
        (Some(_), None) => Rule::EnumArrayExtended,
        (None, Some(_)) => Rule::EnumArrayNarrowed,
        (Some(w), Some(r)) => {
            let w_in_r = w.iter().all(|v| r.contains(v));
            let r_in_w = r.iter().all(|v| w.contains(v));
            match (w_in_r, r_in_w) {
                (true, true) => return,
                (true, false) => Rule::EnumArrayExtended,
                (false, true) => Rule::EnumArrayNarrowed,
                (false, false) => Rule::EnumArrayChanged,
            }
        }
    };
    out.push(Finding::at(&[keyword], rule));
}

fn strings(out: &mut Vec<Finding>, wo: &Map<String, Value>, ro: &Map<String, Value>) {
    bound(
        out,
        wo,
        ro,
        "maxLength",
        Bound::Max([
            Rule::MaxLengthAdded,
            Rule::MaxLengthRemoved,
            Rule::MaxLengthIncreased,
            Rule::MaxLengthDecreased,
        ]),
    );
    bound(
        out,
        wo,
        ro,
        "minLength",
        Bound::Min([
            Rule::MinLengthAdded,
            Rule::MinLengthRemoved,
            Rule::MinLengthIncreased,
            Rule::MinLengthDecreased,
        ]),
    );
    match (wo.get("pattern"), ro.get("pattern")) {
        (None, Some(_)) => out.push(Finding::at(&["pattern"], Rule::PatternAdded)),
        (Some(_), None) => out.push(Finding::at(&["pattern"], Rule::PatternRemoved)),
        (Some(w), Some(r)) if w != r => out.push(Finding::at(&["pattern"], Rule::PatternChanged)),
        _ => {}
    }
}

fn numbers(out: &mut Vec<Finding>, wo: &Map<String, Value>, ro: &Map<String, Value>) {
    bound(
        out,
        wo,
        ro,
        "maximum",
        Bound::Max([
            Rule::MaximumAdded,
            Rule::MaximumRemoved,
            Rule::MaximumIncreased,
            Rule::MaximumDecreased,
        ]),
    );
    bound(
        out,
        wo,
        ro,
        "minimum",
        Bound::Min([
            Rule::MinimumAdded,
            Rule::MinimumRemoved,
            Rule::MinimumIncreased,
            Rule::MinimumDecreased,
        ]),
    );
    bound(
        out,
        wo,
        ro,
        "exclusiveMaximum",
        Bound::Max([
            Rule::ExclusiveMaximumAdded,
            Rule::ExclusiveMaximumRemoved,
            Rule::ExclusiveMaximumIncreased,
            Rule::ExclusiveMaximumDecreased,
        ]),
    );
    bound(
        out,
        wo,
        ro,
        "exclusiveMinimum",
        Bound::Min([
            Rule::ExclusiveMinimumAdded,
            Rule::ExclusiveMinimumRemoved,
            Rule::ExclusiveMinimumIncreased,
            Rule::ExclusiveMinimumDecreased,
        ]),
    );
    let factor = |o: &Map<String, Value>| {
        o.get("multipleOf")
            .and_then(Value::as_f64)
            .filter(|f| *f > 0.0)
    };
    let rule = match (factor(wo), factor(ro)) {
        (None, None) => return,
        (None, Some(_)) => Rule::MultipleOfAdded,
        (Some(_), None) => Rule::MultipleOfRemoved,
        (Some(w), Some(r)) if w == r => return,
        // Every multiple of the writer's factor is one of the reader's when
        // the writer's factor is itself a multiple of the reader's.
        (Some(w), Some(r)) if is_multiple(w, r) => Rule::MultipleOfReduced,
        (Some(w), Some(r)) if is_multiple(r, w) => Rule::MultipleOfExpanded,
        _ => Rule::MultipleOfChanged,
    };
    out.push(Finding::at(&["multipleOf"], rule));
}

fn is_multiple(value: f64, of: f64) -> bool {
    let ratio = value / of;
    (ratio - ratio.round()).abs() < 1e-9
}

/// A numeric bound and the four rules for it: added, removed, increased,
/// decreased.
enum Bound {
    /// A bound values must stay below (`maximum`, `maxLength`, ...).
    Max([Rule; 4]),
    /// A bound values must stay above (`minimum`, `minLength`, ...).
    Min([Rule; 4]),
}

fn bound(
    out: &mut Vec<Finding>,
    wo: &Map<String, Value>,
    ro: &Map<String, Value>,
    keyword: &str,
    rules: Bound,
) {
    let (Bound::Max([added, removed, increased, decreased])
    | Bound::Min([added, removed, increased, decreased])) = rules;
    let rule = match (
        wo.get(keyword).and_then(Value::as_f64),
        ro.get(keyword).and_then(Value::as_f64),
    ) {
        (None, None) => return,
        (None, Some(_)) => added,
        (Some(_), None) => removed,
        (Some(w), Some(r)) if r > w => increased,
        (Some(w), Some(r)) if r < w => decreased,
        _ => return,
    };
    out.push(Finding::at(&[keyword], rule));
}

/// Whether `additionalProperties`/`additionalItems` lets extra members in.
fn permits(extra: Option<&Value>) -> bool {
    extra != Some(&Value::Bool(false))
}

/// The schema extra members must pass, when it is one (not a boolean).
fn schema_of(extra: Option<&Value>) -> Option<&Value> {
    extra.filter(|v| !v.is_boolean())
}

fn required(o: &Map<String, Value>) -> Vec<&str> {
    o.get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Whether an object schema takes properties it does not declare.
enum ContentModel<'v> {
    /// It takes any (`additionalProperties` absent or `true`): what serde
    /// reads by default, ignoring unknown fields.
    Open,
    /// It takes those that pass a schema (`additionalProperties: {..}`, a
    /// map's values).
    Partial(Cow<'v, Value>),
    /// It takes none (`additionalProperties: false`, serde's
    /// `deny_unknown_fields`).
    Closed,
}

/// Which side a content model is on: with `patternProperties`, whose
/// regexes are not matched here, each side assumes the worst.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    /// A writer with patterns may have sent any value under a new name.
    Writer,
    /// A reader with patterns may reject a property it no longer declares.
    Reader,
}

impl<'v> ContentModel<'v> {
    fn of(o: &'v Map<String, Value>, side: Side) -> Self {
        if o.contains_key("patternProperties") {
            return ContentModel::Partial(Cow::Owned(Value::Bool(side == Side::Writer)));
        }
        Self::from_keywords(o.get("additionalProperties"))
    }

    fn from_keywords(extra: Option<&'v Value>) -> Self {
        match extra {
            Some(Value::Bool(false)) => ContentModel::Closed,
            Some(schema @ Value::Object(_)) => ContentModel::Partial(Cow::Borrowed(schema)),
            _ => ContentModel::Open,
        }
    }
}

/// The content model of a tuple (`items` as an array), from
/// `additionalItems`.
fn tuple_model(o: &Map<String, Value>) -> ContentModel<'_> {
    ContentModel::from_keywords(o.get("additionalItems"))
}

/// An array schema's `items`: one schema for every item, or a tuple's
/// schemas by position.
fn items(o: &Map<String, Value>) -> (Option<&Value>, &[Value]) {
    match o.get("items") {
        Some(Value::Array(tuple)) => (None, tuple.as_slice()),
        Some(all) => (Some(all), &[]),
        None => (None, &[]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The incompatible findings as `RULE@path`, sorted.
    fn breaks(writer: Value, reader: Value) -> Vec<String> {
        let mut found: Vec<String> = compare(&writer, &reader)
            .expect("compares")
            .into_iter()
            .filter(|f| !f.rule.is_compatible())
            .map(|f| format!("{}@{}", f.rule, f.path))
            .collect();
        found.sort();
        found
    }

    fn object(props: Value, required: &[&str], closed: bool) -> Value {
        let mut o = json!({"type": "object", "properties": props, "required": required});
        if closed {
            o["additionalProperties"] = json!(false);
        }
        o
    }

    #[test]
    fn identical_schemas_have_no_findings() {
        let s = object(
            json!({"a": {"type": "string", "maxLength": 3}}),
            &["a"],
            false,
        );
        assert!(compare(&s, &s).expect("compares").is_empty());
    }

    #[test]
    fn a_property_added_to_an_open_model_breaks_even_when_optional() {
        let old = object(json!({"a": {"type": "string"}}), &[], false);
        let new = object(
            json!({"a": {"type": "string"}, "b": {"type": "integer"}}),
            &[],
            false,
        );
        assert_eq!(
            breaks(old.clone(), new.clone()),
            ["PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL@/properties/b"]
        );
        // The other way the reader's open model takes the writer's extra property.
        assert!(breaks(new, old).is_empty());
    }

    #[test]
    fn a_closed_model_takes_optional_properties_but_not_required_ones() {
        let old = object(json!({"a": {"type": "string"}}), &[], true);
        let optional = object(
            json!({"a": {"type": "string"}, "b": {"type": "integer"}}),
            &[],
            true,
        );
        let required = object(
            json!({"a": {"type": "string"}, "b": {"type": "integer"}}),
            &["b"],
            true,
        );
        assert!(breaks(old.clone(), optional.clone()).is_empty());
        assert_eq!(
            breaks(old.clone(), required),
            ["REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL@/properties/b"]
        );
        // A closed reader rejects the property the writer still sends.
        assert_eq!(
            breaks(optional, old),
            ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL@/properties/b"]
        );
    }

    #[test]
    fn a_required_property_with_a_default_is_compatible() {
        let old = object(json!({"a": {"type": "string"}}), &[], true);
        let new = object(
            json!({"a": {"type": "string"}, "b": {"type": "integer", "default": 0}}),
            &["b"],
            true,
        );
        let found = compare(&old, &new).expect("compares");
        assert!(is_compatible(&found));
        assert!(
            found
                .iter()
                .any(|f| f.rule == Rule::RequiredPropertyWithDefaultAddedToUnopenContentModel)
        );
    }

    #[test]
    fn types_widen_and_narrow() {
        assert!(breaks(json!({"type": "integer"}), json!({"type": "number"})).is_empty());
        assert_eq!(
            breaks(json!({"type": "number"}), json!({"type": "integer"})),
            ["TYPE_NARROWED@/type"]
        );
        assert!(
            breaks(
                json!({"type": "string"}),
                json!({"type": ["string", "null"]})
            )
            .is_empty()
        );
        assert_eq!(
            breaks(
                json!({"type": ["string", "null"]}),
                json!({"type": "string"})
            ),
            ["TYPE_NARROWED@/type"]
        );
        assert_eq!(
            breaks(json!({"type": "string"}), json!({"type": "integer"})),
            ["TYPE_CHANGED@/type"]
        );
    }

    #[test]
    fn enums_widen_and_narrow() {
        let ab = json!({"type": "string", "enum": ["a", "b"]});
        let abc = json!({"type": "string", "enum": ["a", "b", "c"]});
        let ad = json!({"type": "string", "enum": ["a", "d"]});
        assert!(breaks(ab.clone(), abc.clone()).is_empty());
        assert_eq!(breaks(abc, ab.clone()), ["ENUM_ARRAY_NARROWED@/enum"]);
        assert_eq!(breaks(ab, ad), ["ENUM_ARRAY_CHANGED@/enum"]);
    }

    #[test]
    fn bounds_follow_their_direction() {
        assert_eq!(
            breaks(
                json!({"type": "string", "maxLength": 10}),
                json!({"type": "string", "maxLength": 5})
            ),
            ["MAX_LENGTH_DECREASED@/maxLength"]
        );
        assert!(
            breaks(
                json!({"type": "string", "maxLength": 5}),
                json!({"type": "string", "maxLength": 10})
            )
            .is_empty()
        );
        assert_eq!(
            breaks(
                json!({"type": "integer"}),
                json!({"type": "integer", "minimum": 0})
            ),
            ["MINIMUM_ADDED@/minimum"]
        );
        assert!(
            breaks(
                json!({"type": "integer", "multipleOf": 4}),
                json!({"type": "integer", "multipleOf": 2})
            )
            .is_empty()
        );
        assert_eq!(
            breaks(
                json!({"type": "integer", "multipleOf": 2}),
                json!({"type": "integer", "multipleOf": 4})
            ),
            ["MULTIPLE_OF_EXPANDED@/multipleOf"]
        );
        assert_eq!(
            breaks(
                json!({"type": "array", "items": {"type": "string"}}),
                json!({"type": "array", "items": {"type": "string"}, "maxItems": 3})
            ),
            ["MAX_ITEMS_ADDED@/maxItems"]
        );
    }

    #[test]
    fn items_are_compared_below_items() {
        let w = json!({"type": "array", "items": {"type": "number"}});
        let r = json!({"type": "array", "items": {"type": "integer"}});
        assert_eq!(breaks(w, r), ["TYPE_NARROWED@/items/type"]);
    }

    #[test]
    fn refs_are_followed_and_paths_name_the_place_not_the_definition() {
        let w = json!({
            "type": "object",
            "properties": {"customer": {"$ref": "#/definitions/Customer"}},
            "definitions": {"Customer": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 50}}}}
        });
        let r = json!({
            "type": "object",
            "properties": {"customer": {"$ref": "#/definitions/Person"}},
            "definitions": {"Person": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}}}}
        });
        assert_eq!(
            breaks(w, r),
            ["MAX_LENGTH_DECREASED@/properties/customer/properties/name/maxLength"]
        );
    }

    #[test]
    fn recursive_types_terminate_and_still_find_changes() {
        let tree = |leaf: Value| {
            json!({
                "type": "object",
                "properties": {"root": {"$ref": "#/definitions/Node"}},
                "definitions": {"Node": {"type": "object", "properties": {
                    "value": leaf,
                    "children": {"type": "array", "items": {"$ref": "#/definitions/Node"}}
                }}}
            })
        };
        let w = tree(json!({"type": "integer"}));
        let r = tree(json!({"type": "string"}));
        assert!(compare(&w, &w).expect("terminates").is_empty());
        assert_eq!(
            breaks(w, r),
            ["TYPE_CHANGED@/properties/root/properties/value/type"]
        );
    }

    #[test]
    fn option_of_a_struct_is_a_sum_with_null() {
        let defs = json!({"A": {"type": "object", "properties": {"x": {"type": "integer"}}}});
        let plain = json!({"type": "object", "properties": {"a": {"$ref": "#/definitions/A"}}, "definitions": defs});
        let optional = json!({"type": "object", "properties": {"a": {"anyOf": [{"$ref": "#/definitions/A"}, {"type": "null"}]}}, "definitions": defs});
        assert!(breaks(plain.clone(), optional.clone()).is_empty());
        assert_eq!(breaks(optional, plain), ["TYPE_CHANGED@/properties/a"]);
    }

    #[test]
    fn variants_added_extend_a_sum_and_removed_narrow_it() {
        let variant = |tag: &str| json!({"type": "object", "properties": {"kind": {"type": "string", "enum": [tag]}}, "required": ["kind"]});
        let two = json!({"oneOf": [variant("A"), variant("B")]});
        let three = json!({"oneOf": [variant("A"), variant("B"), variant("C")]});
        assert!(breaks(two.clone(), three.clone()).is_empty());
        assert_eq!(breaks(three, two), ["SUM_TYPE_NARROWED@"]);
    }

    #[test]
    fn nullable_type_array_reads_as_an_any_of_with_null() {
        let w = json!({"type": ["string", "null"]});
        let r = json!({"anyOf": [{"type": "string"}, {"type": "null"}]});
        assert!(breaks(w.clone(), r.clone()).is_empty());
        assert!(breaks(r, w).is_empty());
    }

    #[test]
    fn maps_compare_their_values() {
        let w = json!({"type": "object", "additionalProperties": {"type": "integer"}});
        let r = json!({"type": "object", "additionalProperties": {"type": "string"}});
        assert_eq!(breaks(w, r), ["TYPE_CHANGED@/additionalProperties/type"]);
    }

    #[test]
    fn unresolvable_and_remote_refs_are_errors() {
        let dangling = json!({"$ref": "#/definitions/Nope"});
        assert!(matches!(
            compare(&dangling, &json!({})),
            Err(CompatError::Reference { side: "writer", .. })
        ));
        let remote = json!({"$ref": "https://example.com/s.json"});
        assert!(matches!(
            compare(&json!({}), &remote),
            Err(CompatError::Reference { side: "reader", .. })
        ));
        let looping =
            json!({"$ref": "#/definitions/A", "definitions": {"A": {"$ref": "#/definitions/A"}}});
        assert!(compare(&looping, &looping).is_err());
    }

    #[test]
    fn pointer_segments_are_escaped() {
        let w = json!({"type": "object", "properties": {"a/b": {"type": "string"}}, "additionalProperties": false});
        let r = json!({"type": "object", "properties": {}, "additionalProperties": false});
        assert_eq!(
            breaks(w, r),
            ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL@/properties/a~1b"]
        );
    }

    #[test]
    fn a_producer_that_omits_a_field_breaks_a_consumer_that_requires_it() {
        // Serialize schema: `#[serde(skip_serializing_if = "Option::is_none")]`
        // makes `note` optional for the producer.
        let producer = object(
            json!({"id": {"type": "string"}, "note": {"type": "string"}}),
            &["id"],
            false,
        );
        // Deserialize schema of a consumer that requires it.
        let strict = object(
            json!({"id": {"type": "string"}, "note": {"type": "string"}}),
            &["id", "note"],
            false,
        );
        // Deserialize schema of one with `#[serde(default)]` on it.
        let lenient = object(
            json!({"id": {"type": "string"}, "note": {"type": "string", "default": ""}}),
            &["id"],
            false,
        );
        assert_eq!(
            breaks(producer.clone(), strict),
            ["REQUIRED_ATTRIBUTE_ADDED@/required/note"]
        );
        assert!(breaks(producer, lenient).is_empty());
    }

    #[test]
    fn combination_keywords_change() {
        let a = json!({"type": "string"});
        let b = json!({"type": "integer"});
        let one = json!({"oneOf": [a, b]});
        let any = json!({"anyOf": [a, b]});
        let all = json!({"allOf": [a, b]});
        assert!(breaks(one.clone(), any.clone()).is_empty());
        assert_eq!(breaks(any.clone(), one), ["COMBINED_TYPE_CHANGED@"]);
        assert_eq!(breaks(any, all), ["COMBINED_TYPE_CHANGED@"]);
        let fewer = json!({"allOf": [{"type": "string"}]});
        let more = json!({"allOf": [{"type": "string"}, {"maxLength": 3}]});
        assert!(breaks(more.clone(), fewer.clone()).is_empty());
        assert!(breaks(fewer, more).contains(&"PRODUCT_TYPE_EXTENDED@".to_owned()));
    }

    #[test]
    fn tuples_follow_their_content_model() {
        let one = json!({"type": "array", "items": [{"type": "string"}], "additionalItems": false});
        let two = json!({"type": "array", "items": [{"type": "string"}, {"type": "integer"}], "additionalItems": false});
        let open_one = json!({"type": "array", "items": [{"type": "string"}]});
        let open_two = json!({"type": "array", "items": [{"type": "string"}, {"type": "integer"}]});
        assert!(breaks(one.clone(), two.clone()).is_empty());
        assert_eq!(
            breaks(two, one),
            ["ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL@/items/1"]
        );
        assert_eq!(
            breaks(open_one.clone(), open_two.clone()),
            ["ITEM_ADDED_TO_OPEN_CONTENT_MODEL@/items/1"]
        );
        assert!(breaks(open_two, open_one).is_empty());
    }

    #[test]
    fn partially_open_models_cover_properties_that_pass_their_schema() {
        let w = json!({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "number"}});
        let r =
            json!({"type": "object", "properties": {}, "additionalProperties": {"type": "number"}});
        let found = compare(&w, &r).expect("compares");
        assert!(is_compatible(&found), "{found:?}");
        assert!(
            found
                .iter()
                .any(|f| f.rule == Rule::PropertyRemovedIsCoveredByPartiallyOpenContentModel)
        );
        let narrow =
            json!({"type": "object", "properties": {}, "additionalProperties": {"type": "string"}});
        assert!(
            breaks(w, narrow).contains(
                &"PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL@/properties/a"
                    .to_owned()
            )
        );
    }

    #[test]
    fn const_is_a_one_value_enum() {
        let placed = json!({"type": "string", "const": "Placed"});
        let either = json!({"type": "string", "enum": ["Placed", "Paid"]});
        assert!(breaks(placed.clone(), either.clone()).is_empty());
        assert_eq!(breaks(either, placed), ["ENUM_ARRAY_NARROWED@/const"]);
    }

    #[test]
    fn exclusive_bounds_and_unique_items() {
        assert_eq!(
            breaks(
                json!({"type": "number", "exclusiveMinimum": 0}),
                json!({"type": "number", "exclusiveMinimum": 1})
            ),
            ["EXCLUSIVE_MINIMUM_INCREASED@/exclusiveMinimum"]
        );
        assert_eq!(
            breaks(
                json!({"type": "array", "items": true}),
                json!({"type": "array", "items": true, "uniqueItems": true})
            ),
            ["UNIQUE_ITEMS_ADDED@/uniqueItems"]
        );
    }

    #[test]
    fn a_schema_accepting_anything_reads_everything() {
        assert!(breaks(json!({"type": "string"}), json!({})).is_empty());
        assert!(breaks(json!({"type": "string"}), json!(true)).is_empty());
        assert_eq!(
            breaks(json!(true), json!({"type": "string"})),
            ["TYPE_CHANGED@"]
        );
        assert!(breaks(json!(false), json!({"type": "string"})).is_empty());
    }

    #[test]
    fn pattern_properties_assume_the_worst_on_each_side() {
        let patterned = json!({"type": "object", "properties": {"a": {"type": "string"}},
                               "patternProperties": {"^x-": {"type": "string"}}});
        let without_a = json!({"type": "object", "properties": {},
                               "patternProperties": {"^x-": {"type": "string"}}});
        // The reader's patterns may reject the `a` it no longer declares.
        assert!(
            breaks(patterned.clone(), without_a.clone()).contains(
                &"PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL@/properties/a"
                    .to_owned()
            )
        );
        // The writer's patterns may have sent anything under `a`.
        assert!(breaks(without_a, patterned).contains(
            &"PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL@/properties/a".to_owned()
        ));
    }
}
