//! The checker's rules for [settlements](super::settlement): every
//! settlement an effect opened started its saga once, was confirmed once,
//! and its saga ended in a status its events explain (completed after its
//! confirmation, or failed on its reply timeout), having saved one
//! transition per event it took (two).

use std::collections::{BTreeMap, HashMap};

use super::checker::{Class, Found};
use super::history::{Event, Kind};
use super::settlement::TIMED_OUT;

/// A settlement saga's end as the history records it.
struct Ended<'h> {
    status: &'h str,
    reason: Option<&'h str>,
    version: i64,
}

/// Adds the settlements' anomalies in `history` to `found`.
pub fn check<'h>(history: &'h [Event], found: &mut Vec<Found<'h>>) {
    let mut opened: BTreeMap<&str, (usize, &str)> = BTreeMap::new();
    let mut confirmed: HashMap<&str, usize> = HashMap::new();
    let mut sagas: BTreeMap<&str, Ended<'_>> = BTreeMap::new();
    for e in history {
        match &e.kind {
            Kind::Opened {
                settlement,
                aggregate,
                ..
            } => opened.entry(settlement).or_insert((0, aggregate)).0 += 1,
            Kind::Confirmed { settlement } => *confirmed.entry(settlement).or_default() += 1,
            Kind::SagaEnded {
                settlement,
                status,
                reason,
                version,
            } => {
                sagas.insert(
                    settlement,
                    Ended {
                        status,
                        reason: reason.as_deref(),
                        version: *version,
                    },
                );
            }
            _ => {}
        }
    }
    for (&id, &(times, aggregate)) in &opened {
        let mut report = |class, what: String| found.push((class, what, Some(id), Some(aggregate)));
        if times > 1 {
            report(
                Class::AppliedTwice,
                format!("settlement {id} was opened {times} times"),
            );
        }
        let confirmations = confirmed.get(id).copied().unwrap_or(0);
        if confirmations == 0 {
            report(
                Class::Lost,
                format!("settlement {id} was opened and its command never confirmed"),
            );
        } else if confirmations > 1 {
            report(
                Class::AppliedTwice,
                format!("settlement {id} was confirmed {confirmations} times"),
            );
        }
        let Some(saga) = sagas.get(id) else {
            report(
                Class::Lost,
                format!("settlement {id} was opened and its saga never started"),
            );
            continue;
        };
        if let Some(why) = unexplained(saga, confirmations > 0) {
            report(Class::SagaUnexplained, format!("settlement {id}: {why}"));
        }
    }
    for (&id, _) in sagas.iter().filter(|(id, _)| !opened.contains_key(*id)) {
        found.push((
            Class::WithoutCause,
            format!("the saga of settlement {id} with no effect that opened it"),
            Some(id),
            None,
        ));
    }
    let mut orphans: Vec<&str> = confirmed
        .keys()
        .copied()
        .filter(|id| !opened.contains_key(id))
        .collect();
    orphans.sort_unstable();
    for id in orphans {
        found.push((
            Class::WithoutCause,
            format!("a confirmation of settlement {id}, which no effect opened"),
            Some(id),
            None,
        ));
    }
}

/// Why `saga`'s end is not explained by its events, if it is not.
fn unexplained(saga: &Ended<'_>, confirmed: bool) -> Option<String> {
    let why = match (saga.status, saga.reason) {
        ("completed", _) if !confirmed => "completed without a confirmation".to_owned(),
        ("completed", _) => return transitions(saga),
        ("failed", Some(TIMED_OUT)) => return transitions(saga),
        ("failed", reason) => format!("failed for another reason than its timeout: {reason:?}"),
        (status @ ("running" | "compensating"), _) => format!("never finished ({status})"),
        (status, reason) => format!("ended as {status} ({reason:?}), which it cannot"),
    };
    Some(why)
}

/// A finished settlement took two events (its opening, then its
/// confirmation or its timeout): any other number of saved transitions is
/// one applied twice or one missing.
fn transitions(saga: &Ended<'_>) -> Option<String> {
    (saga.version != 2)
        .then(|| format!("{} after {} transitions, not 2", saga.status, saga.version))
}

#[cfg(test)]
mod tests {
    use super::super::checker::{Class, check};
    use super::*;

