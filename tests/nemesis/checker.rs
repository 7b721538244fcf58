//! The checker: reads one [history](super::history) and finds every
//! event lost, applied twice, applied out of its aggregate's commit order,
//! applied without a committed cause, dead-lettered without being poison,
//! or whose dedup row disagrees with its effects, and (in
//! [`settlement_rules`](super::settlement_rules)) every settlement whose
//! saga's end its events do not explain. Each anomaly comes with
//! the events around it: the event's own records, and the faults injected
//! shortly before.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use super::history::{Event, Kind};

/// How far back from an anomaly's first record the report looks for
/// faults (microseconds).
const FAULTS_BEFORE_US: i64 = 5_000_000;

/// The classes of anomaly the checker finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// Committed, and never applied (nor dead-lettered, for a poison one).
    Lost,
    /// Applied more than once.
    AppliedTwice,
    /// Applied after an event its aggregate committed later.
    Reordered,
    /// Applied with no commit of that event in the history.
    WithoutCause,
    /// Dead-lettered, and not one of the workload's poison messages (or a
    /// poison one applied).
    UnexpectedDeadLetter,
    /// A dedup row without an effect, or an effect without a dedup row.
    DedupDisagrees,
    /// A saga whose status its events do not explain: completed without
    /// its confirmation, failed for another reason than its timeout, not
    /// finished, or saving more transitions than it had events.
    SagaUnexplained,
}

/// An anomaly found, before the events around it are gathered: its class,
/// what it is, and the event and aggregate it is about.
pub type Found<'h> = (Class, String, Option<&'h str>, Option<&'h str>);

/// One anomaly and the records that show it.
#[derive(Debug, Clone)]
pub struct Anomaly {
    pub class: Class,
    pub what: String,
    /// The events around it, in history order.
    pub around: Vec<Event>,
}

/// What the checker found.
#[derive(Debug, Default)]
pub struct Report {
    /// Events by kind.
    pub counts: BTreeMap<&'static str, usize>,
    /// Faults by what they were (their first word: `kill`, `pause`, ...).
    pub faults: BTreeMap<String, usize>,
    pub anomalies: Vec<Anomaly>,
}

impl Report {
    /// The anomalies of `class`.
    pub fn of(&self, class: Class) -> usize {
        self.anomalies.iter().filter(|a| a.class == class).count()
    }
}

