//! `anyOf`/`oneOf`/`allOf`: criteria compared, alternatives matched one to
//! one (serde enums' variants, `Option`'s null), a `type` array read as a
//! sum of its types.

use std::rc::Rc;

use serde_json::{Map, Value};

use super::{Walk, accepts_anything, is_compatible};
use crate::compat::CompatError;
use crate::compat::report::Finding;
use crate::compat::rule::Rule;

impl Walk<'_> {
    /// `anyOf`/`oneOf`/`allOf` on either side; `None` when neither has one
    /// and the schemas are compared keyword by keyword.
    ///
    /// Keywords beside a reader's combinator (a struct's own properties
    /// next to a flattened enum's `oneOf`) constrain too: the writer must
    /// pass them as well as one alternative.
    pub(super) fn combinators(
        &mut self,
        w: &Value,
        wo: &Map<String, Value>,
        r: &Value,
        ro: &Map<String, Value>,
    ) -> Result<Option<Vec<Finding>>, CompatError> {
        let wc = combinator(wo);
        let rc = combinator(ro);
        let (w_combined, r_combined) = (wc.is_some(), rc.is_some());
        let mut out = match (wc, rc) {
            (None, None) => return Ok(None),
            (None, Some((r_kind, r_subs))) => self.read_by_alternatives(w, wo, r_kind, &r_subs)?,
            (Some((w_kind, w_subs)), None) => self.alternatives_read_by(w_kind, &w_subs, r, ro)?,
            (Some((w_kind, w_subs)), Some((r_kind, r_subs))) => {
                self.both_combined(w_kind, &w_subs, r_kind, &r_subs)?
            }
        };
        if let Some(r_rest) = rest(ro).filter(|_| r_combined) {
            // The writer's own keywords, when it has some, say what it
            // writes beside its alternatives; otherwise the whole writer.
            let r_rest = self.made(r_rest);
            let found = match rest(wo).filter(|_| w_combined) {
                Some(w_rest) => {
                    let w_rest = self.made(w_rest);
                    self.diff(&w_rest, &r_rest)?
                }
                None => self.diff(w, &r_rest)?,
            };
            out.extend(found);
        }
        Ok(Some(out))
    }

    /// A plain writer read through the reader's alternatives.
    fn read_by_alternatives(
        &mut self,
        w: &Value,
        wo: &Map<String, Value>,
        r_kind: Combinator,
        r_subs: &[&Value],
    ) -> Result<Vec<Finding>, CompatError> {
        if let [only] = r_subs {
            let found = self.diff(w, only)?;
            if is_compatible(&found) {
                return Ok(found);
            }
        }
        if r_kind == Combinator::AllOf {
            // Every part must read it.
            let mut out = Vec::new();
            for (i, sub) in r_subs.iter().enumerate() {
                let found = self.diff(w, sub)?;
                if !is_compatible(&found) {
                    return Ok(vec![Finding::new(Rule::TypeChanged)]);
                }
                let index = i.to_string();
                out.extend(found.into_iter().map(|f| f.under(&["allOf", &index])));
            }
            return Ok(out);
        }
        // A writer with a `type` array is a sum of its types.
        if let Some(split) = split_types(wo) {
            let split: Vec<Rc<Value>> = split.into_iter().map(|s| self.made(s)).collect();
            let split: Vec<&Value> = split.iter().map(|s| s.as_ref()).collect();
            return self.both_combined(split_kind(wo, r_kind), &split, r_kind, r_subs);
        }
        for sub in r_subs {
            let found = self.diff(w, sub)?;
            if is_compatible(&found) {
                let mut out = found;
                out.push(Finding::new(Rule::SumTypeExtended));
                return Ok(out);
            }
        }
        Ok(vec![Finding::new(Rule::TypeChanged)])
    }

    /// A writer's alternatives read by a plain reader.
    fn alternatives_read_by(
        &mut self,
        w_kind: Combinator,
        w_subs: &[&Value],
        r: &Value,
        ro: &Map<String, Value>,
    ) -> Result<Vec<Finding>, CompatError> {
        if let [only] = w_subs {
            let found = self.diff(only, r)?;
            if is_compatible(&found) {
                return Ok(found);
            }
        }
        if w_kind == Combinator::AllOf {
            return Ok(vec![Finding::new(Rule::TypeChanged)]);
        }
        if let Some(split) = split_types(ro) {
            let split: Vec<Rc<Value>> = split.into_iter().map(|s| self.made(s)).collect();
            let split: Vec<&Value> = split.iter().map(|s| s.as_ref()).collect();
            return self.both_combined(w_kind, w_subs, split_kind(ro, w_kind), &split);
        }
        // Whatever alternative a value was written under, the reader reads
        // it when it reads every alternative (Confluent gives up here and
        // says TYPE_CHANGED).
        let mut out = Vec::new();
        for (i, sub) in w_subs.iter().enumerate() {
            let found = self.diff(sub, r)?;
            if !is_compatible(&found) {
                return Ok(vec![Finding::new(Rule::TypeChanged)]);
            }
            let index = i.to_string();
            out.extend(
                found
                    .into_iter()
                    .map(|f| f.under(&[w_kind.keyword(), &index])),
            );
        }
        Ok(out)
    }

    /// Both sides combine alternatives: the criteria are compared, then the
    /// writer's alternatives are matched one to one with compatible reader
    /// alternatives (a maximum bipartite matching, as Confluent does).
    fn both_combined(
        &mut self,
        w_kind: Combinator,
        w_subs: &[&Value],
        r_kind: Combinator,
        r_subs: &[&Value],
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

fn combinator(o: &Map<String, Value>) -> Option<(Combinator, Vec<&Value>)> {
    [Combinator::AllOf, Combinator::AnyOf, Combinator::OneOf]
        .into_iter()
        .find_map(|c| {
            o.get(c.keyword())
                .and_then(Value::as_array)
                .map(|subs| (c, subs.iter().collect()))
        })
}

/// The schema without its combination keywords, when what is left still
/// constrains values.
fn rest(o: &Map<String, Value>) -> Option<Value> {
    let mut rest = o.clone();
    for c in [Combinator::AllOf, Combinator::AnyOf, Combinator::OneOf] {
        rest.remove(c.keyword());
    }
    let rest = Value::Object(rest);
    (!accepts_anything(&rest)).then_some(rest)
}

/// How a split `type` array combines its parts: as the other side does,
/// since values of different JSON types match one part only; but `integer`
/// and `number` together overlap, so those are an `anyOf`.
fn split_kind(o: &Map<String, Value>, other: Combinator) -> Combinator {
    let types = o.get("type").and_then(Value::as_array);
    let overlapping = types.is_some_and(|ts| {
        ts.contains(&Value::from("integer")) && ts.contains(&Value::from("number"))
    });
    if overlapping || other == Combinator::AllOf {
        Combinator::AnyOf
    } else {
        other
    }
}

/// A schema whose `type` names several types, as one schema per type (the
/// keywords kept on each): `["string", "null"]` is `anyOf` a string schema
/// and a null schema.
fn split_types(o: &Map<String, Value>) -> Option<Vec<Value>> {
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
                Value::Object(one)
            })
            .collect(),
    )
}

fn distinct<'v>(subs: &[&'v Value]) -> Vec<&'v Value> {
    let mut seen: Vec<&Value> = Vec::with_capacity(subs.len());
    for sub in subs {
        if !seen.contains(sub) {
            seen.push(sub);
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
