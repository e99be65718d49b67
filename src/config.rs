//! Agent configuration: the YAML file of `tollgate run --config`, the flags
//! that override it, and the validated [`Config`] the agent runs with. Pure:
//! the caller reads the file and supplies the defaults that depend on the
//! machine (core count, host name); nothing here touches the system.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;

use ipnet::IpNet;
use serde::Deserialize;

use crate::l7::DenyResponse as L7DenyResponse;
use crate::marks::{FailMode, MarkLayout, MarksError};

/// Default first NFQUEUE number.
pub const DEFAULT_QUEUE_BASE: u16 = 100;

/// Why a configuration cannot be used. The agent exits with status 2.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Parse { path: PathBuf, reason: String },
    #[error(transparent)]
    Marks(#[from] MarksError),
    #[error("interfaces: {glob:?}: only a name or a name prefix ending in a single `*` (e.g. `veth*`) is supported, at most 15 characters")]
    Interface { glob: String },
    #[error("privileged {value:?}: {reason}")]
    Privileged { value: String, reason: &'static str },
    #[error("nodeLabels {value:?}: expected key=value")]
    Label { value: String },
    #[error("queues: {queues} queues from queueBase {base} must be between 1 and 65535 and end at or below queue 65535")]
    Queues { base: u16, queues: u32 },
    #[error("nodeName: must not be empty")]
    NodeName,
    #[error("l7Queue {queue}: must differ from the connection queues {first}-{last} and the DNS queue {dns_queue}")]
    L7Queue {
        queue: u16,
        first: u16,
        last: u16,
        dns_queue: u16,
    },
    #[error("{key}: must be at least 1")]
    L7Bound { key: &'static str },
    #[error("dnsQueue {queue}: must differ from the connection queues {first}-{last}")]
    DnsQueue { queue: u16, first: u16, last: u16 },
    #[error("{key} {value}: {reason}")]
    FqdnBound {
        key: &'static str,
        value: usize,
        reason: &'static str,
    },
    #[error("{key}: {reason}")]
    Audit {
        key: &'static str,
        reason: &'static str,
    },
}

/// An interface to enforce on, in iptables spelling (`veth+` for `veth*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface(String);

impl Interface {
    pub fn as_iptables(&self) -> &str {
        &self.0
    }
}

impl FromStr for Interface {
    type Err = ConfigError;
    fn from_str(glob: &str) -> Result<Self, Self::Err> {
        let (stem, wildcard) = match glob.strip_suffix('*') {
            Some(stem) => (stem, true),
            None => (glob, false),
        };
        let valid_stem = !stem.is_empty()
            && stem.len() <= 15
            && stem
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'@'));
        if !valid_stem {
            return Err(ConfigError::Interface { glob: glob.into() });
        }
        Ok(Interface(if wildcard {
            format!("{stem}+")
        } else {
            stem.to_string()
        }))
    }
}

/// Transport of a privileged (always-allowed) entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum PrivilegedProtocol {
    #[serde(alias = "tcp")]
    Tcp,
    #[serde(alias = "udp")]
    Udp,
    #[serde(alias = "sctp")]
    Sctp,
    #[serde(alias = "icmp")]
    Icmp,
}

impl PrivilegedProtocol {
    fn parse(s: &str) -> Option<PrivilegedProtocol> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" => Some(PrivilegedProtocol::Tcp),
            "udp" => Some(PrivilegedProtocol::Udp),
            "sctp" => Some(PrivilegedProtocol::Sctp),
            "icmp" => Some(PrivilegedProtocol::Icmp),
            _ => None,
        }
    }

    pub fn carries_ports(self) -> bool {
        !matches!(self, PrivilegedProtocol::Icmp)
    }
}

/// Traffic that is always allowed, ahead of any policy, so that a deny-all
/// cannot cut the operator off: to the node from `cidr` (INPUT), from the
/// node to `cidr` (OUTPUT), and routed from or to `cidr` (FORWARD), on the
/// given destination port when one is set.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Privileged {
    pub cidr: IpNet,
    #[serde(default)]
    pub protocol: Option<PrivilegedProtocol>,
    #[serde(default)]
    pub port: Option<u16>,
}

