//! The keywords of scalar values: `type` (integer read as number, `null`
//! in a `type` array), `enum`/`const`, string lengths and `pattern`, numeric
//! bounds and `multipleOf`; and the bounds' shared shape.

use serde_json::{Map, Value};

use crate::compat::report::Finding;
use crate::compat::rule::Rule;

/// The JSON types a schema accepts; `None` is every type.
pub(super) type Types<'v> = Option<Vec<&'v str>>;

/// Appends what the `type`s say; false when they share no type, so
/// nothing else is worth comparing.
pub(super) fn compare_types(out: &mut Vec<Finding>, w: &Types<'_>, r: &Types<'_>) -> bool {
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

/// The schema's `type` as a list; when absent, the types of its `enum` or
/// `const` values; `None` when nothing limits the type.
pub(super) fn types(o: &Map<String, Value>) -> Types<'_> {
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

pub(super) fn has_type(types: &Types<'_>, kind: &str) -> bool {
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

pub(super) fn enums(out: &mut Vec<Finding>, wo: &Map<String, Value>, ro: &Map<String, Value>) {
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

pub(super) fn strings(out: &mut Vec<Finding>, wo: &Map<String, Value>, ro: &Map<String, Value>) {
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

pub(super) fn numbers(out: &mut Vec<Finding>, wo: &Map<String, Value>, ro: &Map<String, Value>) {
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
pub(super) enum Bound {
    /// A bound values must stay below (`maximum`, `maxLength`, ...).
    Max([Rule; 4]),
    /// A bound values must stay above (`minimum`, `minLength`, ...).
    Min([Rule; 4]),
}

pub(super) fn bound(
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
