//! Operational logs: the `tracing` subscriber of `tollgate run`, writing to
//! stderr as plain text (the lines docs/design/run-contract.md promises) or as
//! one JSON object per line, and keeping the last [`TAIL_LINES`] lines (as
//! text) for `tollgate bundle`. The level comes from `--log-level`, else
//! `RUST_LOG`, else `info`, and can be changed while the agent runs
//! (`tollgate log-level`, over the status socket). Audit lines never go
//! here: they have their own file (`crate::audit`).

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Mutex, OnceLock};

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, reload, EnvFilter, Registry};

/// Lines of the log kept in memory for `tollgate bundle`.
pub const TAIL_LINES: usize = 1000;

/// Why logging could not be set up or changed.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("--log-level {value:?}: {reason}")]
    Filter { value: String, reason: String },
    #[error("the log level cannot be changed: this process installed no logger of its own")]
    NotInstalled,
}

/// Changes the filter of the installed subscriber.
static FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();
/// The last [`TAIL_LINES`] lines, oldest first.
static TAIL: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());

/// The filter `level` asks for (`RUST_LOG`, else `info`, when `None`).
pub fn filter(level: Option<&str>) -> Result<EnvFilter, LogError> {
    let directives = match level {
        Some(level) => level.to_string(),
        None => std::env::var(EnvFilter::DEFAULT_ENV).unwrap_or_else(|_| "info".into()),
    };
    EnvFilter::builder()
        .parse(&directives)
        .map_err(|e| LogError::Filter {
            value: directives,
            reason: e.to_string(),
        })
}

/// Installs the global subscriber, text or `json`, and the tail (a
/// subscriber installed earlier, e.g. by a test, takes precedence).
pub fn install(level: Option<&str>, json: bool) -> Result<(), LogError> {
    let (filter, handle) = reload::Layer::new(filter(level)?);
    let stderr = fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false);
    let registry = tracing_subscriber::registry().with(filter);
    let installed = match json {
        false => registry.with(stderr).with(tail_layer()).try_init(),
        true => registry
            .with(stderr.json().flatten_event(true))
            .with(tail_layer())
            .try_init(),
    };
    if installed.is_ok() {
        let _ = FILTER.set(handle);
    }
    Ok(())
}

/// The layer that writes each event, as text, into the tail.
fn tail_layer<S>() -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fmt::layer()
        .with_writer(|| TailLine(Vec::new()))
        .with_ansi(false)
        .with_target(false)
}

/// The filter in force, as directives (`info`, `info,tollgate=debug`).
pub fn current() -> Result<String, LogError> {
    let handle = FILTER.get().ok_or(LogError::NotInstalled)?;
    handle
        .with_current(ToString::to_string)
        .map_err(|_| LogError::NotInstalled)
}

/// Replaces the filter in force with `directives`; returns it as parsed.
pub fn set(directives: &str) -> Result<String, LogError> {
    let next = filter(Some(directives))?;
    let handle = FILTER.get().ok_or(LogError::NotInstalled)?;
    handle.reload(next).map_err(|_| LogError::NotInstalled)?;
    current()
}

/// The last lines logged (at most [`TAIL_LINES`]), oldest first.
pub fn tail() -> Vec<String> {
    lock_tail().iter().cloned().collect()
}

fn lock_tail() -> std::sync::MutexGuard<'static, VecDeque<String>> {
    TAIL.lock().unwrap_or_else(|e| e.into_inner())
}

/// One formatted event on its way to the tail: the formatter writes the
/// whole line, then drops the writer.
struct TailLine(Vec<u8>);

impl Write for TailLine {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for TailLine {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.0);
        let mut tail = lock_tail();
        for line in text.lines() {
            if tail.len() == TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_flag_parses_and_rejects_garbage() {
        assert!(filter(Some("debug,tollgate=trace")).is_ok());
        assert!(filter(Some("tollgate=nonsense=1")).is_err());
    }

    #[test]
    fn the_tail_keeps_the_last_lines() {
        for n in 0..TAIL_LINES + 5 {
            let mut line = TailLine(Vec::new());
            let _ = writeln!(line, "tail test line {n}");
        }
        let tail = tail();
        assert_eq!(tail.len(), TAIL_LINES);
        let ours: Vec<&String> = tail.iter().filter(|l| l.starts_with("tail test")).collect();
        assert_eq!(
            ours.last().unwrap().as_str(),
            format!("tail test line {}", TAIL_LINES + 4)
        );
        assert!(!tail.contains(&"tail test line 4".to_string()));
    }
}