impl Privileged {
    /// What is wrong with an entry whose parts each parsed.
    fn problem(&self) -> Option<&'static str> {
        match (self.protocol, self.port) {
            (None, Some(_)) => Some("a port needs a protocol"),
            (Some(p), Some(_)) if !p.carries_ports() => Some("ICMP has no ports"),
            (_, Some(0)) => Some("port 0 is not a port"),
            _ => None,
        }
    }
}

impl FromStr for Privileged {
    type Err = ConfigError;
    /// `CIDR[,proto[/port]]`, e.g. `10.0.0.0/24,tcp/22`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| ConfigError::Privileged {
            value: s.into(),
            reason,
        };
        let (cidr, rest) = match s.split_once(',') {
            Some((c, r)) => (c, Some(r)),
            None => (s, None),
        };
        let cidr = parse_cidr(cidr).ok_or_else(|| err("expected CIDR[,proto[/port]]"))?;
        let (protocol, port) = match rest {
            None => (None, None),
            Some(rest) => {
                let (proto, port) = match rest.split_once('/') {
                    Some((p, port)) => (p, Some(port)),
                    None => (rest, None),
                };
                let proto = PrivilegedProtocol::parse(proto)
                    .ok_or_else(|| err("protocol must be tcp, udp, sctp or icmp"))?;
                let port = port
                    .map(|p| p.parse::<u16>().map_err(|_| err("port must be 1-65535")))
                    .transpose()?;
                (Some(proto), port)
            }
        };
        let entry = Privileged {
            cidr,
            protocol,
            port,
        };
        match entry.problem() {
            Some(reason) => Err(err(reason)),
            None => Ok(entry),
        }
    }
}

/// A bare address is a host prefix.
fn parse_cidr(s: &str) -> Option<IpNet> {
    s.parse::<IpNet>()
        .ok()
        .or_else(|| s.parse::<IpAddr>().ok().map(IpNet::from))
        .map(|net| net.trunc())
}

/// `k=v,k2=v2` as given to `--node-labels`.
pub fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    s.split(',')
        .filter(|part| !part.is_empty())
        .map(|part| match part.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(ConfigError::Label { value: part.into() }),
        })
        .collect()
}

/// A mask written in YAML as a hexadecimal string or as a number.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum MaskValue {
    Number(u32),
    Text(String),
}

/// The configuration file, and the flags, before validation: every key is
/// optional, flags are laid over the file with [`Settings::overlay`].
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Settings {
    pub node_name: Option<String>,
    pub node_labels: Option<BTreeMap<String, String>>,
    pub node_addresses: Option<Vec<IpAddr>>,
    pub interfaces: Option<Vec<String>>,
    pub queues: Option<u32>,
    pub queue_base: Option<u16>,
    pub mark_mask: Option<MaskValue>,
    pub fail_mode: Option<FailMode>,
    pub privileged: Option<Vec<Privileged>>,
    pub audit_log: Option<PathBuf>,
    pub metrics_address: Option<SocketAddr>,
    pub l7_queue: Option<u16>,
    pub l7_deny_response: Option<L7DenyResponse>,
    pub l7_max_flows: Option<usize>,
    pub l7_idle_timeout_seconds: Option<u64>,
    pub dns_queue: Option<u16>,
    pub dns_trusted_servers: Option<Vec<IpAddr>>,
    pub fqdn_min_ttl: Option<u32>,
    pub fqdn_max_addresses_per_name: Option<usize>,
    pub fqdn_max_addresses: Option<usize>,
    pub audit_rate: Option<u32>,
    pub audit_burst: Option<u32>,
    pub audit_log_max_bytes: Option<u64>,
    pub audit_log_max_files: Option<u32>,
    pub status_socket: Option<PathBuf>,
}

/// Smallest `auditLogMaxBytes`: a rotation per line would lose the log.
pub const MIN_AUDIT_LOG_BYTES: u64 = 4096;

impl Settings {
    /// Parses the YAML text of a configuration file read from `path`.
    pub fn from_yaml(path: &std::path::Path, text: &str) -> Result<Settings, ConfigError> {
        if text.trim().is_empty() {
            return Ok(Settings::default());
        }
        let settings: Settings = serde_saphyr::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        for entry in settings.privileged.iter().flatten() {
            if let Some(reason) = entry.problem() {
                return Err(ConfigError::Privileged {
                    value: entry.cidr.to_string(),
                    reason,
                });
            }
        }
        Ok(settings)
    }

