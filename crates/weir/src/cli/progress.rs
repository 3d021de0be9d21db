//! The progress line of long runs: messages, bytes, messages per second and errors, redrawn at
//! most ten times a second on standard error, and only when standard error is a terminal.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Totals the line shows.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Totals {
    /// Messages read.
    pub messages: u64,
    /// Message bytes read.
    pub bytes: u64,
    /// Messages skipped or dead-lettered.
    pub errors: u64,
}

/// A running progress line; dropping it (or [`ProgressLine::stop`]) erases it.
pub(crate) struct ProgressLine {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ProgressLine {
    /// Starts the line unless `quiet` or standard error is not a terminal.
    pub(crate) fn start(quiet: bool, totals: impl Fn() -> Totals + Send + 'static) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        if quiet || !std::io::stderr().is_terminal() {
            return Self { stop, thread: None };
        }
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let start = Instant::now();
            let mut drawn = false;
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                let t = totals();
                if t.messages == 0 {
                    continue;
                }
                let secs = start.elapsed().as_secs_f64().max(1e-3);
                let mut err = std::io::stderr().lock();
                let _ = write!(
                    err,
                    "\r\x1b[2K{} messages, {}, {}/s, {} errors",
                    count(t.messages),
                    bytes(t.bytes),
                    count((t.messages as f64 / secs) as u64),
                    t.errors
                );
                let _ = err.flush();
                drawn = true;
            }
            if drawn {
                let _ = write!(std::io::stderr(), "\r\x1b[2K");
            }
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops and erases the line.
    pub(crate) fn stop(mut self) {
        self.finish();
    }

    fn finish(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ProgressLine {
    fn drop(&mut self) {
        self.finish();
    }
}

/// `12,345,678`.
pub(crate) fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `1.23 GB`.
pub(crate) fn bytes(n: u64) -> String {
    let units = ["B", "KB", "MB", "GB", "TB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1000.0 && u + 1 < units.len() {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", units[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(count(0), "0");
        assert_eq!(count(1234567), "1,234,567");
        assert_eq!(count(123), "123");
        assert_eq!(bytes(999), "999 B");
        assert_eq!(bytes(1_230_000_000), "1.23 GB");
    }
}