/// Checks `history` (in time order, as [`load`](super::history::load)
/// returns it).
pub fn check(history: &[Event]) -> Report {
    let mut report = Report::default();
    for e in history {
        *report.counts.entry(e.kind.name()).or_default() += 1;
        if let Kind::Fault { what } = &e.kind {
            // The verb, and what it was done to when that is not a
            // process: "kill", "cut", "cut PostgreSQL", "restart broker".
            let mut class = what.split_whitespace().next().unwrap_or("").to_owned();
            for target in ["PostgreSQL", "broker"] {
                if what.contains(target) {
                    class = format!("{class} {target}");
                }
            }
            *report.faults.entry(class).or_default() += 1;
        }
    }
    let mut committed: HashMap<&str, (&str, i64, bool)> = HashMap::new();
    let mut commits_by_aggregate: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    let mut applied: HashMap<&str, usize> = HashMap::new();
    let mut applied_order: BTreeMap<&str, Vec<(&str, i64)>> = BTreeMap::new();
    let mut dead: HashSet<&str> = HashSet::new();
    let mut dedup: HashMap<&str, usize> = HashMap::new();
    for e in history {
        match &e.kind {
            Kind::Committed {
                event_id,
                aggregate,
                seq,
                poison,
            } => {
                committed.insert(event_id, (aggregate, *seq, *poison));
                if !poison {
                    commits_by_aggregate
                        .entry(aggregate)
                        .or_default()
                        .push(*seq);
                }
            }
            Kind::Applied {
                event_id,
                aggregate,
                seq,
            } => {
                *applied.entry(event_id).or_default() += 1;
                applied_order
                    .entry(aggregate)
                    .or_default()
                    .push((event_id, *seq));
            }
            Kind::DeadLettered { event_id } => {
                dead.insert(event_id);
            }
            Kind::DedupRow { event_id } => *dedup.entry(event_id).or_default() += 1,
            _ => {}
        }
    }
    let mut found: Vec<Found<'_>> = Vec::new();
    let mut ids: Vec<&&str> = committed.keys().collect();
    ids.sort();
    for id in ids {
        let (aggregate, seq, poison) = committed[*id];
        let times = applied.get(*id).copied().unwrap_or(0);
        if poison {
            if times > 0 {
                found.push((
                    Class::UnexpectedDeadLetter,
                    format!("poison event {id} ({aggregate} #{seq}) was applied {times} time(s)"),
                    Some(id),
                    Some(aggregate),
                ));
            } else if !dead.contains(*id) {
                found.push((
                    Class::Lost,
                    format!("poison event {id} ({aggregate} #{seq}) was neither applied nor dead-lettered"),
                    Some(id),
                    Some(aggregate),
                ));
            }
            continue;
        }
        if times == 0 {
            let why = if dead.contains(*id) {
                "dead-lettered instead"
            } else {
                "never applied"
            };
            found.push((
                Class::Lost,
                format!("event {id} ({aggregate} #{seq}) was committed and {why}"),
                Some(id),
                Some(aggregate),
            ));
        } else if times > 1 {
            found.push((
                Class::AppliedTwice,
                format!("event {id} ({aggregate} #{seq}) was applied {times} times"),
                Some(id),
                Some(aggregate),
            ));
        }
    }
    for (id, times) in &applied {
        if !committed.contains_key(id) {
            found.push((
                Class::WithoutCause,
                format!("an effect of event {id} ({times} time(s)) with no commit of it"),
                Some(id),
                None,
            ));
        }
    }
    for id in &dead {
        if !committed.get(id).is_some_and(|c| c.2) {
            found.push((
                Class::UnexpectedDeadLetter,
                format!("event {id} was dead-lettered and is not a poison message"),
                Some(id),
                committed.get(id).map(|c| c.0),
            ));
        }
    }
    for (aggregate, effects) in &applied_order {
        let Some(commits) = commits_by_aggregate.get(aggregate) else {
            continue;
        };
        let rank: HashMap<i64, usize> = commits.iter().enumerate().map(|(i, s)| (*s, i)).collect();
        let mut last: Option<(&str, i64, usize)> = None;
        let mut seen = HashSet::new();
        for (id, seq) in effects {
            // A second effect of one event is AppliedTwice's, not an inversion.
            if !seen.insert(*id) {
                continue;
            }
            let Some(&r) = rank.get(seq) else { continue };
            if let Some((before_id, before_seq, before_rank)) = last
                && r < before_rank
            {
                found.push((
                    Class::Reordered,
                    format!(
                        "{aggregate}: #{seq} ({id}) was applied after #{before_seq} ({before_id}), committed before it"
                    ),
                    Some(id),
                    Some(aggregate),
                ));
            }
            if last.is_none_or(|(_, _, lr)| r > lr) {
                last = Some((id, *seq, r));
            }
        }
    }
    let effect_ids: HashSet<&str> = applied.keys().copied().collect();
    let dedup_ids: HashSet<&str> = dedup.keys().copied().collect();
    for id in effect_ids.symmetric_difference(&dedup_ids) {
        let has = if dedup_ids.contains(id) {
            "a dedup row and no effect"
        } else {
            "an effect and no dedup row"
        };
        found.push((
            Class::DedupDisagrees,
            format!("event {id} has {has}"),
            Some(id),
            committed.get(id).map(|c| c.0),
        ));
    }
    super::settlement_rules::check(history, &mut found);
    found.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    report.anomalies = found
        .into_iter()
        .map(|(class, what, id, aggregate)| Anomaly {
            class,
            what,
            around: around(history, id, aggregate),
        })
        .collect();
    report
}