    /// `self` with every key that `over` sets replaced by `over`'s value.
    pub fn overlay(self, over: Settings) -> Settings {
        Settings {
            node_name: over.node_name.or(self.node_name),
            node_labels: over.node_labels.or(self.node_labels),
            node_addresses: over.node_addresses.or(self.node_addresses),
            interfaces: over.interfaces.or(self.interfaces),
            queues: over.queues.or(self.queues),
            queue_base: over.queue_base.or(self.queue_base),
            mark_mask: over.mark_mask.or(self.mark_mask),
            fail_mode: over.fail_mode.or(self.fail_mode),
            privileged: over.privileged.or(self.privileged),
            audit_log: over.audit_log.or(self.audit_log),
            metrics_address: over.metrics_address.or(self.metrics_address),
            l7_queue: over.l7_queue.or(self.l7_queue),
            l7_deny_response: over.l7_deny_response.or(self.l7_deny_response),
            l7_max_flows: over.l7_max_flows.or(self.l7_max_flows),
            l7_idle_timeout_seconds: over
                .l7_idle_timeout_seconds
                .or(self.l7_idle_timeout_seconds),
            dns_queue: over.dns_queue.or(self.dns_queue),
            dns_trusted_servers: over.dns_trusted_servers.or(self.dns_trusted_servers),
            fqdn_min_ttl: over.fqdn_min_ttl.or(self.fqdn_min_ttl),
            fqdn_max_addresses_per_name: over
                .fqdn_max_addresses_per_name
                .or(self.fqdn_max_addresses_per_name),
            fqdn_max_addresses: over.fqdn_max_addresses.or(self.fqdn_max_addresses),
            audit_rate: over.audit_rate.or(self.audit_rate),
            audit_burst: over.audit_burst.or(self.audit_burst),
            audit_log_max_bytes: over.audit_log_max_bytes.or(self.audit_log_max_bytes),
            audit_log_max_files: over.audit_log_max_files.or(self.audit_log_max_files),
            status_socket: over.status_socket.or(self.status_socket),
        }
    }

    /// Validates and fills defaults. `defaults` carries what depends on the
    /// machine.
    pub fn resolve(self, defaults: &MachineDefaults) -> Result<Config, ConfigError> {
        let node_name = self
            .node_name
            .clone()
            .unwrap_or_else(|| defaults.node_name.clone());
        if node_name.trim().is_empty() {
            return Err(ConfigError::NodeName);
        }
        let base = self.queue_base.unwrap_or(DEFAULT_QUEUE_BASE);
        let count = self.queues.unwrap_or(defaults.queues);
        let queues = QueueRange::new(base, count)?;
        let fqdn = FqdnConfig::resolve(&self, &queues)?;
        let l7 = L7Config::resolve(&self, &queues, fqdn.dns_queue)?;
        let marks = match self.mark_mask {
            None => MarkLayout::default(),
            Some(MaskValue::Number(n)) => MarkLayout::new(n)?,
            Some(MaskValue::Text(t)) => t.parse()?,
        };
        let interfaces = self
            .interfaces
            .unwrap_or_default()
            .iter()
            .map(|g| g.parse())
            .collect::<Result<Vec<Interface>, _>>()?;
        let audit_error = |key, reason| ConfigError::Audit { key, reason };
        let audit_rate = self
            .audit_rate
            .unwrap_or(crate::audit::writer::DEFAULT_RATE);
        let audit_burst = self
            .audit_burst
            .unwrap_or(crate::audit::writer::DEFAULT_BURST);
        if audit_rate == 0 {
            return Err(audit_error(
                "auditRate",
                "must be at least 1 line per second",
            ));
        }
        if audit_burst == 0 {
            return Err(audit_error("auditBurst", "must be at least 1"));
        }
        let audit_log_max_bytes = self
            .audit_log_max_bytes
            .unwrap_or(crate::audit::writer::DEFAULT_MAX_BYTES);
        if audit_log_max_bytes < MIN_AUDIT_LOG_BYTES {
            return Err(audit_error("auditLogMaxBytes", "must be at least 4096"));
        }
        Ok(Config {
            fqdn,
            node_name,
            node_labels: self.node_labels.unwrap_or_default(),
            node_addresses: self.node_addresses.unwrap_or_default(),
            interfaces,
            queues,
            marks,
            fail_mode: self.fail_mode.unwrap_or_default(),
            privileged: self.privileged.unwrap_or_default(),
            audit_log: self.audit_log,
            metrics_address: self.metrics_address,
            audit_rate,
            audit_burst,
            audit_log_max_bytes,
            audit_log_max_files: self
                .audit_log_max_files
                .unwrap_or(crate::audit::writer::DEFAULT_MAX_FILES),
            status_socket: self.status_socket,
            l7,
        })
    }
}

