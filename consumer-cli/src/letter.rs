//! A dead letter as the tool sees it, wherever it lives: its id, the
//! framework's [`DeadLetter`], and what the place adds; and the filters
//! that select letters.

use consumer_core::{DeadLetter, DeadLetterKind};
use sha2::Digest;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::args::{FilterArgs, KindArg};
use crate::error::{Error, Result};

/// One dead letter.
#[derive(Debug, Clone)]
pub struct Letter {
    /// Stable id: the same letter has the same id in any place and after an
    /// export and import (see [`letter_id`]).
    pub id: String,
    /// The letter and its context.
    pub letter: DeadLetter,
    /// Why the broker refused it (letters in the dead-letter table only).
    pub refusal: Option<String>,
    /// When the table stored it (letters in the dead-letter table only).
    pub stored_at: Option<OffsetDateTime>,
}

impl Letter {
    /// Wraps `letter`, computing its id.
    pub fn new(letter: DeadLetter) -> Self {
        Self {
            id: letter_id(&letter),
            letter,
            refusal: None,
            stored_at: None,
        }
    }
}

/// The first 12 hex digits of SHA-256 over handler, message id and last
/// failure (in milliseconds, the table's precision). A handler dead-letters
/// a message once per failure, so a letter replayed and failed again is a
/// new letter with a new id.
pub fn letter_id(letter: &DeadLetter) -> String {
    let ms = letter.last_failure.unix_timestamp_nanos() / 1_000_000;
    let mut hash = sha2::Sha256::new();
    hash.update(letter.handler.as_bytes());
    hash.update([0]);
    hash.update(letter.message_id.as_bytes());
    hash.update([0]);
    hash.update(ms.to_string().as_bytes());
    hash.finalize()
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Which letters a command works on.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    kind: Option<DeadLetterKind>,
    handler: Option<String>,
    error: Option<String>,
    error_is: Option<String>,
    key: Option<String>,
    since: Option<OffsetDateTime>,
    until: Option<OffsetDateTime>,
    ids: Vec<String>,
}

impl Filter {
    /// The filter the flags describe.
    pub fn from_args(args: &FilterArgs) -> Result<Self> {
        let now = OffsetDateTime::now_utc();
        Ok(Self {
            kind: args.kind.map(|k| match k {
                KindArg::Poison => DeadLetterKind::Poison,
                KindArg::Terminal => DeadLetterKind::Terminal,
                KindArg::Exhausted => DeadLetterKind::Exhausted,
            }),
            handler: args.handler.clone(),
            error: args.error.clone(),
            error_is: args.error_is.clone(),
            key: args.key.clone(),
            since: args
                .since
                .as_deref()
                .map(|t| parse_time(t, now, "--since"))
                .transpose()?,
            until: args
                .until
                .as_deref()
                .map(|t| parse_time(t, now, "--until"))
                .transpose()?,
            ids: args.ids.clone(),
        })
    }

    /// Whether `letter` is selected.
    pub fn matches(&self, letter: &Letter) -> bool {
        let dl = &letter.letter;
        self.kind.is_none_or(|k| dl.kind == k)
            && self.handler.as_ref().is_none_or(|h| &dl.handler == h)
            && self.error.as_ref().is_none_or(|text| {
                dl.error.contains(text.as_str())
                    || dl.causes.iter().any(|c| c.contains(text.as_str()))
            })
            && self.error_is.as_ref().is_none_or(|e| &dl.error == e)
            && self.key.as_ref().is_none_or(|k| dl.key.as_ref() == Some(k))
            && self.since.is_none_or(|t| dl.last_failure >= t)
            && self.until.is_none_or(|t| dl.last_failure < t)
            && (self.ids.is_empty() || self.ids.contains(&letter.id))
    }
}

/// RFC 3339, or a duration (`90m`, `2h`, `3days`) before `now`; a
/// duration that reaches before the calendar's first day means that day.
fn parse_time(text: &str, now: OffsetDateTime, flag: &str) -> Result<OffsetDateTime> {
    if let Ok(t) = OffsetDateTime::parse(text, &Rfc3339) {
        return Ok(t);
    }
    match humantime::parse_duration(text) {
        Ok(ago) => Ok(time::Duration::try_from(ago)
            .ok()
            .and_then(|ago| now.checked_sub(ago))
            .unwrap_or(time::PrimitiveDateTime::MIN.assume_utc())),
        Err(_) => Err(Error::Usage(format!(
            "{flag} {text:?} is neither an RFC 3339 time (2026-01-31T12:00:00Z) nor a duration ago (2h)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_or_durations_ago() {
        let now = OffsetDateTime::now_utc();
        let t = parse_time("2h", now, "--since").expect("duration");
        assert_eq!(now - t, time::Duration::hours(2));
        assert!(parse_time("2026-01-31T12:00:00Z", now, "--since").is_ok());
        assert!(matches!(
            parse_time("yesterday", now, "--since"),
            Err(Error::Usage(_))
        ));
        // Longer ago than the calendar reaches: its first day, no panic.
        let first = time::PrimitiveDateTime::MIN.assume_utc();
        assert_eq!(
            parse_time("13000y", now, "--since").expect("far back"),
            first
        );
        assert_eq!(
            parse_time("18446744073709551615s", now, "--since").expect("u64 seconds"),
            first
        );
    }
}
