//! [`captured_logs`]: the process's `tracing` events kept as text, for a
//! test that checks what an operator would read.

use std::io;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;

/// The events captured since [`captured_logs`] was first called, one
/// formatted line each (level, target, message, fields; no time, no
/// colours).
#[derive(Debug, Clone, Default)]
pub struct CapturedLogs {
    lines: Arc<Mutex<Vec<String>>>,
}

impl CapturedLogs {
    /// The lines that contain every one of `parts`, in the order they were
    /// logged.
    pub fn matching(&self, parts: &[&str]) -> Vec<String> {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|l| parts.iter().all(|p| l.contains(p)))
            .cloned()
            .collect()
    }
}

impl<'a> MakeWriter<'a> for CapturedLogs {
    type Writer = LineWriter;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter {
            buf: Vec::new(),
            lines: Arc::clone(&self.lines),
        }
    }
}

/// Collects one event's bytes and keeps them as a line when dropped.
#[derive(Debug)]
pub struct LineWriter {
    buf: Vec<u8>,
    lines: Arc<Mutex<Vec<String>>>,
}

impl io::Write for LineWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let line = String::from_utf8_lossy(&self.buf).trim_end().to_owned();
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(line);
    }
}

/// Installs, once per process, a global subscriber that keeps every event
/// at `INFO` and above as a line of text, and returns the lines (the same
/// ones on every call).
///
/// # Panics
///
/// When another global subscriber was installed first.
pub fn captured_logs() -> CapturedLogs {
    static LOGS: OnceLock<CapturedLogs> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = CapturedLogs::default();
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .without_time()
                .with_writer(logs.clone())
                .with_filter(LevelFilter::INFO),
        );
        if tracing::subscriber::set_global_default(subscriber).is_err() {
            panic!("captured_logs: another global tracing subscriber is installed in this process");
        }
        logs
    })
    .clone()
}