/// Default bound on flows under L7 inspection at once.
pub const DEFAULT_L7_MAX_FLOWS: usize = 65_536;
/// Default idle time after which an L7 flow's state is forgotten (its
/// connection is then reset on its next request bytes).
pub const DEFAULT_L7_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// How connections under L7 rules are inspected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct L7Config {
    /// The NFQUEUE of client→server payload of L7 connections; default the
    /// first queue after the connection queues that the DNS queue does not
    /// take (103 with the defaults and two connection queues).
    pub queue: u16,
    pub deny_response: L7DenyResponse,
    /// Flows tracked at once; the least recently used is forgotten first.
    pub max_flows: usize,
    pub idle_timeout: std::time::Duration,
}

impl L7Config {
    fn resolve(
        settings: &Settings,
        queues: &QueueRange,
        dns_queue: u16,
    ) -> Result<L7Config, ConfigError> {
        let (first, last) = (queues.first(), queues.last());
        let queue =
            match settings.l7_queue {
                Some(q) => q,
                // The first queue after the connection queues the DNS queue
                // does not take.
                None => (last..=u16::MAX).skip(1).find(|q| *q != dns_queue).ok_or(
                    ConfigError::L7Queue {
                        queue: last,
                        first,
                        last,
                        dns_queue,
                    },
                )?,
            };
        if (first..=last).contains(&queue) || queue == dns_queue {
            return Err(ConfigError::L7Queue {
                queue,
                first,
                last,
                dns_queue,
            });
        }
        let max_flows = settings.l7_max_flows.unwrap_or(DEFAULT_L7_MAX_FLOWS);
        if max_flows == 0 {
            return Err(ConfigError::L7Bound { key: "l7MaxFlows" });
        }
        let idle_timeout = match settings.l7_idle_timeout_seconds {
            Some(0) => {
                return Err(ConfigError::L7Bound {
                    key: "l7IdleTimeoutSeconds",
                })
            }
            Some(s) => std::time::Duration::from_secs(s),
            None => DEFAULT_L7_IDLE_TIMEOUT,
        };
        Ok(L7Config {
            queue,
            deny_response: settings.l7_deny_response.unwrap_or_default(),
            max_flows,
            idle_timeout,
        })
    }
}

/// Default floor on the TTL of learned addresses (seconds): covers the
/// connect and its retries after a TTL-0 answer.
pub const DEFAULT_FQDN_MIN_TTL: u32 = 5;
/// Default bound on addresses remembered per name.
pub const DEFAULT_FQDN_MAX_PER_NAME: usize = 128;
/// Smallest per-name bound accepted (the upstream FQDN selector proposal
/// requires at least 100).
pub const MIN_FQDN_MAX_PER_NAME: usize = 100;
/// Default and largest bound on addresses remembered in total (the default
/// `maxelem` of an ipset, which the FQDN sets keep).
pub const DEFAULT_FQDN_MAX_ADDRESSES: usize = 65_536;

/// How DNS answers are learned for FQDN rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FqdnConfig {
    /// NFQUEUE number of the DNS reply queue (default: after the
    /// connection queues).
    pub dns_queue: u16,
    /// When not empty, only replies from these addresses are learned.
    pub trusted_servers: Vec<IpAddr>,
    pub min_ttl_secs: u32,
    pub max_addresses_per_name: usize,
    pub max_addresses: usize,
}

