//! Objects: properties against the content model (open as serde reads by
//! default, closed under `deny_unknown_fields`, partially open with an
//! `additionalProperties` schema), `required`, maps' values, property
//! counts.

use serde_json::{Map, Value};

use super::members::{ExtraRules, MemberRules};
use super::scalars::{Bound, bound};
use super::{Walk, resolve};
use crate::compat::CompatError;
use crate::compat::report::Finding;
use crate::compat::rule::Rule;

/// What a property one side declares and the other does not makes.
const PROPERTY: MemberRules = MemberRules {
    removed_from_open: Rule::PropertyRemovedFromOpenContentModel,
    removed_covered_by_partial: Rule::PropertyRemovedIsCoveredByPartiallyOpenContentModel,
    removed_not_covered_by_partial: Rule::PropertyRemovedNotCoveredByPartiallyOpenContentModel,
    false_removed_from_closed: Rule::PropertyWithFalseRemovedFromClosedContentModel,
    removed_from_closed: Rule::PropertyRemovedFromClosedContentModel,
    empty_added_to_open: Rule::PropertyWithEmptySchemaAddedToOpenContentModel,
    added_to_open: Rule::PropertyAddedToOpenContentModel,
    added_covered_by_partial: Rule::PropertyAddedIsCoveredByPartiallyOpenContentModel,
    added_not_covered_by_partial: Rule::PropertyAddedNotCoveredByPartiallyOpenContentModel,
};

/// What `additionalProperties` makes.
const ADDITIONAL_PROPERTIES: ExtraRules = ExtraRules {
    keyword: "additionalProperties",
    added: Rule::AdditionalPropertiesAdded,
    removed: Rule::AdditionalPropertiesRemoved,
    narrowed: Rule::AdditionalPropertiesNarrowed,
    extended: Rule::AdditionalPropertiesExtended,
};

/// One object schema's side of the comparison: the properties it declares
/// and the ones it requires.
struct Declared<'v> {
    props: &'v Map<String, Value>,
    required: Vec<&'v str>,
}

impl<'v> Declared<'v> {
    /// `o`'s properties (`empty` when it declares none) and `required`.
    fn of(o: &'v Map<String, Value>, empty: &'v Map<String, Value>) -> Self {
        Declared {
            props: o
                .get("properties")
                .and_then(Value::as_object)
                .unwrap_or(empty),
            required: required(o),
        }
    }
}

impl Walk<'_> {
    /// Appends what differs between two object schemas.
    pub(super) fn objects(
        &mut self,
        out: &mut Vec<Finding>,
        wo: &Map<String, Value>,
        ro: &Map<String, Value>,
    ) -> Result<(), CompatError> {
        let empty = Map::new();
        let w = Declared::of(wo, &empty);
        let r = Declared::of(ro, &empty);
        self.required_changes(out, &w, &r)?;
        let r_model = ContentModel::of(ro, Side::Reader);
        for (name, w_prop) in w.props {
            let path = ["properties", name.as_str()];
            match r.props.get(name) {
                Some(r_prop) => {
                    self.nested(out, &path, w_prop, r_prop)?;
                }
                None => self.member_removed(out, &path, w_prop, &r_model, &PROPERTY)?,
            }
        }
        let w_model = ContentModel::of(wo, Side::Writer);
        for (name, r_prop) in r
            .props
            .iter()
            .filter(|(name, _)| !w.props.contains_key(*name))
        {
            self.property_added(out, name, r_prop, &w_model, &r.required)?;
        }
        self.extra_members(out, wo, ro, &ADDITIONAL_PROPERTIES)?;
        for (keyword, rules) in [
            (
                "maxProperties",
                Bound::Max([
                    Rule::MaxPropertiesAdded,
                    Rule::MaxPropertiesRemoved,
                    Rule::MaxPropertiesIncreased,
                    Rule::MaxPropertiesDecreased,
                ]),
            ),
            (
                "minProperties",
                Bound::Min([
                    Rule::MinPropertiesAdded,
                    Rule::MinPropertiesRemoved,
                    Rule::MinPropertiesIncreased,
                    Rule::MinPropertiesDecreased,
                ]),
            ),
        ] {
            bound(out, wo, ro, keyword, rules);
        }
        Ok(())
    }

    /// Appends, for each property both sides declare, whether it became
    /// required or stopped being so: a newly required property with a
    /// default still reads data without it.
    fn required_changes(
        &self,
        out: &mut Vec<Finding>,
        w: &Declared<'_>,
        r: &Declared<'_>,
    ) -> Result<(), CompatError> {
        for (name, _) in w
            .props
            .iter()
            .filter(|(name, _)| r.props.contains_key(*name))
        {
            let was = w.required.contains(&name.as_str());
            let is = r.required.contains(&name.as_str());
            if was && !is {
                out.push(Finding::at(
                    &["required", name],
                    Rule::RequiredAttributeRemoved,
                ));
            } else if !was && is {
                let rule = if self.has_default(&r.props[name])? {
                    Rule::RequiredAttributeWithDefaultAdded
                } else {
                    Rule::RequiredAttributeAdded
                };
                out.push(Finding::at(&["required", name], rule));
            }
        }
        Ok(())
    }

    /// Appends what the writer's model makes of the reader's new property
    /// `name`; under a model that is not open (partial or closed) the
    /// writer's data may lack it, so whether the reader requires it (and
    /// has a default for it) is a finding too.
    fn property_added(
        &mut self,
        out: &mut Vec<Finding>,
        name: &str,
        r_prop: &Value,
        w_model: &ContentModel<'_>,
        r_required: &[&str],
    ) -> Result<(), CompatError> {
        let path = ["properties", name];
        self.member_added(out, &path, r_prop, w_model, &PROPERTY)?;
        if matches!(w_model, ContentModel::Open) {
            return Ok(());
        }
        let rule = if !r_required.contains(&name) {
            Rule::OptionalPropertyAddedToUnopenContentModel
        } else if self.has_default(r_prop)? {
            Rule::RequiredPropertyWithDefaultAddedToUnopenContentModel
        } else {
            Rule::RequiredPropertyAddedToUnopenContentModel
        };
        out.push(Finding::at(&path, rule));
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
