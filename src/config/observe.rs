//! `audit`, `status`, `metrics` and `health`: what the agent reports and
//! how its workers are watched. Keys, defaults and checks; pure.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::ConfigError;
use crate::audit::AuditFormat;

/// Smallest `audit.maxBytes`: a rotation per line would lose the log.
pub const MIN_AUDIT_LOG_BYTES: u64 = 4096;

/// The audit log of rules with `enableLogging` (the spec's np.log format).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct AuditConfig {
    /// Audit log file; off when unset.
    #[arg(long = "audit-log", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Lines per second (default 500, the spec's figure; Antrea's agent
    /// now defaults to 5000).
    #[arg(skip)]
    pub rate: u32,
    /// Lines above the rate in a burst (default 1000).
    #[arg(skip)]
    pub burst: u32,
    /// Size at which the file is rotated (default 100 MiB, at least 4096).
    #[arg(skip)]
    pub max_bytes: u64,
    /// Rotated files kept (default 3; 0 keeps none).
    #[arg(skip)]
    pub max_files: u32,
    /// Line format: `text`, the spec's np.log line (default), or `json`,
    /// one JSON object per line for log shippers.
    #[arg(skip)]
    pub format: AuditFormat,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            file: None,
            rate: 500,
            burst: 1000,
            max_bytes: 100 * 1024 * 1024,
            max_files: 3,
            format: AuditFormat::Text,
        }
    }
}

impl AuditConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bound = |key, value, reason| ConfigError::Bound { key, value, reason };
        if self.rate == 0 {
            return Err(bound("audit.rate", 0, "must be at least 1 line per second"));
        }
        if self.burst == 0 {
            return Err(bound("audit.burst", 0, "must be at least 1"));
        }
        if self.max_bytes < MIN_AUDIT_LOG_BYTES {
            return Err(bound(
                "audit.maxBytes",
                self.max_bytes,
                "must be at least 4096",
            ));
        }
        Ok(())
    }
}

/// The status API that `tollgate status` and `get policies` ask.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct StatusConfig {
    /// Unix socket of the status API; when unset,
    /// /run/tollgate/tollgate.sock, best effort.
    #[arg(long = "status-socket", value_name = "PATH")]
    pub socket: Option<PathBuf>,
}

/// The Prometheus endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct MetricsConfig {
    /// `host:port` to serve metrics on; off when unset.
    #[arg(long = "metrics-address", value_name = "HOST:PORT")]
    pub address: Option<SocketAddr>,
}

/// How the workers are watched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct HealthConfig {
    /// Seconds a queue may have packets waiting while its worker takes
    /// none before the agent counts it stalled, fails `/livez` and exits
    /// with code 3 to be restarted (default 10).
    #[arg(long = "stall-timeout", value_name = "SECS")]
    pub stall_timeout_seconds: u64,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            stall_timeout_seconds: 10,
        }
    }
}

impl HealthConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.stall_timeout_seconds == 0 {
            return Err(ConfigError::Bound {
                key: "health.stallTimeoutSeconds",
                value: 0,
                reason: "must be at least 1",
            });
        }
        Ok(())
    }

    /// [`HealthConfig::stall_timeout_seconds`] as a duration.
    pub fn stall_timeout(&self) -> Duration {
        Duration::from_secs(self.stall_timeout_seconds)
    }
}