impl FqdnConfig {
    fn resolve(settings: &Settings, queues: &QueueRange) -> Result<FqdnConfig, ConfigError> {
        let dns_queue = match settings.dns_queue {
            Some(q) => q,
            None => queues.last().checked_add(1).ok_or(ConfigError::Queues {
                base: queues.first(),
                queues: u32::from(queues.last() - queues.first()) + 2,
            })?,
        };
        if (queues.first()..=queues.last()).contains(&dns_queue) {
            return Err(ConfigError::DnsQueue {
                queue: dns_queue,
                first: queues.first(),
                last: queues.last(),
            });
        }
        let per_name = settings
            .fqdn_max_addresses_per_name
            .unwrap_or(DEFAULT_FQDN_MAX_PER_NAME);
        if per_name < MIN_FQDN_MAX_PER_NAME {
            return Err(ConfigError::FqdnBound {
                key: "fqdnMaxAddressesPerName",
                value: per_name,
                reason: "must be at least 100",
            });
        }
        let total = settings
            .fqdn_max_addresses
            .unwrap_or(DEFAULT_FQDN_MAX_ADDRESSES);
        if total < per_name {
            return Err(ConfigError::FqdnBound {
                key: "fqdnMaxAddresses",
                value: total,
                reason: "must be at least fqdnMaxAddressesPerName",
            });
        }
        if total > DEFAULT_FQDN_MAX_ADDRESSES {
            return Err(ConfigError::FqdnBound {
                key: "fqdnMaxAddresses",
                value: total,
                reason: "must be at most 65536 (the FQDN sets' maxelem)",
            });
        }
        Ok(FqdnConfig {
            dns_queue,
            trusted_servers: settings.dns_trusted_servers.clone().unwrap_or_default(),
            min_ttl_secs: settings.fqdn_min_ttl.unwrap_or(DEFAULT_FQDN_MIN_TTL),
            max_addresses_per_name: per_name,
            max_addresses: total,
        })
    }
}

/// Defaults that depend on the machine the agent runs on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineDefaults {
    pub node_name: String,
    /// Number of NFQUEUE workers when `queues` is not set (core count).
    pub queues: u32,
}

/// Consecutive NFQUEUE numbers, one worker each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueRange {
    base: u16,
    count: u16,
}

impl QueueRange {
    pub fn new(base: u16, count: u32) -> Result<QueueRange, ConfigError> {
        let last = u32::from(base) + count.saturating_sub(1);
        match u16::try_from(count) {
            Ok(c) if c >= 1 && last <= u32::from(u16::MAX) => Ok(QueueRange { base, count: c }),
            _ => Err(ConfigError::Queues {
                base,
                queues: count,
            }),
        }
    }

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

/// The validated configuration of `tollgate run`.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub node_name: String,
    pub node_labels: BTreeMap<String, String>,
    /// Configured node addresses; the agent adds those found on interfaces.
    pub node_addresses: Vec<IpAddr>,
    /// Interfaces to enforce on; empty means all.
    pub interfaces: Vec<Interface>,
    pub queues: QueueRange,
    pub marks: MarkLayout,
    pub fail_mode: FailMode,
    pub privileged: Vec<Privileged>,
    pub audit_log: Option<PathBuf>,
    pub metrics_address: Option<SocketAddr>,
    pub l7: L7Config,
    pub fqdn: FqdnConfig,
    /// Audit lines per second and burst (token bucket).
    pub audit_rate: u32,
    pub audit_burst: u32,
    /// Size at which the audit log is rotated, and old files kept.
    pub audit_log_max_bytes: u64,
    pub audit_log_max_files: u32,
    /// The status API's Unix socket, when configured; unset means
    /// [`crate::status::DEFAULT_SOCKET`], best effort.
    pub status_socket: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn defaults() -> MachineDefaults {
        MachineDefaults {
            node_name: "host".into(),
            queues: 2,
        }
    }

    #[test]
    fn empty_settings_resolve_to_defaults() {
        let config = Settings::default().resolve(&defaults()).unwrap();
        assert_eq!(config.node_name, "host");
        assert_eq!(config.queues.first(), 100);
        assert_eq!(config.queues.last(), 101);
        assert_eq!(config.marks.mask, 0xf0_0000);
        assert_eq!(config.marks.allow, 0x10_0000);
        assert_eq!(config.marks.reject, 0x20_0000);
        assert_eq!(config.fail_mode, FailMode::Closed);
        assert!(config.interfaces.is_empty());
        assert_eq!(
            config.fqdn,
            FqdnConfig {
                dns_queue: 102,
                trusted_servers: vec![],
                min_ttl_secs: 5,
                max_addresses_per_name: 128,
                max_addresses: 65_536,
            }
        );
        assert_eq!(config.marks.l7, 0x40_0000);
        assert_eq!(config.l7.queue, 103);
        assert_eq!(config.l7.deny_response, L7DenyResponse::Forbidden);
        assert_eq!(config.l7.max_flows, DEFAULT_L7_MAX_FLOWS);
    }

