use std::sync::{Arc, Mutex, PoisonError};

use tracing::subscriber::with_default;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::{Layer, Registry};

use super::*;

/// Notes each event's target and, at that moment, the observer's
/// `Reconnects` counter: what the counters listener had done before the
/// log listener ran.
struct Seen {
    observer: SourceObserver,
    lines: Arc<Mutex<Vec<(String, u64)>>>,
}

impl<S: tracing::Subscriber> Layer<S> for Seen {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let reconnects = self.observer.counters().get(Counter::Reconnects);
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((event.metadata().target().to_owned(), reconnects));
    }
}

#[test]
fn the_counters_listen_before_the_log_line_and_count_an_event_once() {
    let observer = SourceObserver::new(Broker::Amqp);
    let lines = Arc::new(Mutex::new(Vec::new()));
    let subscriber = Registry::default().with(Seen {
        observer: observer.clone(),
        lines: Arc::clone(&lines),
    });
    with_default(subscriber, || {
        observer.emit(Happened::Reconnecting {
            queue: "orders",
            reason: "channel closed",
        });
    });
    let lines = lines.lock().unwrap_or_else(PoisonError::into_inner).clone();
    // One line, under the broker's target, written once the counter moved.
    assert_eq!(lines, vec![("consumer::amqp".to_owned(), 1)]);
    let snapshot = observer.snapshot();
    for &c in Counter::ALL {
        let expected = u64::from(c == Counter::Reconnects);
        assert_eq!(snapshot.get(c), expected, "{c:?}");
    }
}

#[test]
fn a_clone_emits_into_the_same_counters_and_levels_are_set() {
    let observer = SourceObserver::new(Broker::Other);
    let acker_side = observer.clone();
    acker_side.emit(Happened::Received {
        count: 3,
        redelivered: true,
    });
    acker_side.emit(Happened::Holding {
        in_flight: 5,
        waiting: 2,
    });
    acker_side.emit(Happened::Holding {
        in_flight: 4,
        waiting: 0,
    });
    let s = observer.snapshot();
    assert_eq!(
        (s.get(Counter::Received), s.get(Counter::Redelivered)),
        (3, 3)
    );
    assert_eq!((s.level(Level::InFlight), s.level(Level::Waiting)), (4, 0));
}
