//! Arrays: `items` (one schema, or a tuple by position with
//! `additionalItems` as its content model), item counts, `uniqueItems`.

use serde_json::{Map, Value};

use super::objects::ContentModel;
use super::scalars::{Bound, bound};
use super::{Walk, accepts_anything, is_compatible, permits, resolve, schema_of};
use crate::compat::CompatError;
use crate::compat::report::Finding;
use crate::compat::rule::Rule;

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
                        let rule = if accepts_anything(resolve(self.reader_root, r, "reader")?) {
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
