//! Why `tollgate run` stops with an error: one variant per part of the
//! agent that can fail to start or to stop, each carrying its cause.
//! Errors after the start (the workers started) are logged and retried,
//! never returned.

use crate::config::ConfigError;
use crate::datapath::{ApplyError, DatapathError};
use crate::source::watch::WatchError;
use crate::validate::Problem;

use super::host::HostError;

/// Why the agent stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("policies are invalid:\n{}", list(.0))]
    InvalidPolicies(Vec<Problem>),
    #[error("datapath: {0}")]
    Datapath(#[from] DatapathError),
    #[error("datapath: {0}")]
    Apply(#[from] ApplyError),
    #[error(transparent)]
    Queue(#[from] crate::workers::QueueError),
    #[error(transparent)]
    Host(#[from] HostError),
    #[error(transparent)]
    Watch(#[from] WatchError),
    #[error(transparent)]
    Kubernetes(#[from] crate::source::kube::KubeError),
    #[error(transparent)]
    Docker(#[from] crate::source::docker::DockerError),
    #[error("verdict cache: {0}")]
    VerdictCache(crate::datapath::ipset_netlink::NetlinkError),
    #[error("installing signal handlers: {0}")]
    Signals(std::io::Error),
    #[error("starting the observe hub thread: {0}")]
    Observe(std::io::Error),
    #[error(transparent)]
    Audit(#[from] crate::workers::audit::AuditError),
    #[error(transparent)]
    Metrics(#[from] crate::telemetry::http::ListenError),
    #[error(transparent)]
    Status(#[from] crate::status::StatusError),
    #[error(transparent)]
    Privilege(#[from] crate::privilege::PrivilegeError),
    #[error(transparent)]
    Locked(#[from] super::lock::LockError),
}

fn list(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}
