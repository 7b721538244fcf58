//! The console's dead letters on a broker's place (a RabbitMQ or SQS
//! dead-letter queue, a Kafka dead-letter topic, a Kinesis dead-letter
//! stream), read as `dead-letters list` reads them: each page takes a
//! snapshot of the place and releases it ([`dead_letters::selected`]), then
//! groups, pages or finds in it. A broker has no index to page on, so a
//! page costs a read of the whole place; the store's table is paged by the
//! database instead.
//!
//! A letter's handle is its id ([`Letter::id`]), stable across snapshots,
//! so the console's addresses survive letters coming and going.

use std::collections::{BTreeMap, HashSet};

use consumer_console::operator::{LetterGroup, LetterGroups, LetterQuery, StoredLetter};

use crate::args::{FilterArgs, PlaceArgs, Services};
use crate::dead_letters::{self, Selected};
use crate::error::{Error, Result};
use crate::letter::Letter;
use crate::places::Letters;

/// One read of the place.
struct Read {
    /// The letters selected, in the place's order.
    letters: Vec<Letter>,
    /// Which letters the journal says a replay sent, where the place keeps
    /// replayed letters.
    replayed: Option<HashSet<String>>,
    /// What the read left out, as a sentence.
    remarks: Option<String>,
}

/// A broker's place, named at the console's start.
#[derive(Debug)]
pub(super) struct BrokerPlace {
    services: Services,
    place: PlaceArgs,
    describe: String,
}

impl BrokerPlace {
    /// Opens the place once, to check it answers and that replays from it
    /// have somewhere to go (`to_topic` for a Kafka topic).
    pub(super) async fn open(
        services: &Services,
        place: &PlaceArgs,
        to_topic: Option<&str>,
    ) -> Result<Self> {
        let letters = Letters::open(services, place).await?;
        crate::replay::check_destination(&letters, to_topic)?;
        let describe = letters.describe();
        letters.release().await?;
        Ok(Self {
            services: services.clone(),
            place: place.clone(),
            describe,
        })
    }

    /// The place, as the pages name it.
    pub(super) fn describe(&self) -> &str {
        &self.describe
    }

    /// The letters `filter` selects, and which of them the journal says a
    /// replay sent (where the place keeps replayed letters).
    async fn read(&self, filter: &FilterArgs) -> Result<Read> {
        let Selected {
            letters,
            remarks,
            keeps_replayed,
        } = dead_letters::selected(&self.services, &self.place, filter).await?;
        let replayed = if keeps_replayed {
            dead_letters::replayed_ids(&self.services).await
        } else {
            None
        };
        Ok(Read {
            letters,
            replayed,
            remarks,
        })
    }

    /// The letters counted per handler and error, the largest groups
    /// first, and what the read left out.
    pub(super) async fn groups(&self, limit: u32) -> Result<LetterGroups> {
        let read = self.read(&FilterArgs::default()).await?;
        Ok(LetterGroups {
            groups: group(&read.letters, limit),
            left_out: read.remarks,
        })
    }

    /// One page of letters in the place's order, after the letter `query.after`.
    pub(super) async fn page(&self, query: &LetterQuery) -> Result<Vec<StoredLetter>> {
        let filter = FilterArgs {
            handler: query.handler.clone(),
            error_is: query.error.clone(),
            ..FilterArgs::default()
        };
        let Read {
            letters, replayed, ..
        } = self.read(&filter).await?;
        // A page after a letter that left the place (replayed from a queue,
        // say) has no place to start: say so rather than start again.
        let start = match &query.after {
            None => 0,
            Some(after) => {
                let i = letters.iter().position(|l| &l.id == after);
                i.map(|i| i + 1).ok_or_else(|| Error::NoSuchLetter {
                    id: after.clone(),
                    place: self.describe.clone(),
                })?
            }
        };
        Ok(letters
            .into_iter()
            .skip(start)
            .take(query.limit as usize)
            .map(|l| stored(l, replayed.as_ref()))
            .collect())
    }

    /// The letter with id `id`, or `None`.
    pub(super) async fn letter(&self, id: &str) -> Result<Option<StoredLetter>> {
        let filter = FilterArgs {
            ids: vec![id.to_owned()],
            ..FilterArgs::default()
        };
        let Read {
            letters, replayed, ..
        } = self.read(&filter).await?;
        Ok(letters
            .into_iter()
            .next()
            .map(|l| stored(l, replayed.as_ref())))
    }
}

fn stored(l: Letter, replayed: Option<&HashSet<String>>) -> StoredLetter {
    StoredLetter {
        handle: l.id.clone(),
        replayed: replayed.map(|ids| ids.contains(&l.id)),
        id: l.id,
        letter: l.letter,
        refusal: l.refusal,
        stored_at: l.stored_at,
    }
}

/// `letters` counted per handler and error, the largest groups first (then
/// by handler and error), at most `limit` groups.
fn group(letters: &[Letter], limit: u32) -> Vec<LetterGroup> {
    let mut groups: BTreeMap<(&str, &str), LetterGroup> = BTreeMap::new();
    for l in letters {
        let dl = &l.letter;
        groups
            .entry((dl.handler.as_str(), dl.error.as_str()))
            .and_modify(|g| {
                g.count += 1;
                g.first = g.first.min(dl.last_failure);
                g.last = g.last.max(dl.last_failure);
            })
            .or_insert_with(|| LetterGroup {
                handler: dl.handler.clone(),
                error: dl.error.clone(),
                count: 1,
                first: dl.last_failure,
                last: dl.last_failure,
            });
    }
    let mut groups: Vec<LetterGroup> = groups.into_values().collect();
    // Stable: equal counts keep the map's handler-then-error order.
    groups.sort_by_key(|g| std::cmp::Reverse(g.count));
    groups.truncate(limit as usize);
    groups
}

#[cfg(test)]
mod tests {
    use consumer_core::envelope::Origin;
    use consumer_core::{DeadLetter, DeadLetterKind, Envelope, Headers};

    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    struct Failed(&'static str);

    fn letter(handler: &str, error: &'static str, id: &str) -> Letter {
        let envelope = Envelope::from_parts(
            Vec::new().into(),
            Headers::new(),
            None,
            Origin::default(),
            || id.to_owned(),
        );
        Letter::new(DeadLetter::new(
            DeadLetterKind::Terminal,
            &Failed(error),
            &envelope,
            handler,
            1,
            None,
        ))
    }

    #[test]
    fn groups_are_counted_per_handler_and_error_largest_first() {
        let letters = [
            letter("book", "refused", "1"),
            letter("pay", "down", "2"),
            letter("book", "refused", "3"),
            letter("book", "down", "4"),
        ];
        let groups = group(&letters, 10);
        let counted: Vec<(&str, &str, i64)> = groups
            .iter()
            .map(|g| (g.handler.as_str(), g.error.as_str(), g.count))
            .collect();
        assert_eq!(
            counted,
            [
                ("book", "refused", 2),
                ("book", "down", 1),
                ("pay", "down", 1)
            ]
        );
        assert_eq!(group(&letters, 1).len(), 1);
    }
}
