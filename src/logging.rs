//! Operational logs: the `tracing` subscriber of `tollgate run`, writing to
//! stderr as plain text (the lines docs/design/run-contract.md promises) or as
//! one JSON object per line. The level comes from `--log-level`, else
//! `RUST_LOG`, else `info`. Audit lines never go here: they have their own
//! file (`crate::audit`).

use tracing_subscriber::EnvFilter;

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("--log-level {value:?}: {reason}")]
    Filter { value: String, reason: String },
}

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

/// Installs the global subscriber, text or `json` (a subscriber installed
/// earlier, e.g. by a test, takes precedence).
pub fn install(level: Option<&str>, json: bool) -> Result<(), LogError> {
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false)
        .with_env_filter(filter(level)?);
    let _ = match json {
        false => builder.try_init(),
        true => builder.json().flatten_event(true).try_init(),
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_flag_parses_and_rejects_garbage() {
        assert!(filter(Some("debug,tollgate=trace")).is_ok());
        assert!(filter(Some("tollgate=nonsense=1")).is_err());
    }
}
