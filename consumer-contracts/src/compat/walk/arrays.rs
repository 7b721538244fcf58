//! Arrays: `items` (one schema, or a tuple by position with
//! `additionalItems` as its content model), item counts, `uniqueItems`.

use serde_json::{Map, Value};

use super::Walk;
use super::members::{ExtraRules, MemberRules};
use super::objects::ContentModel;
use super::scalars::{Bound, bound};
use crate::compat::CompatError;
use crate::compat::report::Finding;
use crate::compat::rule::Rule;

/// What a tuple's item one side declares and the other does not makes.
const ITEM: MemberRules = MemberRules {
    removed_from_open: Rule::ItemRemovedFromOpenContentModel,
    removed_covered_by_partial: Rule::ItemRemovedIsCoveredByPartiallyOpenContentModel,
    removed_not_covered_by_partial: Rule::ItemRemovedNotCoveredByPartiallyOpenContentModel,
    false_removed_from_closed: Rule::ItemWithFalseRemovedFromClosedContentModel,
    removed_from_closed: Rule::ItemRemovedFromClosedContentModel,
    empty_added_to_open: Rule::ItemWithEmptySchemaAddedToOpenContentModel,
    added_to_open: Rule::ItemAddedToOpenContentModel,
    added_covered_by_partial: Rule::ItemAddedIsCoveredByPartiallyOpenContentModel,
    added_not_covered_by_partial: Rule::ItemAddedNotCoveredByPartiallyOpenContentModel,
};

/// What `additionalItems` makes.
const ADDITIONAL_ITEMS: ExtraRules = ExtraRules {
    keyword: "additionalItems",
    added: Rule::AdditionalItemsAdded,
    removed: Rule::AdditionalItemsRemoved,
    narrowed: Rule::AdditionalItemsNarrowed,
    extended: Rule::AdditionalItemsExtended,
};

impl Walk<'_> {
    /// Appends what differs between two array schemas.
    pub(super) fn arrays(
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
        self.tuples(out, wo, ro, w_tuple, r_tuple)?;
        for (keyword, rules) in [
            (
                "maxItems",
                Bound::Max([
                    Rule::MaxItemsAdded,
                    Rule::MaxItemsRemoved,
                    Rule::MaxItemsIncreased,
                    Rule::MaxItemsDecreased,
                ]),
            ),
            (
                "minItems",
                Bound::Min([
                    Rule::MinItemsAdded,
                    Rule::MinItemsRemoved,
                    Rule::MinItemsIncreased,
                    Rule::MinItemsDecreased,
                ]),
            ),
        ] {
            bound(out, wo, ro, keyword, rules);
        }
        let unique = |o: &Map<String, Value>| o.get("uniqueItems") == Some(&Value::Bool(true));
        match (unique(wo), unique(ro)) {
            (false, true) => out.push(Finding::at(&["uniqueItems"], Rule::UniqueItemsAdded)),
            (true, false) => out.push(Finding::at(&["uniqueItems"], Rule::UniqueItemsRemoved)),
            _ => {}
        }
        Ok(())
    }

    /// Appends what differs between two tuples, item by position, each
    /// item only one side has judged by the other side's content model;
    /// then `additionalItems`, which only a tuple reads.
    fn tuples(
        &mut self,
        out: &mut Vec<Finding>,
        wo: &Map<String, Value>,
        ro: &Map<String, Value>,
        w_tuple: &[Value],
        r_tuple: &[Value],
    ) -> Result<(), CompatError> {
        let w_model = tuple_model(wo);
        let r_model = tuple_model(ro);
        for index in 0..w_tuple.len().max(r_tuple.len()) {
            let at = index.to_string();
            let path = ["items", at.as_str()];
            match (w_tuple.get(index), r_tuple.get(index)) {
                (Some(w), Some(r)) => {
                    self.nested(out, &path, w, r)?;
                }
                (Some(w), None) => self.member_removed(out, &path, w, &r_model, &ITEM)?,
                (None, Some(r)) => {
                    self.member_added(out, &path, r, &w_model, &ITEM)?;
                    if matches!(w_model, ContentModel::Closed) {
                        out.push(Finding::at(&path, Rule::ItemAddedToClosedContentModel));
                    }
                }
                (None, None) => {}
            }
        }
        if !w_tuple.is_empty() || !r_tuple.is_empty() {
            self.extra_members(out, wo, ro, &ADDITIONAL_ITEMS)?;
        }
        Ok(())
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
