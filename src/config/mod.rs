//! Agent configuration in Antrea's shape: [`AgentConfig`] is a set of
//! sections, each a struct with its keys, defaults and checks, taken whole
//! by the subsystem it configures (`node` and `queues` here; the others in
//! `datapath`, `fqdn`, `l7`, `observe` and `sources`);
//! [`AgentConfig::validate`] holds the checks that span sections, `layers`
//! the reading of the file, `--set` and the flags. Pure: it never reads a
//! file or the machine.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use serde::Deserialize;

mod layers;
mod values;

pub use layers::{flags, Flag, Loaded, MachineDefaults, Setting};
use values::labels;
pub use values::{
    parse_labels, AllowedSource, Interface, Privileged, PrivilegedHook, PrivilegedProtocol,
    SourceEndpoint, NODE_HOOKS,
};

/// Why a configuration cannot be used. The agent exits with status 2.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A layer (the file, or the command line) that does not read as
    /// configuration; `reason` names the key.
    #[error("{origin}: {reason}")]
    Parse { origin: String, reason: String },
    #[error("--set {setting:?}: expected section.key=value with a YAML value")]
    Setting { setting: String },
    #[error("{flat} is the key of the old flat layout, {nested} its new place: set only {nested}")]
    Twice {
        flat: &'static str,
        nested: &'static str,
    },
    #[error("interfaces: {glob:?}: only a name or a name prefix ending in a single `*` (e.g. `veth*`) is supported, at most 15 characters")]
    Interface { glob: String },
    #[error("privileged {value:?}: {reason}")]
    Privileged { value: String, reason: &'static str },
    #[error("antiSpoofing.allowedSourcePrefixes {value:?}: {reason}")]
    AllowedSource { value: String, reason: &'static str },
    #[error("labels {value:?}: expected key=value")]
    Label { value: String },
    #[error("node.name: must not be empty")]
    NodeName,
    #[error("queues: {count} queues from queue {base} must be between 1 and 65535 and end at or below queue 65535")]
    Queues { base: u16, count: u32 },
    #[error("fqdn.dnsQueue {queue}: must differ from the connection queues {first}-{last}")]
    DnsQueue { queue: u16, first: u16, last: u16 },
    #[error("l7.queue {queue} (and the l7.queues after it): must differ from the connection queues {first}-{last} and the DNS queue {dns_queue}")]
    L7Queue {
        queue: u16,
        first: u16,
        last: u16,
        dns_queue: u16,
    },
    #[error("l7.allowBodyOn {method:?}: expected GET, HEAD, DELETE or TRACE (other methods may always carry a body)")]
    AllowBodyOn { method: String },
    #[error(
        "docker.host {host:?}: expected unix:///path/to/docker.sock or an absolute socket path"
    )]
    DockerHost { host: String },
    #[error("docker.{key}: must not be empty")]
    DockerLabel { key: &'static str },
    #[error("{key} {value}: {reason}")]
    Bound {
        key: &'static str,
        value: u64,
        reason: &'static str,
    },
}

/// The configuration of `tollgate run`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct AgentConfig {
    pub node: NodeConfig,
    pub queues: QueuesConfig,
    pub datapath: DatapathConfig,
    pub fqdn: FqdnConfig,
    pub l7: L7Config,
    pub audit: AuditConfig,
    pub status: StatusConfig,
    pub metrics: MetricsConfig,
    pub policy_files: PolicyFilesConfig,
    pub health: HealthConfig,
    pub docker: DockerConfig,
    pub kubernetes: KubernetesConfig,
    pub verdict_cache: VerdictCacheConfig,
    pub anti_spoofing: AntiSpoofingConfig,
}

impl AgentConfig {
    /// The DNS and L7 queues default to the first numbers after the
    /// connection queues (`given` tells which keys were set).
    fn derive_queues(&mut self, given: impl Fn(&str, &str) -> bool) -> Result<(), ConfigError> {
        self.queues.validate()?;
        let range = self.queues.range();
        if !given("fqdn", "dnsQueue") {
            self.fqdn.dns_queue = range.last().checked_add(1).ok_or(ConfigError::Queues {
                base: range.first(),
                count: self.queues.count + 1,
            })?;
        }
        if !given("l7", "queue") {
            let dns_queue = self.fqdn.dns_queue;
            let count = self.l7.queues.max(1);
            self.l7.queue = (range.last()..=u16::MAX)
                .skip(1)
                .find(|q| {
                    let last = u32::from(*q) + u32::from(count) - 1;
                    last <= u32::from(u16::MAX)
                        && !(u32::from(*q)..=last).contains(&u32::from(dns_queue))
                })
                .ok_or(ConfigError::L7Queue {
                    queue: range.last(),
                    first: range.first(),
                    last: range.last(),
                    dns_queue,
                })?;
        }
        Ok(())
    }

