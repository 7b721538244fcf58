//! The retry delays the runtime drew, read by message id from its
//! "transient failure; retrying" log lines (kept by the test subscriber):
//! what a case compares the gaps between a message's attempts against. A
//! drawn delay is known exactly, so a case can check that it was waited
//! (the gap is at least the delay) however loaded the machine is, where
//! the gaps' own medians drown in a loaded machine's scheduling.

use std::time::Duration;

/// One retry the runtime decided: after failed attempt `attempt`, wait
/// `delay`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Drawn {
    pub attempt: u32,
    pub delay: Duration,
}

const RETRYING: &str = "transient failure; retrying";

/// Starts keeping the process's log lines (the test subscriber); call
/// before the consumer runs.
pub fn install() {
    consumer::testing::captured_logs();
}

/// The delays drawn for message `id`, in the order they were drawn.
pub fn of(id: &str) -> Vec<Drawn> {
    consumer::testing::captured_logs()
        .matching(&[RETRYING, &format!("message_id={id} ")])
        .iter()
        .filter_map(|line| parse(line))
        .collect()
}

/// The attempt and delay fields after the message (span fields before it
/// may have names of their own).
fn parse(line: &str) -> Option<Drawn> {
    let (_, fields) = line.split_once(RETRYING)?;
    let field = |name: &str| {
        fields
            .split_whitespace()
            .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
    };
    Some(Drawn {
        attempt: field("attempt")?.parse().ok()?,
        delay: parse_debug_duration(field("delay")?)?,
    })
}

/// Reads back what `Duration`'s `Debug` writes: `1.5s`, `87.25ms`,
/// `15µs`, `0ns`.
fn parse_debug_duration(text: &str) -> Option<Duration> {
    let units = [("ns", 1e-9), ("µs", 1e-6), ("ms", 1e-3), ("s", 1.0)];
    let (number, scale) = units
        .iter()
        .find_map(|(unit, scale)| Some((text.strip_suffix(unit)?, *scale)))?;
    let value: f64 = number.parse().ok()?;
    Some(Duration::from_secs_f64(value * scale))
}

#[test]
fn reads_what_duration_debug_writes() {
    for d in [
        Duration::ZERO,
        Duration::from_nanos(15),
        Duration::from_micros(15),
        Duration::from_micros(87_250),
        Duration::from_millis(1_500),
    ] {
        let back = parse_debug_duration(&format!("{d:?}")).expect("parses");
        assert!(
            back.abs_diff(d) < Duration::from_nanos(2),
            "{d:?} read as {back:?}"
        );
    }
}

#[test]
fn reads_a_retry_line() {
    let line = r#"WARN consumer::runtime: transient failure; retrying handler="backoff" message_id=m-1 attempt=2 delay=87.25ms error=transient failure on attempt 2"#;
    assert_eq!(
        parse(line),
        Some(Drawn {
            attempt: 2,
            delay: Duration::from_micros(87_250)
        })
    );
}
