//! The order in which a relay publishes the rows it claimed: in waves of
//! at most one event per aggregate (the next one in version order), so an
//! aggregate never has two events in flight, and an aggregate whose event
//! did not go out stops there for the round while the others flow.

use std::collections::{BTreeMap, VecDeque};

use super::{Row, RowOutcome};

type Aggregate = (String, String);

/// The claimed rows, queued per aggregate in the order the claim gave
/// them (version order).
pub(super) struct Waves {
    queues: BTreeMap<Aggregate, VecDeque<Row>>,
}

impl Waves {
    pub(super) fn new(rows: Vec<Row>) -> Self {
        let mut queues: BTreeMap<Aggregate, VecDeque<Row>> = BTreeMap::new();
        for row in rows {
            queues
                .entry((row.aggregate_type.clone(), row.aggregate_id.clone()))
                .or_default()
                .push_back(row);
        }
        Self { queues }
    }

    /// The next wave: the head of each aggregate's queue. A head that is
    /// held (its predecessor is unpublished elsewhere, it waits for a
    /// retry, or it failed) stops its aggregate: it and the rows behind it
    /// go to `done` as skipped. `None` when nothing is left to publish.
    pub(super) fn next(&mut self, done: &mut Vec<(Row, RowOutcome)>) -> Option<Vec<Row>> {
        let mut wave = Vec::new();
        let mut stopped = Vec::new();
        for (aggregate, queue) in &mut self.queues {
            let Some(row) = queue.pop_front() else {
                continue;
            };
            if row.held {
                stopped.push(aggregate.clone());
                done.push((row, RowOutcome::Skipped));
            } else {
                wave.push(row);
            }
        }
        for aggregate in stopped {
            self.skip_rest(&aggregate, done);
        }
        self.queues.retain(|_, q| !q.is_empty());
        (!wave.is_empty()).then_some(wave)
    }

    /// Stops `row`'s aggregate for this round: what is queued behind it is
    /// skipped (its order would break if it went out first).
    pub(super) fn stop(&mut self, row: &Row, done: &mut Vec<(Row, RowOutcome)>) {
        self.skip_rest(
            &(row.aggregate_type.clone(), row.aggregate_id.clone()),
            done,
        );
    }

    fn skip_rest(&mut self, aggregate: &Aggregate, done: &mut Vec<(Row, RowOutcome)>) {
        if let Some(rest) = self.queues.remove(aggregate) {
            done.extend(rest.into_iter().map(|r| (r, RowOutcome::Skipped)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(aggregate: &str, version: i64, held: bool) -> Row {
        Row {
            id: format!("{aggregate}-{version}"),
            aggregate_type: "Order".into(),
            aggregate_id: aggregate.into(),
            version,
            event_type: "OrderPlaced".into(),
            destination: "orders".into(),
            payload: "{}".into(),
            headers: None,
            trace_metadata: None,
            created_at_ms: 0,
            attempts: 0,
            due_at_ms: None,
            held,
        }
    }

    fn ids(rows: &[Row]) -> Vec<&str> {
        rows.iter().map(|r| r.id.as_str()).collect()
    }

    #[test]
    fn each_wave_holds_the_next_event_of_each_aggregate() {
        let mut waves = Waves::new(vec![
            row("a", 1, false),
            row("a", 2, false),
            row("b", 7, false),
        ]);
        let mut done = Vec::new();
        let first = waves.next(&mut done).unwrap_or_default();
        assert_eq!(ids(&first), ["a-1", "b-7"]);
        let second = waves.next(&mut done).unwrap_or_default();
        assert_eq!(ids(&second), ["a-2"]);
        assert!(waves.next(&mut done).is_none());
        assert!(done.is_empty());
    }

    #[test]
    fn a_held_row_or_a_failure_skips_the_rest_of_its_aggregate_only() {
        let mut waves = Waves::new(vec![
            row("a", 1, true),
            row("a", 2, false),
            row("b", 1, false),
            row("b", 2, false),
            row("c", 1, false),
            row("c", 2, false),
        ]);
        let mut done = Vec::new();
        let first = waves.next(&mut done).unwrap_or_default();
        assert_eq!(ids(&first), ["b-1", "c-1"]);
        // b-1 was refused: b-2 must not overtake it.
        waves.stop(&first[0], &mut done);
        let second = waves.next(&mut done).unwrap_or_default();
        assert_eq!(ids(&second), ["c-2"]);
        assert!(waves.next(&mut done).is_none());
        let skipped: Vec<&str> = done.iter().map(|(r, _)| r.id.as_str()).collect();
        assert_eq!(skipped, ["a-1", "a-2", "b-2"]);
        assert!(done.iter().all(|(_, o)| matches!(o, RowOutcome::Skipped)));
    }
}
