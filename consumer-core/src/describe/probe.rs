//! Whether a message type has a schema, decided where `#[handler]` expands,
//! with the type known: autoref specialisation. The expansion calls
//! `(&&Probe::<T>::NEW).payload_type()`; method resolution picks
//! [`ViaJsonSchema`] (on `&Probe<T>`, found first) when `T` implements
//! `schemars::JsonSchema` and the `asyncapi` feature is on, and
//! [`ViaNothing`] (on `Probe<T>`, found after one dereference) otherwise.
//! So a handler of a type without a schema still compiles, and the
//! document that needs the schema is refused with an error naming the
//! type (see `Service::asyncapi`).

use std::marker::PhantomData;

use super::PayloadType;

/// Makes the schema of a type in a generator (`subschema_for::<T>`).
#[cfg(feature = "schemas")]
pub type SchemaFn = fn(&mut schemars::SchemaGenerator) -> schemars::Schema;

/// Stands for the type `T` in method resolution.
pub struct Probe<T: ?Sized>(PhantomData<fn() -> Box<T>>);

impl<T: ?Sized> Probe<T> {
    /// The probe.
    pub const NEW: Self = Self(PhantomData);
}

/// The fallback: `T` has no schema.
pub trait ViaNothing {
    /// The payload type, without schema.
    fn payload_type(&self) -> PayloadType;
}

impl<T: ?Sized> ViaNothing for Probe<T> {
    fn payload_type(&self) -> PayloadType {
        PayloadType::without_schema::<T>()
    }
}

/// The preferred path: `T` has a schema.
#[cfg(feature = "schemas")]
pub trait ViaJsonSchema {
    /// The payload type, with its schema.
    fn payload_type(&self) -> PayloadType;
}

#[cfg(feature = "schemas")]
impl<T: ?Sized + schemars::JsonSchema> ViaJsonSchema for &Probe<T> {
    fn payload_type(&self) -> PayloadType {
        PayloadType::of::<T>()
    }
}

#[cfg(feature = "schemas")]
impl PayloadType {
    /// The payload type of `T`, with its schema.
    pub fn of<T: ?Sized + schemars::JsonSchema>() -> Self {
        Self::with_schema::<T>(|generator| generator.subschema_for::<T>())
    }
}

#[cfg(all(test, feature = "schemas"))]
mod tests {
    use super::*;

    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)]
    struct WithSchema {
        a: u32,
    }

    #[allow(dead_code)]
    struct WithoutSchema;

    #[test]
    // The two borrows are the specialisation, as in the expansion.
    #[allow(clippy::needless_borrow)]
    fn the_probe_finds_a_schema_only_where_the_type_has_one() {
        assert!((&&Probe::<WithSchema>::NEW).payload_type().has_schema());
        let without = (&&Probe::<WithoutSchema>::NEW).payload_type();
        assert!(!without.has_schema());
        assert!(without.type_name().ends_with("WithoutSchema"));
    }
}