/// The records of `id`, the neighbours of `aggregate`'s effects, and the
/// faults in the few seconds before the first of them.
fn around(history: &[Event], id: Option<&str>, aggregate: Option<&str>) -> Vec<Event> {
    let own: Vec<usize> = history
        .iter()
        .enumerate()
        .filter(|(_, e)| id.is_some() && e.kind.event_id() == id)
        .map(|(i, _)| i)
        .collect();
    let first = own.first().map_or(i64::MIN, |&i| history[i].at_us);
    let last = own.last().map_or(i64::MAX, |&i| history[i].at_us);
    history
        .iter()
        .filter(|e| {
            let mine = id.is_some() && e.kind.event_id() == id;
            let neighbour = aggregate.is_some()
                && e.kind.aggregate() == aggregate
                && e.at_us >= first.saturating_sub(FAULTS_BEFORE_US)
                && e.at_us <= last.saturating_add(FAULTS_BEFORE_US)
                && matches!(e.kind, Kind::Applied { .. });
            let fault = matches!(e.kind, Kind::Fault { .. })
                && e.at_us >= first.saturating_sub(FAULTS_BEFORE_US)
                && e.at_us <= last;
            mine || neighbour || fault
        })
        .cloned()
        .collect()
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let counts: Vec<String> = self
            .counts
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        writeln!(f, "events: {}", counts.join(", "))?;
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        writeln!(f, "faults by kind: {}", faults.join(", "))?;
        writeln!(f, "anomalies: {}", self.anomalies.len())?;
        let t0 = self
            .anomalies
            .iter()
            .flat_map(|a| a.around.first())
            .map(|e| e.at_us)
            .min()
            .unwrap_or(0);
        for a in &self.anomalies {
            writeln!(f, "- {:?}: {}", a.class, a.what)?;
            for e in &a.around {
                let line = serde_json::to_string(&e.kind).unwrap_or_default();
                writeln!(
                    f,
                    "    +{:>10.3} s {:<12} {line}",
                    (e.at_us - t0) as f64 / 1e6,
                    e.process
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn committed(id: &str, aggregate: &str, seq: i64, poison: bool) -> Kind {
        Kind::Committed {
            event_id: id.to_owned(),
            aggregate: aggregate.to_owned(),
            seq,
            poison,
        }
    }

    fn applied(id: &str, aggregate: &str, seq: i64) -> Kind {
        Kind::Applied {
            event_id: id.to_owned(),
            aggregate: aggregate.to_owned(),
            seq,
        }
    }

    fn dedup(id: &str) -> Kind {
        Kind::DedupRow {
            event_id: id.to_owned(),
        }
    }

    /// Two aggregates of three events each, one poison dead-lettered,
    /// every other applied once in order with its dedup row, a fault in
    /// the middle.
    fn clean() -> Vec<Event> {
        let mut h = Vec::new();
        let mut t = 0;
        let mut next = || {
            t += 10;
            t
        };
        for a in ["a", "b"] {
            for s in 1..=3 {
                let poison = a == "b" && s == 2;
                h.push(Event::at(
                    next(),
                    "w1",
                    committed(&format!("{a}{s}"), a, s, poison),
                ));
            }
        }
        h.push(Event::at(
            next(),
            "nemesis",
            Kind::Fault {
                what: "kill relay-1".to_owned(),
            },
        ));
        for a in ["a", "b"] {
            for s in 1..=3 {
                let id = format!("{a}{s}");
                h.push(Event::at(
                    next(),
                    "relay-1",
                    Kind::Published {
                        event_id: id.clone(),
                    },
                ));
                h.push(Event::at(
                    next(),
                    "c1",
                    Kind::Delivered {
                        event_id: id.clone(),
                        attempt: 1,
                    },
                ));
                if a == "b" && s == 2 {
                    h.push(Event::at(
                        next(),
                        "consumers",
                        Kind::DeadLettered { event_id: id },
                    ));
                } else {
                    h.push(Event::at(next(), "c1", applied(&id, a, s)));
                    h.push(Event::at(next(), "consumers", dedup(&id)));
                }
            }
        }
        h
    }

    fn only(report: &Report, class: Class) {
        assert_eq!(
            report.of(class),
            1,
            "one {class:?} anomaly expected:\n{report}"
        );
        assert_eq!(
            report.anomalies.len(),
            1,
            "and nothing else reported:\n{report}"
        );
        assert!(
            !report.anomalies[0].around.is_empty(),
            "the anomaly comes with its events"
        );
    }

    fn without(h: Vec<Event>, drop: impl Fn(&Event) -> bool) -> Vec<Event> {
        h.into_iter().filter(|e| !drop(e)).collect()
    }

    #[test]
    fn a_clean_history_passes_with_its_counts() {
        let report = check(&clean());
        assert!(report.anomalies.is_empty(), "{report}");
        assert_eq!(report.counts["committed"], 6);
        assert_eq!(report.counts["applied"], 5);
        assert_eq!(report.counts["dead-lettered"], 1);
        assert_eq!(report.faults["kill"], 1);
    }

    #[test]
    fn an_event_committed_and_never_applied_is_lost() {
        let h = without(
            clean(),
            |e| matches!(&e.kind, Kind::Applied { event_id, .. } | Kind::DedupRow { event_id } if event_id == "a2"),
        );
        let report = check(&h);
        only(&report, Class::Lost);
        assert!(
            report.anomalies[0]
                .around
                .iter()
                .any(|e| matches!(e.kind, Kind::Fault { .. })),
            "the fault before it is shown:\n{report}"
        );
    }

    #[test]
    fn an_event_applied_twice_is_reported() {
        let mut h = clean();
        h.push(Event::at(1_000, "c2", applied("a3", "a", 3)));
        only(&check(&h), Class::AppliedTwice);
    }

    #[test]
    fn effects_out_of_commit_order_are_reordered() {
        let mut h = clean();
        // a2's effect moves after a3's.
        let i = h
            .iter()
            .position(|e| e.kind == applied("a2", "a", 2))
            .expect("a2 applied");
        let moved = h.remove(i);
        let j = h
            .iter()
            .position(|e| e.kind == applied("a3", "a", 3))
            .expect("a3 applied");
        h.insert(j + 1, moved);
        only(&check(&h), Class::Reordered);
    }

    #[test]
    fn an_effect_without_a_committed_cause_is_reported() {
        let h = without(clean(), |e| e.kind == committed("a1", "a", 1, false));
        only(&check(&h), Class::WithoutCause);
    }

    #[test]
    fn a_dead_letter_that_is_not_poison_is_unexpected() {
        let mut h = without(
            clean(),
            |e| matches!(&e.kind, Kind::Applied { event_id, .. } | Kind::DedupRow { event_id } if event_id == "b3"),
        );
        h.push(Event::at(
            1_000,
            "consumers",
            Kind::DeadLettered {
                event_id: "b3".to_owned(),
            },
        ));
        let report = check(&h);
        assert_eq!(report.of(Class::UnexpectedDeadLetter), 1, "{report}");
        // b3 is also not applied: lost, dead-lettered instead.
        assert_eq!(report.of(Class::Lost), 1, "{report}");
        assert_eq!(report.anomalies.len(), 2, "{report}");
    }

    #[test]
    fn a_dedup_row_without_its_effect_disagrees() {
        let mut h = clean();
        h.push(Event::at(1_000, "consumers", dedup("b2")));
        only(&check(&h), Class::DedupDisagrees);
    }

    #[test]
    fn an_effect_without_its_dedup_row_disagrees() {
        let h = without(clean(), |e| e.kind == dedup("a1"));
        only(&check(&h), Class::DedupDisagrees);
    }
}