    #[test]
    fn l7_keys() {
        let yaml = "l7Queue: 9\nl7DenyResponse: reset\nl7MaxFlows: 10\nl7IdleTimeoutSeconds: 30\n";
        let config = Settings::from_yaml(Path::new("c.yaml"), yaml)
            .unwrap()
            .resolve(&defaults())
            .unwrap();
        assert_eq!(config.l7.queue, 9);
        assert_eq!(config.l7.deny_response, L7DenyResponse::Reset);
        assert_eq!(config.l7.max_flows, 10);
        assert_eq!(config.l7.idle_timeout, std::time::Duration::from_secs(30));
        let yaml = "l7DenyResponse: '403'\n";
        let settings = Settings::from_yaml(Path::new("c.yaml"), yaml).unwrap();
        assert_eq!(settings.l7_deny_response, Some(L7DenyResponse::Forbidden));
        for bad in [
            "l7Queue: 101\n",
            "l7Queue: 102\n",
            "l7MaxFlows: 0\n",
            "l7IdleTimeoutSeconds: 0\n",
        ] {
            let settings = Settings::from_yaml(Path::new("c.yaml"), bad).unwrap();
            assert!(settings.resolve(&defaults()).is_err(), "{bad}");
        }
        assert!("teapot".parse::<L7DenyResponse>().is_err());
        // A DNS queue moved elsewhere leaves the L7 queue right after.
        let moved = Settings {
            dns_queue: Some(50),
            ..Settings::default()
        };
        assert_eq!(moved.resolve(&defaults()).unwrap().l7.queue, 102);
    }

    #[test]
    fn fqdn_keys_and_bounds() {
        let yaml = "dnsQueue: 9\ndnsTrustedServers: [10.0.0.53]\nfqdnMinTtl: 1\n\
                    fqdnMaxAddressesPerName: 100\nfqdnMaxAddresses: 1000\n";
        let config = Settings::from_yaml(Path::new("c.yaml"), yaml)
            .unwrap()
            .resolve(&defaults())
            .unwrap();
        assert_eq!(config.fqdn.dns_queue, 9);
        assert_eq!(config.fqdn.trusted_servers.len(), 1);
        assert_eq!(config.fqdn.min_ttl_secs, 1);
        let bad = |s: Settings| s.resolve(&defaults()).unwrap_err().to_string();
        let clash = bad(Settings {
            dns_queue: Some(101),
            ..Settings::default()
        });
        assert!(clash.contains("dnsQueue 101"), "{clash}");
        let small = bad(Settings {
            fqdn_max_addresses_per_name: Some(99),
            ..Settings::default()
        });
        assert!(small.contains("at least 100"), "{small}");
        let large = bad(Settings {
            fqdn_max_addresses: Some(65_537),
            ..Settings::default()
        });
        assert!(large.contains("at most 65536"), "{large}");
        assert!(Settings {
            queue_base: Some(65534),
            queues: Some(2),
            ..Settings::default()
        }
        .resolve(&defaults())
        .is_err());
    }

    #[test]
    fn file_keys_are_camel_case_and_flags_override() {
        let yaml = "nodeName: n1\nnodeLabels: {role: cp}\nnodeAddresses: [10.0.0.1, 'fd00::1']\n\
                    interfaces: ['veth*', eth0]\nqueues: 3\nqueueBase: 7\nmarkMask: '0x70000'\n\
                    failMode: open\nprivileged:\n- {cidr: 10.0.0.0/24, protocol: TCP, port: 22}\n\
                    auditLog: /var/log/np.log\nmetricsAddress: 127.0.0.1:9100\n";
        let file = Settings::from_yaml(Path::new("c.yaml"), yaml).unwrap();
        let flags = Settings {
            queues: Some(1),
            fail_mode: Some(FailMode::Closed),
            ..Settings::default()
        };
        let config = file.overlay(flags).resolve(&defaults()).unwrap();
        assert_eq!(config.node_name, "n1");
        assert_eq!(config.node_labels["role"], "cp");
        assert_eq!(config.node_addresses.len(), 2);
        assert_eq!(config.interfaces[0].as_iptables(), "veth+");
        assert_eq!(config.interfaces[1].as_iptables(), "eth0");
        assert_eq!((config.queues.first(), config.queues.last()), (7, 7));
        assert_eq!(config.marks.allow, 0x10000);
        assert_eq!(config.marks.reject, 0x20000);
        assert_eq!(config.fail_mode, FailMode::Closed);
        assert_eq!(
            config.privileged,
            vec![Privileged {
                cidr: "10.0.0.0/24".parse().unwrap(),
                protocol: Some(PrivilegedProtocol::Tcp),
                port: Some(22)
            }]
        );
        assert_eq!(config.audit_log, Some(PathBuf::from("/var/log/np.log")));
        assert_eq!((config.audit_rate, config.audit_burst), (500, 1000));
        assert_eq!(config.audit_log_max_files, 3);
        assert_eq!(config.status_socket, None);
    }

