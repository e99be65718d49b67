//! Operational logs: the `tracing` subscriber of `tollgate run`, writing to
//! stderr as plain text (the lines docs/run-contract.md promises) or as
//! one JSON object per line. The level comes from `--log-level`, else
//! `RUST_LOG`, else `info`. Audit lines never go here: they have their own
//! file (`crate::audit`).

use tracing_subscriber::EnvFilter;

/// Format of the operational log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Log flags of `tollgate run`.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct LogArgs {
    /// Level or filter directives (`debug`, `info,tollgate=debug`);
    /// overrides RUST_LOG. Default: RUST_LOG, else `info`.
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,
    /// `text` (default) or `json` (one object per line).
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("--log-level {value:?}: {reason}")]
    Filter { value: String, reason: String },
}

impl LogArgs {
    /// The filter these flags ask for.
    pub fn filter(&self) -> Result<EnvFilter, LogError> {
        let directives = match &self.log_level {
            Some(level) => level.clone(),
            None => std::env::var(EnvFilter::DEFAULT_ENV).unwrap_or_else(|_| "info".into()),
        };
        EnvFilter::builder()
            .parse(&directives)
            .map_err(|e| LogError::Filter {
                value: directives,
                reason: e.to_string(),
            })
    }

    /// Installs the global subscriber (a subscriber installed earlier, e.g.
    /// by a test, takes precedence).
    pub fn install(&self) -> Result<(), LogError> {
        let filter = self.filter()?;
        let builder = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .with_target(false)
            .with_env_filter(filter);
        let _ = match self.log_format {
            LogFormat::Text => builder.try_init(),
            LogFormat::Json => builder.json().flatten_event(true).try_init(),
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_flag_parses_and_rejects_garbage() {
        let args = LogArgs {
            log_level: Some("debug,tollgate=trace".into()),
            log_format: LogFormat::Json,
        };
        assert!(args.filter().is_ok());
        let bad = LogArgs {
            log_level: Some("tollgate=nonsense=1".into()),
            log_format: LogFormat::Text,
        };
        assert!(bad.filter().is_err());
    }
}