    fn opened(id: &str) -> Kind {
        Kind::Opened {
            settlement: id.to_owned(),
            aggregate: "a".to_owned(),
            seq: 3,
        }
    }

    fn confirmed(id: &str) -> Kind {
        Kind::Confirmed {
            settlement: id.to_owned(),
        }
    }

    fn ended(id: &str, status: &str, reason: Option<&str>, version: i64) -> Kind {
        Kind::SagaEnded {
            settlement: id.to_owned(),
            status: status.to_owned(),
            reason: reason.map(str::to_owned),
            version,
        }
    }

    /// Two settlements: one confirmed and completed, one confirmed after
    /// its timeout failed it.
    fn clean() -> Vec<Event> {
        vec![
            Event::at(10, "c1", opened("s1")),
            Event::at(20, "c2", opened("s2")),
            Event::at(30, "c1", confirmed("s1")),
            Event::at(40, "sagas", ended("s1", "completed", None, 2)),
            Event::at(50, "sagas", ended("s2", "failed", Some(TIMED_OUT), 2)),
            Event::at(60, "c3", confirmed("s2")),
        ]
    }

    fn only(history: &[Event], class: Class) {
        let report = check(history);
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
    }

    fn replaced(mut h: Vec<Event>, what: &Kind, with: Kind) -> Vec<Event> {
        let i = h
            .iter()
            .position(|e| &e.kind == what)
            .expect("the event to replace");
        h[i].kind = with;
        h
    }

    #[test]
    fn settlements_completed_or_timed_out_pass() {
        let report = check(&clean());
        assert!(report.anomalies.is_empty(), "{report}");
        assert_eq!(report.counts["sagas completed"], 1);
        assert_eq!(report.counts["sagas failed"], 1);
    }

    #[test]
    fn a_completed_saga_without_its_confirmation_is_unexplained() {
        let h = replaced(
            clean(),
            &ended("s2", "failed", Some(TIMED_OUT), 2),
            ended("s2", "completed", None, 2),
        );
        let h: Vec<Event> = h
            .into_iter()
            .filter(|e| e.kind != confirmed("s2"))
            .collect();
        let report = check(&h);
        // Completed with no confirmation, and the command never confirmed.
        assert_eq!(report.of(Class::SagaUnexplained), 1, "{report}");
        assert_eq!(report.of(Class::Lost), 1, "{report}");
        assert_eq!(report.anomalies.len(), 2, "{report}");
    }

    #[test]
    fn a_saga_that_never_finished_is_unexplained() {
        let h = replaced(
            clean(),
            &ended("s1", "completed", None, 2),
            ended("s1", "running", None, 1),
        );
        only(&h, Class::SagaUnexplained);
    }

    #[test]
    fn a_saga_failed_for_another_reason_is_unexplained() {
        let h = replaced(
            clean(),
            &ended("s2", "failed", Some(TIMED_OUT), 2),
            ended("s2", "failed", Some("refused"), 2),
        );
        only(&h, Class::SagaUnexplained);
    }

    #[test]
    fn a_transition_saved_twice_is_unexplained() {
        let h = replaced(
            clean(),
            &ended("s1", "completed", None, 2),
            ended("s1", "completed", None, 3),
        );
        only(&h, Class::SagaUnexplained);
    }

    #[test]
    fn a_settlement_whose_saga_never_started_is_lost() {
        let h: Vec<Event> = clean()
            .into_iter()
            .filter(|e| e.kind != ended("s1", "completed", None, 2))
            .collect();
        only(&h, Class::Lost);
    }

    #[test]
    fn a_settlement_confirmed_twice_is_applied_twice() {
        let mut h = clean();
        h.push(Event::at(70, "c2", confirmed("s1")));
        only(&h, Class::AppliedTwice);
    }

    #[test]
    fn a_saga_nothing_opened_has_no_cause() {
        let h: Vec<Event> = clean()
            .into_iter()
            .filter(|e| e.kind != opened("s2"))
            .collect();
        let report = check(&h);
        // Its saga and its confirmation both lack a cause.
        assert_eq!(report.of(Class::WithoutCause), 2, "{report}");
        assert_eq!(report.anomalies.len(), 2, "{report}");
    }
}