    #[test]
    fn audit_and_status_keys() {
        let yaml = "auditRate: 5000\nauditBurst: 10000\nauditLogMaxBytes: 1048576\n\
                    auditLogMaxFiles: 0\nstatusSocket: /tmp/t.sock\n";
        let config = Settings::from_yaml(Path::new("c.yaml"), yaml)
            .unwrap()
            .resolve(&defaults())
            .unwrap();
        assert_eq!((config.audit_rate, config.audit_burst), (5000, 10000));
        assert_eq!(config.audit_log_max_bytes, 1 << 20);
        assert_eq!(config.audit_log_max_files, 0);
        assert_eq!(config.status_socket, Some(PathBuf::from("/tmp/t.sock")));
        for bad in [
            "auditRate: 0\n",
            "auditBurst: 0\n",
            "auditLogMaxBytes: 100\n",
        ] {
            let err = Settings::from_yaml(Path::new("c.yaml"), bad)
                .unwrap()
                .resolve(&defaults())
                .unwrap_err();
            assert!(
                err.to_string().starts_with(bad.split(':').next().unwrap()),
                "{err}"
            );
        }
    }

    #[test]
    fn unknown_keys_and_bad_values_are_errors() {
        let err = Settings::from_yaml(Path::new("c.yaml"), "nodename: x\n").unwrap_err();
        assert!(err.to_string().starts_with("c.yaml: "), "{err}");
        assert!(Settings::from_yaml(Path::new("c.yaml"), "failMode: maybe\n").is_err());
        let port_without_proto = "privileged:\n- {cidr: 10.0.0.0/8, port: 22}\n";
        assert!(Settings::from_yaml(Path::new("c.yaml"), port_without_proto).is_err());
    }

    #[test]
    fn privileged_flag_syntax() {
        let p: Privileged = "10.0.0.7,tcp/22".parse().unwrap();
        assert_eq!(p.cidr.to_string(), "10.0.0.7/32");
        assert_eq!(p.protocol, Some(PrivilegedProtocol::Tcp));
        assert_eq!(p.port, Some(22));
        let p: Privileged = "fd00::/64,icmp".parse().unwrap();
        assert_eq!((p.protocol, p.port), (Some(PrivilegedProtocol::Icmp), None));
        let p: Privileged = "192.168.1.9/24".parse().unwrap();
        assert_eq!(p.cidr.to_string(), "192.168.1.0/24");
        for bad in [
            "nope",
            "10.0.0.0/8,gre",
            "10.0.0.0/8,tcp/0",
            "10.0.0.0/8,icmp/3",
        ] {
            assert!(bad.parse::<Privileged>().is_err(), "{bad}");
        }
    }

    #[test]
    fn interfaces_and_queues_and_labels() {
        assert!("eth*0".parse::<Interface>().is_err());
        assert!("*".parse::<Interface>().is_err());
        assert!("averyveryverylongname".parse::<Interface>().is_err());
        assert!(QueueRange::new(65535, 2).is_err());
        assert!(QueueRange::new(1, 0).is_err());
        assert_eq!(
            QueueRange::new(65534, 2)
                .unwrap()
                .iter()
                .collect::<Vec<_>>(),
            vec![65534, 65535]
        );
        let labels = parse_labels("a=1,b=").unwrap();
        assert_eq!(labels["b"], "");
        assert!(parse_labels("a").is_err());
    }
}
