//! What the link-fault tests share on every broker: a pipeline of writers
//! enqueuing outbox events, a relay publishing them and a consumer
//! recording them in PostgreSQL, the broker links behind
//! [`LinkProxy`]s, the faults, and the checks that nothing was lost,
//! applied twice or reordered.

use std::time::{Duration, Instant};

use consumer::testing::LinkProxy;
use consumer::testing::metrics::Point;
use consumer::{NewEvent, Outbox, RetryPolicy};

use super::scale_out::{assert_in_order_exactly_once, count, wait_effects};
use super::support::{Job, PgHarness};

/// Aggregates (keys) and events per aggregate of one case.
pub const KEYS: usize = 20;
pub const PER_KEY: i64 = 60;

pub fn total() -> i64 {
    KEYS as i64 * PER_KEY
}

/// What goes wrong with the links mid-run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Every open connection reset; reconnecting works at once.
    Cut,
    /// No byte either way, connections left open, past the heartbeat or
    /// session timeout.
    Stall,
    /// Every chunk of bytes delayed, both ways.
    Slow,
}

/// How long each chunk waits on a slowed link.
pub const SLOW_CHUNK_DELAY: Duration = Duration::from_millis(15);

impl Fault {
    pub fn apply(self, links: &[&LinkProxy]) {
        for link in links {
            match self {
                Self::Cut => link.cut(),
                Self::Stall => link.stall(),
                Self::Slow => link.slow(SLOW_CHUNK_DELAY),
            }
        }
    }

    pub fn restore(links: &[&LinkProxy]) {
        for link in links {
            link.restore();
        }
    }
}

/// Enqueues `KEYS` × `PER_KEY` events, aggregate `k<i>` version `seq`
/// carrying the job `k<i>-<seq>`, one per transaction, one every
/// `every` (the load stays on while the fault happens).
pub async fn write_events(pool: sqlx::PgPool, outbox: Outbox, every: Duration) {
    let mut tick = tokio::time::interval(every);
    for seq in 0..PER_KEY {
        for k in 0..KEYS {
            tick.tick().await;
            let key = format!("k{k}");
            let job = Job {
                id: format!("{key}-{seq}"),
                ..Job::new(&key, seq)
            };
            let event = NewEvent::new("Job", &key, "Job", &job).expect("a Job serialises");
            let mut tx = pool.begin().await.expect("begin");
            outbox.enqueue(&mut tx, event).await.expect("enqueue");
            tx.commit().await.expect("commit");
        }
    }
}

/// The relay's retry policy in these tests: what they check is that a
/// fault loses nothing and that both sides come back, so the relay neither
/// gives up on a row during the fault nor waits up to the default's minute
/// before trying it again after it (on a loaded machine a cut lasted long
/// enough for rows to reach delays past the tests' 60 s wait).
pub const RELAY_RETRY: RetryPolicy =
    RetryPolicy::exponential(Duration::from_millis(50), Duration::from_secs(1), u32::MAX);

/// Effects recorded so far (distinct jobs).
pub async fn effects(h: &PgHarness) -> i64 {
    count(h, "SELECT count(DISTINCT job_id) FROM part_effects").await
}

/// Waits until the effects grow past `from`, and says how long that took
/// since `since`: the time to recover, as the test prints it.
pub async fn recovered_after(h: &PgHarness, from: i64, since: Instant) -> Duration {
    wait_effects(h, from + 1).await;
    since.elapsed()
}

/// Every event's effect once, each aggregate's in version order.
pub async fn assert_nothing_lost_twice_or_reordered(h: &PgHarness) {
    wait_effects(h, total()).await;
    assert_eq!(
        count(h, "SELECT count(*) FROM part_effects").await,
        total(),
        "0 lost, 0 applied twice"
    );
    assert_in_order_exactly_once(h, KEYS, PER_KEY).await;
}

/// The relay's confirmed sends so far: how many, and their summed
/// duration (`messaging.client.operation.duration`, send, no error).
pub fn sends(points: &[Point]) -> (f64, f64) {
    points
        .iter()
        .filter(|p| p.name == "messaging.client.operation.duration")
        .filter(|p| {
            p.attributes
                .get("messaging.operation.name")
                .is_some_and(|o| o == "send")
        })
        .filter(|p| !p.attributes.contains_key("error.type"))
        .fold((0.0, 0.0), |(n, s), p| (n + p.value, s + p.sum))
}

/// The mean duration of the relay's sends confirmed between two
/// collections. On a slowed link each send's bytes and its confirmation
/// each wait [`SLOW_CHUNK_DELAY`] in the proxy, so the mean over the
/// slowed window is above it whatever the machine's speed: what the
/// metric says about a slow link.
pub fn mean_send_between(before: &[Point], after: &[Point]) -> Duration {
    let ((n0, s0), (n1, s1)) = (sends(before), sends(after));
    assert!(n1 > n0, "the relay confirmed sends while the link was slow");
    Duration::from_secs_f64((s1 - s0) / (n1 - n0))
}

/// The relay's mean send duration while the links were slowed
/// (`messaging.client.operation.duration`) is at least one chunk's delay:
/// the metric shows the slow link.
pub fn assert_sends_show_the_slow_link(slow_sends: Option<Duration>) {
    let mean = slow_sends.expect("measured while slow");
    println!(
        "relay sends while slowed: mean {mean:?} (messaging.client.operation.duration; each chunk delayed {SLOW_CHUNK_DELAY:?})"
    );
    assert!(
        mean >= SLOW_CHUNK_DELAY,
        "the relay's send duration shows the slow link: mean {mean:?}"
    );
}
