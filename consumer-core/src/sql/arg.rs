//! [`Arg`]: one value bound to a statement, whichever the database.

/// One value bound to a [`Statement`](super::Statement)'s placeholder.
/// Each [`Dialect`](super::Dialect) binds it as its database takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Arg<'a> {
    /// Text (on PostgreSQL, a NUL becomes U+FFFD).
    Text(&'a str),
    /// Text or `NULL`.
    MaybeText(Option<&'a str>),
    /// An integer.
    Int(i64),
    /// An integer or `NULL`.
    MaybeInt(Option<i64>),
    /// Bytes.
    Bytes(&'a [u8]),
    /// A truth value.
    Bool(bool),
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(s: &'a str) -> Self {
        Self::Text(s)
    }
}

impl<'a> From<&'a String> for Arg<'a> {
    fn from(s: &'a String) -> Self {
        Self::Text(s)
    }
}

impl<'a> From<Option<&'a str>> for Arg<'a> {
    fn from(s: Option<&'a str>) -> Self {
        Self::MaybeText(s)
    }
}

impl From<i64> for Arg<'_> {
    fn from(n: i64) -> Self {
        Self::Int(n)
    }
}

impl From<i32> for Arg<'_> {
    fn from(n: i32) -> Self {
        Self::Int(i64::from(n))
    }
}

impl From<Option<i64>> for Arg<'_> {
    fn from(n: Option<i64>) -> Self {
        Self::MaybeInt(n)
    }
}

impl<'a> From<&'a [u8]> for Arg<'a> {
    fn from(b: &'a [u8]) -> Self {
        Self::Bytes(b)
    }
}

impl From<bool> for Arg<'_> {
    fn from(b: bool) -> Self {
        Self::Bool(b)
    }
}
