//! What objects and tuples share: a member (a property, a tuple's item)
//! one side declares and the other does not is judged by the other side's
//! content model, and `additionalProperties`/`additionalItems` compare
//! alike. Each kind names its own rules; the judgement is written once.

use serde_json::{Map, Value};

use super::objects::ContentModel;
use super::{Walk, accepts_anything, is_compatible, permits, resolve, schema_of};
use crate::compat::CompatError;
use crate::compat::report::Finding;
use crate::compat::rule::Rule;

/// The rules for a member one side declares and the other does not, by
/// the content model of the side without it.
pub(super) struct MemberRules {
    /// The writer's member, which a reader's open model takes anyway.
    pub(super) removed_from_open: Rule,
    /// The writer's member, passing the reader's partial model's schema.
    pub(super) removed_covered_by_partial: Rule,
    /// The writer's member, failing the reader's partial model's schema.
    pub(super) removed_not_covered_by_partial: Rule,
    /// The writer's member declared `false` (never sent), dropped by a
    /// reader's closed model.
    pub(super) false_removed_from_closed: Rule,
    /// The writer's member, which a reader's closed model refuses.
    pub(super) removed_from_closed: Rule,
    /// The reader's new member that accepts anything, where a writer's
    /// open model may already have sent anything under it.
    pub(super) empty_added_to_open: Rule,
    /// The reader's new member, where a writer's open model may have sent
    /// something else under it.
    pub(super) added_to_open: Rule,
    /// The reader's new member, accepting what the writer's partial model
    /// let through.
    pub(super) added_covered_by_partial: Rule,
    /// The reader's new member, refusing some of what the writer's partial
    /// model let through.
    pub(super) added_not_covered_by_partial: Rule,
}

/// The rules for `additionalProperties`/`additionalItems` and the keyword.
pub(super) struct ExtraRules {
    pub(super) keyword: &'static str,
    /// The reader lets extra members in; the writer did not.
    pub(super) added: Rule,
    /// The reader refuses extra members; the writer let them in.
    pub(super) removed: Rule,
    /// Only the reader limits extra members with a schema.
    pub(super) narrowed: Rule,
    /// Only the writer limited extra members with a schema.
    pub(super) extended: Rule,
}

impl Walk<'_> {
    /// Appends, at `path`, what the reader's model makes of the writer's
    /// member `w` it does not declare: only the reader's model says
    /// whether it still takes what the writer sends.
    pub(super) fn member_removed(
        &mut self,
        out: &mut Vec<Finding>,
        path: &[&str],
        w: &Value,
        r_model: &ContentModel<'_>,
        rules: &MemberRules,
    ) -> Result<(), CompatError> {
        let rule = match r_model {
            ContentModel::Open => rules.removed_from_open,
            ContentModel::Partial(extra) => self.covered(
                out,
                path,
                (w, extra),
                rules.removed_covered_by_partial,
                rules.removed_not_covered_by_partial,
            )?,
            ContentModel::Closed if w == &Value::Bool(false) => rules.false_removed_from_closed,
            ContentModel::Closed => rules.removed_from_closed,
        };
        out.push(Finding::at(path, rule));
        Ok(())
    }

    /// Appends, at `path`, what the writer's open or partial model makes of
    /// the reader's new member `r`: only the writer's model says what it
    /// may already have sent there. A closed model appends nothing here;
    /// each kind says what it makes of it.
    pub(super) fn member_added(
        &mut self,
        out: &mut Vec<Finding>,
        path: &[&str],
        r: &Value,
        w_model: &ContentModel<'_>,
        rules: &MemberRules,
    ) -> Result<(), CompatError> {
        let rule = match w_model {
            ContentModel::Open => {
                if accepts_anything(resolve(self.reader_root, r, "reader")?) {
                    rules.empty_added_to_open
                } else {
                    rules.added_to_open
                }
            }
            ContentModel::Partial(extra) => self.covered(
                out,
                path,
                (extra, r),
                rules.added_covered_by_partial,
                rules.added_not_covered_by_partial,
            )?,
            ContentModel::Closed => return Ok(()),
        };
        out.push(Finding::at(path, rule));
        Ok(())
    }

    /// Compares the `(writer, reader)` pair under `path` (a member against
    /// a partial model's schema); `covered` when nothing found is
    /// incompatible, else `not_covered`.
    fn covered(
        &mut self,
        out: &mut Vec<Finding>,
        path: &[&str],
        (w, r): (&Value, &Value),
        covered: Rule,
        not_covered: Rule,
    ) -> Result<Rule, CompatError> {
        let found = self.nested(out, path, w, r)?;
        Ok(if is_compatible(&found) {
            covered
        } else {
            not_covered
        })
    }

    /// Appends what differs between the two sides' extra-member keyword:
    /// whether it lets extra members in, then the schema they must pass.
    pub(super) fn extra_members(
        &mut self,
        out: &mut Vec<Finding>,
        wo: &Map<String, Value>,
        ro: &Map<String, Value>,
        rules: &ExtraRules,
    ) -> Result<(), CompatError> {
        let keyword = rules.keyword;
        let w_extra = wo.get(keyword);
        let r_extra = ro.get(keyword);
        if permits(w_extra) != permits(r_extra) {
            let rule = if permits(r_extra) {
                rules.added
            } else {
                rules.removed
            };
            out.push(Finding::at(&[keyword], rule));
            return Ok(());
        }
        match (schema_of(w_extra), schema_of(r_extra)) {
            (None, Some(_)) => out.push(Finding::at(&[keyword], rules.narrowed)),
            (Some(_), None) => out.push(Finding::at(&[keyword], rules.extended)),
            (Some(w), Some(r)) => {
                self.nested(out, &[keyword], w, r)?;
            }
            (None, None) => {}
        }
        Ok(())
    }
}
