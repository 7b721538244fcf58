//! Text as PostgreSQL takes it: `TEXT` and `JSONB` refuse the NUL
//! character (SQLSTATE 22021, 22P05) however it was produced, so every
//! string that input can put into a row passes through here (the runtime's
//! own statements, and those of the parts built on it, such as sagas). A NUL
//! becomes U+FFFD, the replacement character; nothing else changes.

use std::borrow::Cow;

/// `s` with each NUL replaced by U+FFFD (borrowed when it has none).
pub fn storable(s: &str) -> Cow<'_, str> {
    if s.contains('\0') {
        Cow::Owned(s.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_nul_is_replaced() {
        assert!(matches!(storable("order-1"), Cow::Borrowed("order-1")));
        assert_eq!(storable("a\0b\0"), "a\u{FFFD}b\u{FFFD}");
    }
}
