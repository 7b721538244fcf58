//! [`captured_logs`]: the process's `tracing` events kept as text, for a
//! test that checks what an operator would read.

use std::io;
use std::sync::{Arc, Mutex, PoisonError};

use tracing_subscriber::fmt::MakeWriter;

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

/// Installs, once per process, the test subscriber (see
/// [`in_memory_spans`](super::in_memory_spans): the same one) and returns
/// the lines it keeps: every event at `INFO` and above, as text (the same
/// lines on every call).
///
/// # Panics
///
/// When another global subscriber was installed first.
pub fn captured_logs() -> CapturedLogs {
    super::subscriber::installed().logs.clone()
}
