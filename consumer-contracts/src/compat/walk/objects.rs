//! Objects: properties against the content model (open as serde reads by
//! default, closed under `deny_unknown_fields`, partially open with an
//! `additionalProperties` schema), `required`, maps' values, property
//! counts.

use serde_json::{Map, Value};

use super::scalars::{Bound, bound};
use super::{Walk, accepts_anything, is_compatible, permits, resolve, schema_of};
use crate::compat::CompatError;
use crate::compat::report::Finding;
use crate::compat::rule::Rule;

impl Walk<'_> {
    /// Appends what differs between two object schemas.
    pub(super) fn objects(
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
                    let rule = if accepts_anything(resolve(self.reader_root, r_prop, "reader")?) {
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
            .get("default")
            .is_some())
    }
}

fn required(o: &Map<String, Value>) -> Vec<&str> {
    o.get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Whether an object schema takes properties it does not declare.
pub(super) enum ContentModel<'v> {
    /// It takes any (`additionalProperties` absent or `true`): what serde
    /// reads by default, ignoring unknown fields.
    Open,
    /// It takes those that pass a schema (`additionalProperties: {..}`, a
    /// map's values).
    Partial(&'v Value),
    /// It takes none (`additionalProperties: false`, serde's
    /// `deny_unknown_fields`).
    Closed,
}

/// The schemas `true` and `false`, in one place for the whole program (the
/// walk keys pairs by address).
static ANYTHING: Value = Value::Bool(true);
static NOTHING: Value = Value::Bool(false);

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
            return ContentModel::Partial(if side == Side::Writer {
                &ANYTHING
            } else {
                &NOTHING
            });
        }
        Self::from_keywords(o.get("additionalProperties"))
    }

    pub(super) fn from_keywords(extra: Option<&'v Value>) -> Self {
        match extra {
            Some(Value::Bool(false)) => ContentModel::Closed,
            Some(schema @ Value::Object(_)) => ContentModel::Partial(schema),
            _ => ContentModel::Open,
        }
    }
}
