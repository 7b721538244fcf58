//! The walker's rules, each on the smallest schemas that show it.

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
    let r = json!({"type": "object", "properties": {}, "additionalProperties": {"type": "number"}});
    let found = compare(&w, &r).expect("compares");
    assert!(is_compatible(&found), "{found:?}");
    assert!(
        found
            .iter()
            .any(|f| f.rule == Rule::PropertyRemovedIsCoveredByPartiallyOpenContentModel)
    );
    let narrow =
        json!({"type": "object", "properties": {}, "additionalProperties": {"type": "string"}});
    assert!(breaks(w, narrow).contains(
        &"PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL@/properties/a".to_owned()
    ));
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
    assert!(breaks(patterned.clone(), without_a.clone()).contains(
        &"PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL@/properties/a".to_owned()
    ));
    // The writer's patterns may have sent anything under `a`.
    assert!(breaks(without_a, patterned).contains(
        &"PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL@/properties/a".to_owned()
    ));
}

#[test]
fn keywords_beside_a_readers_alternatives_constrain_too() {
    // A struct with its own field and a flattened enum.
    let shape = |extra: Value| {
        json!({
            "type": "object",
            "properties": {"id": extra},
            "required": ["id"],
            "oneOf": [
                {"type": "object", "properties": {"Circle": {"type": "number"}}, "required": ["Circle"]},
                {"type": "object", "properties": {"Square": {"type": "number"}}, "required": ["Square"]}
            ]
        })
    };
    let w = shape(json!({"type": "string"}));
    assert!(breaks(w.clone(), w.clone()).is_empty());
    let r = shape(json!({"type": "integer"}));
    assert_eq!(breaks(w, r), ["TYPE_CHANGED@/properties/id/type"]);
}

#[test]
fn a_writers_alternatives_all_readable_are_compatible() {
    let w = json!({"anyOf": [{"type": "integer"}, {"type": "number", "maximum": 5}]});
    assert!(breaks(w.clone(), json!({"type": "number"})).is_empty());
    assert_eq!(breaks(w, json!({"type": "integer"})), ["TYPE_CHANGED@"]);
}

#[test]
fn every_part_of_a_readers_all_of_must_read_the_writer() {
    let w = json!({"type": "string", "maxLength": 5});
    let r = json!({"allOf": [{"type": "string"}, {"maxLength": 10}]});
    assert!(breaks(w.clone(), r).is_empty());
    let strict = json!({"allOf": [{"type": "string"}, {"maxLength": 3}]});
    assert_eq!(breaks(w, strict), ["TYPE_CHANGED@"]);
}

#[test]
fn recursions_out_of_step_on_the_two_sides_terminate() {
    // The writer's cycle passes a `$ref` on odd levels, the reader's on
    // even ones: no level has both sides at a `$ref`.
    let w = json!({
        "type": "object",
        "properties": {"p": {"$ref": "#/definitions/A"}},
        "definitions": {"A": {"type": "object", "properties": {"p": {
            "type": "object", "properties": {"p": {"$ref": "#/definitions/A"}}
        }}}}
    });
    let r = json!({
        "type": "object",
        "properties": {"p": {"type": "object", "properties": {"p": {"$ref": "#/definitions/B"}}}},
        "definitions": {"B": {"type": "object", "properties": {"p": {
            "type": "object", "properties": {"p": {"$ref": "#/definitions/B"}}
        }}}}
    });
    assert!(breaks(w.clone(), r.clone()).is_empty());
    assert!(breaks(r, w).is_empty());
}

#[test]
fn a_recursive_nullable_type_through_a_type_array_terminates() {
    let list = json!({
        "$ref": "#/definitions/List",
        "definitions": {"List": {
            "type": ["object", "null"],
            "properties": {"next": {"$ref": "#/definitions/List"}}
        }}
    });
    let any_of = json!({
        "$ref": "#/definitions/List",
        "definitions": {"List": {"anyOf": [
            {"type": "object", "properties": {"next": {"$ref": "#/definitions/List"}}},
            {"type": "null"}
        ]}}
    });
    assert!(breaks(list.clone(), any_of.clone()).is_empty());
    assert!(breaks(any_of, list).is_empty());
}

#[test]
fn a_type_array_reads_as_a_one_of_of_its_types_too() {
    let w = json!({"type": ["string", "null"]});
    let r = json!({"oneOf": [{"type": "string"}, {"type": "null"}]});
    assert!(breaks(w.clone(), r.clone()).is_empty());
    assert!(breaks(r, w).is_empty());
}