    /// Checks every section, then that the queues do not overlap.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.node.validate()?;
        self.queues.validate()?;
        self.fqdn.validate()?;
        self.l7.validate()?;
        self.audit.validate()?;
        self.policy_files.validate()?;
        self.health.validate()?;
        self.docker.validate()?;
        self.verdict_cache.validate()?;
        let QueueNumbers {
            connection,
            dns,
            l7,
            ..
        } = self.queue_numbers();
        let (first, last) = (connection.first(), connection.last());
        if (first..=last).contains(&dns) {
            return Err(ConfigError::DnsQueue {
                queue: dns,
                first,
                last,
            });
        }
        let overlaps = l7.iter().any(|q| (first..=last).contains(&q) || q == dns);
        if overlaps {
            return Err(ConfigError::L7Queue {
                queue: l7.first(),
                first,
                last,
                dns_queue: dns,
            });
        }
        Ok(())
    }

    pub fn queue_numbers(&self) -> QueueNumbers {
        QueueNumbers {
            connection: self.queues.range(),
            dns: self.fqdn.dns_queue,
            dns_log: self.fqdn.dns_log_group,
            l7: self.l7.range(),
        }
    }
}

// Each section below is read from YAML (serde) and declares the flags
// that set its keys (clap: `#[arg(long)]` on a field; `#[arg(skip)]` for a
// key without a flag). The doc comment of a field is both its
// documentation and its `--help` text.

/// The local Node, which policies with `nodeSelector` may apply to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeConfig {
    /// Name of the local Node (default: the host name).
    #[arg(long = "node-name", value_name = "NAME", env = "NODE_NAME")]
    pub name: String,
    /// Labels of the local Node: a map, or `k=v,k2=v2`.
    #[arg(long = "node-labels", value_name = "k=v,k2=v2", value_parser = parse_labels)]
    #[serde(deserialize_with = "labels")]
    pub labels: BTreeMap<String, String>,
    /// Addresses of the local Node, in addition to those on its interfaces.
    #[arg(long = "node-address", value_name = "IP")]
    pub addresses: Vec<IpAddr>,
}

impl NodeConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.name.trim().is_empty() {
            return Err(ConfigError::NodeName);
        }
        Ok(())
    }
}

/// The connection queues: new connections of enforced endpoints are
/// balanced over them, one worker thread each.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct QueuesConfig {
    /// Number of connection queues (default: the number of cores).
    #[arg(long = "queues", value_name = "N")]
    pub count: u32,
    /// First connection queue number.
    #[arg(long = "queue-base", value_name = "N")]
    pub base: u16,
}

impl Default for QueuesConfig {
    fn default() -> Self {
        QueuesConfig {
            count: 1,
            base: 100,
        }
    }
}

impl QueuesConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let last = u32::from(self.base) + self.count.saturating_sub(1);
        if self.count == 0 || self.count > u32::from(u16::MAX) || last > u32::from(u16::MAX) {
            return Err(ConfigError::Queues {
                base: self.base,
                count: self.count,
            });
        }
        Ok(())
    }

    /// The queue numbers (as checked by [`QueuesConfig::validate`]).
    pub fn range(&self) -> QueueRange {
        let count = u16::try_from(self.count.max(1)).unwrap_or(u16::MAX);
        QueueRange {
            base: self.base,
            count: count.min(u16::MAX - self.base + 1),
        }
    }
}

/// Consecutive NFQUEUE numbers, one worker each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueRange {
    base: u16,
    count: u16,
}

impl QueueRange {
    pub fn first(&self) -> u16 {
        self.base
    }

    pub fn last(&self) -> u16 {
        self.base + (self.count - 1)
    }

    pub fn iter(&self) -> impl Iterator<Item = u16> {
        self.first()..=self.last()
    }
}

/// Every NFQUEUE number the agent binds, from the three sections that
/// own one: what the datapath queues to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueNumbers {
    pub connection: QueueRange,
    pub dns: u16,
    /// The NFLOG group DNS queries over UDP are copied to.
    pub dns_log: u16,
    pub l7: QueueRange,
}

mod datapath;
mod fqdn;
mod l7;
mod observe;
mod sources;

pub use datapath::*;
pub use fqdn::*;
pub use l7::*;
pub use observe::*;
pub use sources::*;

#[cfg(test)]
mod tests;
