//! The kinds of difference between a writer's and a reader's schema, named
//! as Confluent Schema Registry names them, each compatible or not.

use std::fmt;

macro_rules! rules {
    ($( $(#[doc = $doc:literal])+ $variant:ident = $name:literal => $compatible:literal, )+) => {
        /// One kind of difference between the schema data is written with and
        /// the schema it is read with, under Confluent's JSON Schema name
        /// (`TYPE_NARROWED`, `PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL`, ...).
        ///
        /// A compatible rule ([`Rule::is_compatible`]) means every value the
        /// writer's schema accepts still passes the reader's at that place;
        /// an incompatible one means some may not.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum Rule {
            $( $(#[doc = $doc])+ $variant, )+
        }

        impl Rule {
            /// Every rule the checker can report, in declaration order.
            pub const ALL: &'static [Rule] = &[$(Rule::$variant),+];

            /// Confluent's name for the rule, `SCREAMING_SNAKE_CASE`.
            pub fn name(self) -> &'static str {
                match self {
                    $(Rule::$variant => $name,)+
                }
            }

            /// Whether data written under the writer's schema still reads
            /// under the reader's despite this difference.
            pub fn is_compatible(self) -> bool {
                match self {
                    $(Rule::$variant => $compatible,)+
                }
            }
        }
    };
}

rules! {
    /// `$id` changed: an annotation, no value is rejected for it.
    IdChanged = "ID_CHANGED" => true,
    /// `description` changed: an annotation.
    DescriptionChanged = "DESCRIPTION_CHANGED" => true,
    /// `title` changed: an annotation.
    TitleChanged = "TITLE_CHANGED" => true,
    /// `default` changed: an annotation for validation.
    DefaultChanged = "DEFAULT_CHANGED" => true,
    /// The reader constrains a place the writer left unconstrained (an
    /// `items` schema where there was none).
    SchemaAdded = "SCHEMA_ADDED" => false,
    /// The reader no longer constrains a place the writer constrained.
    SchemaRemoved = "SCHEMA_REMOVED" => true,
    /// The reader accepts more JSON types (`integer` to `number`, a type
    /// added to a `type` array, `null` made acceptable).
    TypeExtended = "TYPE_EXTENDED" => true,
    /// The reader accepts fewer JSON types (`number` to `integer`, `null`
    /// no longer accepted).
    TypeNarrowed = "TYPE_NARROWED" => false,
    /// The reader's types and the writer's are unrelated (`string` to
    /// `integer`, a schema to an unrelated one).
    TypeChanged = "TYPE_CHANGED" => false,
    /// The reader bounds a string's length where the writer did not.
    MaxLengthAdded = "MAX_LENGTH_ADDED" => false,
    /// The reader lifts the writer's bound on a string's length.
    MaxLengthRemoved = "MAX_LENGTH_REMOVED" => true,
    /// The reader allows longer strings.
    MaxLengthIncreased = "MAX_LENGTH_INCREASED" => true,
    /// The reader allows only shorter strings.
    MaxLengthDecreased = "MAX_LENGTH_DECREASED" => false,
    /// The reader asks for a minimum length the writer did not.
    MinLengthAdded = "MIN_LENGTH_ADDED" => false,
    /// The reader drops the writer's minimum length.
    MinLengthRemoved = "MIN_LENGTH_REMOVED" => true,
    /// The reader asks for longer strings.
    MinLengthIncreased = "MIN_LENGTH_INCREASED" => false,
    /// The reader accepts shorter strings.
    MinLengthDecreased = "MIN_LENGTH_DECREASED" => true,
    /// The reader asks strings to match a pattern the writer did not.
    PatternAdded = "PATTERN_ADDED" => false,
    /// The reader drops the writer's pattern.
    PatternRemoved = "PATTERN_REMOVED" => true,
    /// The reader's pattern differs from the writer's (no attempt is made
    /// to prove one contains the other).
    PatternChanged = "PATTERN_CHANGED" => false,
    /// The reader sets a `maximum` the writer did not.
    MaximumAdded = "MAXIMUM_ADDED" => false,
    /// The reader drops the writer's `maximum`.
    MaximumRemoved = "MAXIMUM_REMOVED" => true,
    /// The reader's `maximum` is higher.
    MaximumIncreased = "MAXIMUM_INCREASED" => true,
    /// The reader's `maximum` is lower.
    MaximumDecreased = "MAXIMUM_DECREASED" => false,
    /// The reader sets a `minimum` the writer did not.
    MinimumAdded = "MINIMUM_ADDED" => false,
    /// The reader drops the writer's `minimum`.
    MinimumRemoved = "MINIMUM_REMOVED" => true,
    /// The reader's `minimum` is higher.
    MinimumIncreased = "MINIMUM_INCREASED" => false,
    /// The reader's `minimum` is lower.
    MinimumDecreased = "MINIMUM_DECREASED" => true,
    /// The reader sets an `exclusiveMaximum` the writer did not.
    ExclusiveMaximumAdded = "EXCLUSIVE_MAXIMUM_ADDED" => false,
    /// The reader drops the writer's `exclusiveMaximum`.
    ExclusiveMaximumRemoved = "EXCLUSIVE_MAXIMUM_REMOVED" => true,
    /// The reader's `exclusiveMaximum` is higher.
    ExclusiveMaximumIncreased = "EXCLUSIVE_MAXIMUM_INCREASED" => true,
    /// The reader's `exclusiveMaximum` is lower.
    ExclusiveMaximumDecreased = "EXCLUSIVE_MAXIMUM_DECREASED" => false,
    /// The reader sets an `exclusiveMinimum` the writer did not.
    ExclusiveMinimumAdded = "EXCLUSIVE_MINIMUM_ADDED" => false,
    /// The reader drops the writer's `exclusiveMinimum`.
    ExclusiveMinimumRemoved = "EXCLUSIVE_MINIMUM_REMOVED" => true,
    /// The reader's `exclusiveMinimum` is higher.
    ExclusiveMinimumIncreased = "EXCLUSIVE_MINIMUM_INCREASED" => false,
    /// The reader's `exclusiveMinimum` is lower.
    ExclusiveMinimumDecreased = "EXCLUSIVE_MINIMUM_DECREASED" => true,
    /// The reader asks for a `multipleOf` the writer did not.
    MultipleOfAdded = "MULTIPLE_OF_ADDED" => false,
    /// The reader drops the writer's `multipleOf`.
    MultipleOfRemoved = "MULTIPLE_OF_REMOVED" => true,
    /// The reader's `multipleOf` is a multiple of the writer's: fewer
    /// values pass.
    MultipleOfExpanded = "MULTIPLE_OF_EXPANDED" => false,
    /// The writer's `multipleOf` is a multiple of the reader's: every value
    /// written passes.
    MultipleOfReduced = "MULTIPLE_OF_REDUCED" => true,
    /// The two `multipleOf` are not multiples of one another.
    MultipleOfChanged = "MULTIPLE_OF_CHANGED" => false,
    /// A property both know becomes required in the reader, with no default.
    RequiredAttributeAdded = "REQUIRED_ATTRIBUTE_ADDED" => false,
    /// A property both know becomes required in the reader, with a default.
    RequiredAttributeWithDefaultAdded = "REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED" => true,
    /// A property required by the writer is optional for the reader.
    RequiredAttributeRemoved = "REQUIRED_ATTRIBUTE_REMOVED" => true,
    /// The reader sets a `maxProperties` the writer did not.
    MaxPropertiesAdded = "MAX_PROPERTIES_ADDED" => false,
    /// The reader drops the writer's `maxProperties`.
    MaxPropertiesRemoved = "MAX_PROPERTIES_REMOVED" => true,
    /// The reader's `maxProperties` is higher.
    MaxPropertiesIncreased = "MAX_PROPERTIES_INCREASED" => true,
    /// The reader's `maxProperties` is lower.
    MaxPropertiesDecreased = "MAX_PROPERTIES_DECREASED" => false,
    /// The reader sets a `minProperties` the writer did not.
    MinPropertiesAdded = "MIN_PROPERTIES_ADDED" => false,
    /// The reader drops the writer's `minProperties`.
    MinPropertiesRemoved = "MIN_PROPERTIES_REMOVED" => true,
    /// The reader's `minProperties` is higher.
    MinPropertiesIncreased = "MIN_PROPERTIES_INCREASED" => false,
    /// The reader's `minProperties` is lower.
    MinPropertiesDecreased = "MIN_PROPERTIES_DECREASED" => true,
    /// The writer's model was closed (`additionalProperties: false`, serde's
    /// `deny_unknown_fields`) and the reader's accepts extra properties.
    AdditionalPropertiesAdded = "ADDITIONAL_PROPERTIES_ADDED" => true,
    /// The reader closes a model the writer left open: unknown properties
    /// the writer may send are rejected.
    AdditionalPropertiesRemoved = "ADDITIONAL_PROPERTIES_REMOVED" => false,
    /// The reader's schema for extra properties accepts anything where the
    /// writer's constrained them.
    AdditionalPropertiesExtended = "ADDITIONAL_PROPERTIES_EXTENDED" => true,
    /// The reader constrains extra properties (a map's values) the writer
    /// left unconstrained.
    AdditionalPropertiesNarrowed = "ADDITIONAL_PROPERTIES_NARROWED" => false,
    /// The reader declares a property the writer's open model did not: data
    /// written earlier may carry that name with any value.
    PropertyAddedToOpenContentModel = "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL" => false,
    /// The reader declares, with an empty schema, a property the writer's
    /// open model did not.
    PropertyWithEmptySchemaAddedToOpenContentModel = "PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL" => true,
    /// The reader declares and requires a property the writer's closed
    /// model cannot send.
    RequiredPropertyAddedToUnopenContentModel = "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL" => false,
    /// The reader requires a new property but has a default for it.
    RequiredPropertyWithDefaultAddedToUnopenContentModel = "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL" => true,
    /// The reader declares an optional property the writer's closed model
    /// cannot send.
    OptionalPropertyAddedToUnopenContentModel = "OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL" => true,
    /// The reader drops a property and its model is open: it still accepts
    /// the property.
    PropertyRemovedFromOpenContentModel = "PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL" => true,
    /// The reader drops a property and its model is closed: the writer's
    /// property is now rejected.
    PropertyRemovedFromClosedContentModel = "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL" => false,
    /// The reader drops a property the writer declared `false` (never sent).
    PropertyWithFalseRemovedFromClosedContentModel = "PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL" => true,
    /// The reader declares a property the writer's `additionalProperties`
    /// schema covered, with a compatible schema.
    PropertyAddedIsCoveredByPartiallyOpenContentModel = "PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" => true,
    /// The reader declares a property the writer's `additionalProperties`
    /// schema covered, with an incompatible schema.
    PropertyAddedNotCoveredByPartiallyOpenContentModel = "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" => false,
    /// The reader drops a property its `additionalProperties` schema still
    /// accepts.
    PropertyRemovedIsCoveredByPartiallyOpenContentModel = "PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" => true,
    /// The reader drops a property its `additionalProperties` schema does
    /// not accept as the writer sends it.
    PropertyRemovedNotCoveredByPartiallyOpenContentModel = "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" => false,
    /// The reader sets a `maxItems` the writer did not.
    MaxItemsAdded = "MAX_ITEMS_ADDED" => false,
    /// The reader drops the writer's `maxItems`.
    MaxItemsRemoved = "MAX_ITEMS_REMOVED" => true,
    /// The reader's `maxItems` is higher.
    MaxItemsIncreased = "MAX_ITEMS_INCREASED" => true,
    /// The reader's `maxItems` is lower.
    MaxItemsDecreased = "MAX_ITEMS_DECREASED" => false,
    /// The reader sets a `minItems` the writer did not.
    MinItemsAdded = "MIN_ITEMS_ADDED" => false,
    /// The reader drops the writer's `minItems`.
    MinItemsRemoved = "MIN_ITEMS_REMOVED" => true,
    /// The reader's `minItems` is higher.
    MinItemsIncreased = "MIN_ITEMS_INCREASED" => false,
    /// The reader's `minItems` is lower.
    MinItemsDecreased = "MIN_ITEMS_DECREASED" => true,
    /// The reader asks for unique items where the writer did not.
    UniqueItemsAdded = "UNIQUE_ITEMS_ADDED" => false,
    /// The reader no longer asks for unique items.
    UniqueItemsRemoved = "UNIQUE_ITEMS_REMOVED" => true,
    /// The writer's tuple was closed (`additionalItems: false`) and the
    /// reader's accepts more items.
    AdditionalItemsAdded = "ADDITIONAL_ITEMS_ADDED" => true,
    /// The reader closes a tuple the writer left open.
    AdditionalItemsRemoved = "ADDITIONAL_ITEMS_REMOVED" => false,
    /// The reader's schema for extra tuple items accepts anything.
    AdditionalItemsExtended = "ADDITIONAL_ITEMS_EXTENDED" => true,
    /// The reader constrains extra tuple items the writer did not.
    AdditionalItemsNarrowed = "ADDITIONAL_ITEMS_NARROWED" => false,
    /// The reader adds a tuple position the writer's open tuple did not
    /// declare.
    ItemAddedToOpenContentModel = "ITEM_ADDED_TO_OPEN_CONTENT_MODEL" => false,
    /// The reader adds a tuple position, with an empty schema, to an open
    /// tuple.
    ItemWithEmptySchemaAddedToOpenContentModel = "ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL" => true,
    /// The reader adds a tuple position the writer's closed tuple never
    /// fills.
    ItemAddedToClosedContentModel = "ITEM_ADDED_TO_CLOSED_CONTENT_MODEL" => true,
    /// The reader drops a tuple position and its tuple is open.
    ItemRemovedFromOpenContentModel = "ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL" => true,
    /// The reader drops a tuple position and its tuple is closed.
    ItemRemovedFromClosedContentModel = "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL" => false,
    /// The reader drops a tuple position the writer declared `false`.
    ItemWithFalseRemovedFromClosedContentModel = "ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL" => true,
    /// The reader adds a tuple position the writer's `additionalItems`
    /// covered, compatibly.
    ItemAddedIsCoveredByPartiallyOpenContentModel = "ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" => true,
    /// The reader adds a tuple position the writer's `additionalItems`
    /// covered, incompatibly.
    ItemAddedNotCoveredByPartiallyOpenContentModel = "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" => false,
    /// The reader drops a tuple position its `additionalItems` accepts.
    ItemRemovedIsCoveredByPartiallyOpenContentModel = "ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" => true,
    /// The reader drops a tuple position its `additionalItems` rejects.
    ItemRemovedNotCoveredByPartiallyOpenContentModel = "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" => false,
    /// The reader's `enum` (or `const`) accepts every value the writer's
    /// does, and more, or the reader has none.
    EnumArrayExtended = "ENUM_ARRAY_EXTENDED" => true,
    /// The reader's `enum` lacks values the writer's has, or the reader
    /// adds an `enum` where the writer had none.
    EnumArrayNarrowed = "ENUM_ARRAY_NARROWED" => false,
    /// The two `enum`s each have values the other lacks.
    EnumArrayChanged = "ENUM_ARRAY_CHANGED" => false,
    /// `allOf`/`oneOf` became `anyOf` (or a singleton became `oneOf`).
    CombinedTypeExtended = "COMBINED_TYPE_EXTENDED" => true,
    /// The combination keyword changed in a way that rejects values
    /// (`anyOf` to `oneOf` or `allOf`).
    CombinedTypeChanged = "COMBINED_TYPE_CHANGED" => false,
    /// Some of the writer's alternatives match none of the reader's.
    CombinedTypeSubschemasChanged = "COMBINED_TYPE_SUBSCHEMAS_CHANGED" => false,
    /// The reader's `allOf` has more parts: more constraints.
    ProductTypeExtended = "PRODUCT_TYPE_EXTENDED" => false,
    /// The reader's `allOf` has fewer parts.
    ProductTypeNarrowed = "PRODUCT_TYPE_NARROWED" => true,
    /// The reader's `anyOf`/`oneOf` has more alternatives (a variant added,
    /// `Option` made of a type).
    SumTypeExtended = "SUM_TYPE_EXTENDED" => true,
    /// The reader's `anyOf`/`oneOf` has fewer alternatives (a variant
    /// removed).
    SumTypeNarrowed = "SUM_TYPE_NARROWED" => false,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl serde::Serialize for Rule {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::Rule;

    #[test]
    fn names_are_confluents() {
        assert_eq!(
            Rule::PropertyAddedToOpenContentModel.name(),
            "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"
        );
        assert_eq!(Rule::TypeNarrowed.to_string(), "TYPE_NARROWED");
        assert_eq!(Rule::IdChanged.name(), "ID_CHANGED");
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<_> = Rule::ALL.iter().map(|r| r.name()).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len());
    }
}
