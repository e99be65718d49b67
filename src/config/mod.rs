//! Agent configuration in Antrea's shape: [`AgentConfig`] is a set of
//! sections, each a struct with its keys, defaults and checks, taken whole
//! by the subsystem it configures; [`AgentConfig::validate`] holds the
//! checks that span sections. Pure: it never reads a file or the machine.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::audit::AuditFormat;
use crate::fqdn::{
    FqdnResolve, LearnerConfig, QueryBounds, ResolveBounds, DEFAULT_MAX_OUTSTANDING_QUERIES,
    DEFAULT_MAX_TTL_SECS, DEFAULT_QUERY_TIMEOUT_SECS, DEFAULT_RESOLVE_BACKOFF_CAP_SECS,
    DEFAULT_RESOLVE_CONCURRENCY, MAX_IPSET_TIMEOUT_SECS,
};
use crate::http::{FramingPolicy, BODYLESS_METHODS};
use crate::l7::{DenyResponse, UrgentData};
use crate::marks::{FailMode, MarkLayout};
use crate::source::files::{
    Limits, DEFAULT_FILE_BYTES, DEFAULT_OBJECTS_PER_FILE, DEFAULT_TOTAL_BYTES,
};

mod layers;
mod values;

pub use layers::{flags, Flag, Loaded, MachineDefaults, Setting};
use values::{allowed_sources, labels, privileged, seconds};
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
    pub l7: QueueRange,
}

/// The kernel rules: which packets go to the queues and what is always
/// allowed, and what happens to them at the agent's start and stop.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct DatapathConfig {
    /// Interfaces to enforce on, names or `veth*` prefixes; empty: all.
    #[arg(long = "interfaces", value_name = "GLOB,...", value_delimiter = ',')]
    pub interfaces: Vec<Interface>,
    /// Packet-mark bits tollgate owns (at least three; default 0xf00000).
    #[arg(long = "mark-mask", value_name = "HEX")]
    pub mark_mask: MarkLayout,
    /// What happens to new connections nobody can decide: open or closed
    /// (default).
    #[arg(long = "fail-mode", value_name = "MODE")]
    pub fail_mode: FailMode,
    /// Traffic always allowed, ahead of every policy: `{cidr, protocol,
    /// port, hooks}` or `CIDR[,proto[/port]]`; `hooks` (input, output,
    /// forward) defaults to the Node's own traffic, input and output, and
    /// `CIDR[,proto[/port]]` always means that.
    #[arg(long = "privileged", value_name = "CIDR[,proto[/port]]")]
    #[serde(deserialize_with = "privileged")]
    pub privileged: Vec<Privileged>,
    /// Without earlier kernel state, what new connections meet before the
    /// first complete snapshot: closed (default; node ingress and
    /// forwarded traffic wait, privileged rules and the node's own egress
    /// pass) or open (everything passes; unsafe).
    #[arg(long = "startup-policy", value_name = "closed|open")]
    pub startup_policy: StartupPolicy,
    /// Seconds between checks that the kernel still holds the state of the
    /// ruleset in force (repaired when not); 0 turns the check off
    /// (default 10).
    #[arg(long = "drift-check-seconds", value_name = "SECS")]
    pub drift_check_seconds: u64,
    /// Remove everything tollgate owns in the kernel when the agent stops
    /// (default: the rules stay and keep enforcing).
    #[arg(long = "cleanup-on-exit")]
    pub cleanup_on_exit: bool,
    /// Socket receive buffer of each connection and L7 queue, bytes
    /// (beyond the system's rmem_max as root); 0 (default) keeps the
    /// system's net.core.rmem_default. Packets beyond it are lost and
    /// counted in queue_overflows.
    #[arg(long = "queue-receive-buffer-bytes", value_name = "BYTES")]
    pub queue_receive_buffer_bytes: usize,
}

/// Default `datapath.driftCheckSeconds`.
pub const DEFAULT_DRIFT_CHECK: Duration = Duration::from_secs(10);

impl Default for DatapathConfig {
    fn default() -> Self {
        DatapathConfig {
            interfaces: Vec::new(),
            mark_mask: MarkLayout::default(),
            fail_mode: FailMode::default(),
            privileged: Vec::new(),
            startup_policy: StartupPolicy::default(),
            drift_check_seconds: DEFAULT_DRIFT_CHECK.as_secs(),
            cleanup_on_exit: false,
            queue_receive_buffer_bytes: 0,
        }
    }
}

impl DatapathConfig {
    /// How often the kernel state is checked for drift; `None`: never.
    pub fn drift_check(&self) -> Option<Duration> {
        (self.drift_check_seconds > 0).then(|| Duration::from_secs(self.drift_check_seconds))
    }
}

/// What a starting agent that finds no earlier kernel state does before
/// its source has a complete snapshot (Kubernetes mode: every kind listed
/// once).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StartupPolicy {
    /// New connections through the node's FORWARD and INPUT hooks (on the
    /// configured interfaces) are queued to queues nobody reads yet, so
    /// they are dropped; loopback, privileged entries, the node's own
    /// outgoing connections (the agent's to the API server) and
    /// established connections pass.
    #[default]
    Closed,
    /// Nothing is installed before the first snapshot: everything passes.
    Open,
}

impl std::str::FromStr for StartupPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "closed" => Ok(StartupPolicy::Closed),
            "open" => Ok(StartupPolicy::Open),
            _ => Err(format!("startup policy {s:?}: expected closed or open")),
        }
    }
}

impl std::fmt::Display for StartupPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StartupPolicy::Closed => "closed",
            StartupPolicy::Open => "open",
        })
    }
}

/// Default floor on the TTL of learned addresses (seconds): covers the
/// connect and its retries after a TTL-0 answer.
pub const DEFAULT_FQDN_MIN_TTL: u32 = 5;
/// Smallest per-name bound accepted (the upstream FQDN selector proposal
/// requires at least 100).
pub const MIN_FQDN_MAX_PER_NAME: usize = 100;
/// Default and largest bound on addresses remembered in total (the default
/// `maxelem` of an ipset, which the FQDN sets keep).
pub const MAX_FQDN_ADDRESSES: usize = 65_536;

/// How DNS answers are learned for FQDN rules.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct FqdnConfig {
    /// NFQUEUE of DNS queries and replies (default: the first after the
    /// connection queues).
    #[arg(long = "dns-queue", value_name = "N")]
    pub dns_queue: u16,
    /// Learn only from replies of these DNS servers; empty: from any.
    #[arg(long = "dns-trusted-server", value_name = "IP")]
    pub trusted_servers: Vec<IpAddr>,
    /// Floor on the TTL of learned addresses, seconds (default 5).
    #[arg(long = "fqdn-min-ttl", value_name = "SECS")]
    pub min_ttl: u32,
    /// Ceiling on the TTL of learned addresses, seconds (default 86400,
    /// at least fqdn.minTtl and 1): how long one answer can keep an
    /// address allowed.
    #[arg(long = "fqdn-max-ttl", value_name = "SECS")]
    pub max_ttl: u32,
    /// DNS queries remembered until answered (default 65536, at least 1):
    /// a reply is learned from only if it answers one.
    #[arg(skip)]
    pub max_outstanding_queries: usize,
    /// Seconds a remembered query waits for its answer (default 30, at
    /// least 1).
    #[arg(skip)]
    pub query_timeout: u32,
    /// Addresses remembered per name (default 128, at least 100).
    #[arg(skip)]
    pub max_addresses_per_name: usize,
    /// Addresses remembered in all (default and at most 65536).
    #[arg(skip)]
    pub max_addresses: usize,
    /// Whether tollgate resolves exact FQDN selectors itself, when they
    /// appear and before their addresses time out: exact (default) or off
    /// (snooping only). Wildcards are always snoop-only.
    #[arg(long = "fqdn-resolve", value_name = "exact|off")]
    pub resolve: FqdnResolve,
    /// DNS servers (port 53) tollgate asks for exact names, in order;
    /// empty: the nameservers of the node's /etc/resolv.conf.
    #[arg(long = "fqdn-resolver", value_name = "IP")]
    pub resolvers: Vec<IpAddr>,
    /// Queries for exact names in flight at once, one thread each
    /// (default 8, 2 to 64): each policy gets its share, names that got
    /// no answer at most half.
    #[arg(skip)]
    pub resolve_concurrency: usize,
    /// Longest wait, seconds, before a name that keeps failing (no answer,
    /// NXDOMAIN, no record of the type) is asked again (default 300, 1 to
    /// 86400).
    #[arg(skip)]
    pub resolve_backoff_cap: u32,
}

impl Default for FqdnConfig {
    fn default() -> Self {
        FqdnConfig {
            dns_queue: 101,
            trusted_servers: Vec::new(),
            min_ttl: DEFAULT_FQDN_MIN_TTL,
            max_ttl: DEFAULT_MAX_TTL_SECS,
            max_outstanding_queries: DEFAULT_MAX_OUTSTANDING_QUERIES,
            query_timeout: DEFAULT_QUERY_TIMEOUT_SECS,
            max_addresses_per_name: 128,
            max_addresses: MAX_FQDN_ADDRESSES,
            resolve: FqdnResolve::default(),
            resolvers: Vec::new(),
            resolve_concurrency: DEFAULT_RESOLVE_CONCURRENCY,
            resolve_backoff_cap: DEFAULT_RESOLVE_BACKOFF_CAP_SECS,
        }
    }
}

impl FqdnConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bound = |key, value: usize, reason| ConfigError::Bound {
            key,
            value: value as u64,
            reason,
        };
        let (per_name, total) = (self.max_addresses_per_name, self.max_addresses);
        if per_name < MIN_FQDN_MAX_PER_NAME {
            return Err(bound(
                "fqdn.maxAddressesPerName",
                per_name,
                "must be at least 100",
            ));
        }
        if total < per_name {
            return Err(bound(
                "fqdn.maxAddresses",
                total,
                "must be at least fqdn.maxAddressesPerName",
            ));
        }
        if total > MAX_FQDN_ADDRESSES {
            return Err(bound(
                "fqdn.maxAddresses",
                total,
                "must be at most 65536 (the FQDN sets' maxelem)",
            ));
        }
        if self.max_ttl < self.min_ttl.max(1) {
            return Err(ConfigError::Bound {
                key: "fqdn.maxTtl",
                value: u64::from(self.max_ttl),
                reason: "must be at least fqdn.minTtl and 1",
            });
        }
        if self.max_ttl > MAX_IPSET_TIMEOUT_SECS {
            return Err(ConfigError::Bound {
                key: "fqdn.maxTtl",
                value: u64::from(self.max_ttl),
                reason: "must be at most 2147483 (the largest ipset timeout)",
            });
        }
        if self.max_outstanding_queries == 0 {
            return Err(bound("fqdn.maxOutstandingQueries", 0, "must be at least 1"));
        }
        if self.query_timeout == 0 {
            return Err(bound("fqdn.queryTimeout", 0, "must be at least 1"));
        }
        if !(2..=64).contains(&self.resolve_concurrency) {
            return Err(bound(
                "fqdn.resolveConcurrency",
                self.resolve_concurrency,
                "must be between 2 and 64",
            ));
        }
        if !(1..=86_400).contains(&self.resolve_backoff_cap) {
            return Err(ConfigError::Bound {
                key: "fqdn.resolveBackoffCap",
                value: u64::from(self.resolve_backoff_cap),
                reason: "must be between 1 and 86400 seconds",
            });
        }
        Ok(())
    }

    /// The bounds of the outstanding-query table.
    pub fn query_bounds(&self) -> QueryBounds {
        QueryBounds {
            max_outstanding: self.max_outstanding_queries,
            timeout_secs: self.query_timeout,
        }
    }

    /// The timing of resolving ahead: the learner's TTL bounds, the
    /// concurrency and backoff cap set here, the default rates.
    pub fn resolve_bounds(&self) -> ResolveBounds {
        ResolveBounds {
            min_ttl_secs: self.min_ttl,
            max_ttl_secs: self.max_ttl,
            concurrency: self.resolve_concurrency,
            max_backoff_ms: u64::from(self.resolve_backoff_cap) * 1000,
            ..ResolveBounds::default()
        }
    }

    /// The learner's bounds.
    pub fn learner(&self) -> LearnerConfig {
        LearnerConfig {
            min_ttl_secs: self.min_ttl,
            max_ttl_secs: self.max_ttl,
            max_addresses_per_name: self.max_addresses_per_name,
            max_addresses: self.max_addresses,
        }
    }
}

/// How connections under L7 rules are inspected.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct L7Config {
    /// NFQUEUE of client→server payload of L7 connections (default: the
    /// first queue after the connection queues that the DNS queue does not
    /// take).
    #[arg(skip)]
    pub queue: u16,
    /// Number of L7 queues from l7.queue on, one worker thread each
    /// (default 2, at most 64): each connection goes to one of them by its
    /// client port, both directions alike.
    #[arg(long = "l7-queues", value_name = "N")]
    pub queues: u16,
    /// Answer to a denied HTTP request: 403 (default) or reset.
    #[arg(long = "l7-deny-response", value_name = "403|reset")]
    pub deny_response: DenyResponse,
    /// Flows tracked at once (default 65536); the least recently used is
    /// forgotten first.
    #[arg(skip)]
    pub max_flows: usize,
    /// Idle time after which a flow's state is forgotten, seconds (default
    /// 600); its connection is then reset on its next request bytes.
    #[arg(skip)]
    #[serde(rename = "idleTimeoutSeconds", deserialize_with = "seconds")]
    pub idle_timeout: Duration,
    /// A client segment with TCP urgent data (URG or an urgent pointer):
    /// reset the connection (default), or strip URG and the pointer so the
    /// server reads the byte in-band, as tollgate inspected it.
    #[arg(long = "l7-urgent-data", value_name = "reset|strip")]
    pub urgent_data: UrgentData,
    /// Deny requests backends commonly frame differently (default true):
    /// bodies on GET, HEAD, DELETE, TRACE; obsolete line folding; bare CR
    /// or LF; duplicate Content-Length; Content-Length with
    /// Transfer-Encoding; Transfer-Encoding other than `chunked`.
    #[arg(skip)]
    pub strict_framing: bool,
    /// Methods among GET, HEAD, DELETE, TRACE whose requests may carry a
    /// body under strict framing (default none).
    #[arg(skip)]
    pub allow_body_on: Vec<String>,
}

impl Default for L7Config {
    fn default() -> Self {
        L7Config {
            queue: 102,
            queues: DEFAULT_L7_QUEUES,
            deny_response: DenyResponse::default(),
            max_flows: 65_536,
            idle_timeout: Duration::from_secs(600),
            urgent_data: UrgentData::default(),
            strict_framing: true,
            allow_body_on: Vec::new(),
        }
    }
}

/// Default `l7.queues`.
pub const DEFAULT_L7_QUEUES: u16 = 2;
/// Largest `l7.queues`.
pub const MAX_L7_QUEUES: u16 = 64;

impl L7Config {
    /// The L7 queue numbers (as checked by [`AgentConfig::validate`]).
    pub fn range(&self) -> QueueRange {
        let count = self.queues.clamp(1, MAX_L7_QUEUES);
        QueueRange {
            base: self.queue,
            count: count.min(u16::MAX - self.queue + 1),
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let at_least_one = |key, value| ConfigError::Bound {
            key,
            value,
            reason: "must be at least 1",
        };
        if !(1..=MAX_L7_QUEUES).contains(&self.queues)
            || u32::from(self.queue) + u32::from(self.queues) - 1 > u32::from(u16::MAX)
        {
            return Err(ConfigError::Bound {
                key: "l7.queues",
                value: u64::from(self.queues),
                reason: "must be between 1 and 64, the last queue at most 65535",
            });
        }
        if self.max_flows == 0 {
            return Err(at_least_one("l7.maxFlows", 0));
        }
        if self.idle_timeout.is_zero() {
            return Err(at_least_one("l7.idleTimeoutSeconds", 0));
        }
        if let Some(method) = self
            .allow_body_on
            .iter()
            .find(|m| !BODYLESS_METHODS.contains(&m.as_str()))
        {
            return Err(ConfigError::AllowBodyOn {
                method: method.clone(),
            });
        }
        Ok(())
    }

    /// The framing the inspector's request trackers apply.
    pub fn framing(&self) -> FramingPolicy {
        match (self.strict_framing, self.allow_body_on.is_empty()) {
            (false, _) => FramingPolicy::Lenient,
            (true, true) => FramingPolicy::Strict,
            (true, false) => FramingPolicy::StrictAllowingBodies(self.allow_body_on.clone().into()),
        }
    }
}

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

/// Bounds on the files of the policy directory (`--policies`): a file or
/// directory over them is a reload error, refused before it is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct PolicyFilesConfig {
    /// Largest policy file read, bytes (default 4 MiB).
    #[arg(skip)]
    pub max_file_bytes: u64,
    /// Largest size of all policy files together, bytes (default 16 MiB).
    #[arg(skip)]
    pub max_total_bytes: u64,
    /// Most objects in one policy file (default 10000).
    #[arg(skip)]
    pub max_objects_per_file: usize,
}

impl Default for PolicyFilesConfig {
    fn default() -> Self {
        PolicyFilesConfig {
            max_file_bytes: DEFAULT_FILE_BYTES,
            max_total_bytes: DEFAULT_TOTAL_BYTES,
            max_objects_per_file: DEFAULT_OBJECTS_PER_FILE,
        }
    }
}

impl PolicyFilesConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let at_least_one = |key, value| ConfigError::Bound {
            key,
            value,
            reason: "must be at least 1",
        };
        if self.max_file_bytes == 0 {
            return Err(at_least_one("policyFiles.maxFileBytes", 0));
        }
        if self.max_objects_per_file == 0 {
            return Err(at_least_one("policyFiles.maxObjectsPerFile", 0));
        }
        if self.max_total_bytes < self.max_file_bytes {
            return Err(ConfigError::Bound {
                key: "policyFiles.maxTotalBytes",
                value: self.max_total_bytes,
                reason: "must be at least policyFiles.maxFileBytes",
            });
        }
        Ok(())
    }

    /// The bounds the policy directory is read within.
    pub fn limits(&self) -> Limits {
        Limits {
            file_bytes: self.max_file_bytes,
            total_bytes: self.max_total_bytes,
            objects_per_file: self.max_objects_per_file,
        }
    }
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

/// The Docker inventory (`docs/docker.md`): with `enabled`, the
/// endpoints are the running containers the Docker Engine API lists (or
/// podman's Docker-compatible service), and policies still come from
/// `--policies`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct DockerConfig {
    /// Take the endpoints from the Docker Engine API: every running
    /// container is a Pod of the local Node (needs --policies).
    #[arg(long = "docker")]
    pub enabled: bool,
    /// The Docker API socket: `unix:///var/run/docker.sock` (default) or
    /// an absolute path.
    #[arg(long = "docker-host", value_name = "unix:///PATH")]
    pub host: String,
    /// The container label whose value is its namespace (default
    /// `com.docker.compose.project`; containers without it are in
    /// `default`).
    #[arg(long = "docker-namespace-label", value_name = "LABEL")]
    pub namespace_label: String,
    /// The container label naming its ports, `name=port/PROTOCOL,...`
    /// (default `tollgate.io/ports`); without it, the image's exposed
    /// ports, named `<protocol>-<port>` (`tcp-80`).
    #[arg(skip)]
    pub ports_label: String,
}

/// Default `docker.host`.
pub const DEFAULT_DOCKER_HOST: &str = "unix:///var/run/docker.sock";

impl Default for DockerConfig {
    fn default() -> Self {
        DockerConfig {
            enabled: false,
            host: DEFAULT_DOCKER_HOST.into(),
            namespace_label: "com.docker.compose.project".into(),
            ports_label: "tollgate.io/ports".into(),
        }
    }
}

impl DockerConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.socket()?;
        if self.namespace_label.trim().is_empty() {
            return Err(ConfigError::DockerLabel {
                key: "namespaceLabel",
            });
        }
        if self.ports_label.trim().is_empty() {
            return Err(ConfigError::DockerLabel { key: "portsLabel" });
        }
        Ok(())
    }

    /// The path of the API socket `host` names.
    pub fn socket(&self) -> Result<PathBuf, ConfigError> {
        let path = self.host.strip_prefix("unix://").unwrap_or(&self.host);
        if path.starts_with('/') && path.len() > 1 {
            Ok(PathBuf::from(path))
        } else {
            Err(ConfigError::DockerHost {
                host: self.host.clone(),
            })
        }
    }
}

/// The kernel verdict cache: decided (source, protocol:port, destination)
/// tuples the kernel answers without a worker until a ruleset change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct VerdictCacheConfig {
    /// Whether cacheable verdicts are kept in the kernel: on (default) or
    /// off.
    #[arg(long = "verdict-cache", value_name = "on|off")]
    pub enabled: Switch,
    /// Most entries of each cache set (one per hook, family and verdict;
    /// default 65536).
    #[arg(skip)]
    pub max_entries: u32,
    /// Seconds an entry lives after its decision (default 60).
    #[arg(skip)]
    pub timeout_seconds: u32,
}

impl Default for VerdictCacheConfig {
    fn default() -> Self {
        VerdictCacheConfig {
            enabled: Switch::On,
            max_entries: 65_536,
            timeout_seconds: 60,
        }
    }
}

impl VerdictCacheConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=MAX_CACHE_TIMEOUT_SECS).contains(&self.timeout_seconds) {
            return Err(ConfigError::Bound {
                key: "verdictCache.timeoutSeconds",
                value: self.timeout_seconds.into(),
                reason: "must be between 1 and 3600 (a cached Allow outlives a policy changed while no agent runs by up to this long)",
            });
        }
        if !(64..=MAX_CACHE_ENTRIES).contains(&self.max_entries) {
            return Err(ConfigError::Bound {
                key: "verdictCache.maxEntries",
                value: self.max_entries.into(),
                reason: "must be between 64 and 4194304",
            });
        }
        Ok(())
    }

    /// Whether verdicts are cached.
    pub fn enabled(&self) -> bool {
        self.enabled == Switch::On
    }
}

/// Largest `verdictCache.timeoutSeconds`. While an agent runs, a ruleset
/// change replaces the cache at once; while none runs, a cached verdict
/// keeps answering until its timeout, whatever the policy became
/// meanwhile. An hour bounds that; re-deciding a busy tuple once a minute
/// (the default) costs one worker decision.
pub const MAX_CACHE_TIMEOUT_SECS: u32 = 3600;

/// Largest `verdictCache.maxEntries`: 18 sets of this size are at most a
/// few hundred MiB of kernel memory.
pub const MAX_CACHE_ENTRIES: u32 = 4_194_304;

/// Anti-spoofing (`docs/notes-bypass.md`, issue 27): every endpoint whose
/// interface the node can see (a routed veth, a Linux bridge port) may
/// send only from its own addresses and claim only them in ARP and
/// neighbour discovery, and nobody else may send from them.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct AntiSpoofingConfig {
    /// Whether endpoints are held to their own source addresses: on
    /// (default) or off.
    #[arg(long = "anti-spoofing", value_name = "on|off")]
    pub enabled: Switch,
    /// Sources an endpoint may send from besides its own addresses (a
    /// router, a VM, a shared address): `{endpoint: NAMESPACE/NAME or *,
    /// cidr}` or `NAMESPACE/NAME=CIDR`, `*=CIDR`; without a CIDR the
    /// endpoint may send from any source (default none).
    #[arg(long = "allowed-source-prefix", value_name = "NS/NAME=CIDR")]
    #[serde(deserialize_with = "allowed_sources")]
    pub allowed_source_prefixes: Vec<AllowedSource>,
}

impl Default for AntiSpoofingConfig {
    fn default() -> Self {
        AntiSpoofingConfig {
            enabled: Switch::On,
            allowed_source_prefixes: Vec::new(),
        }
    }
}

impl AntiSpoofingConfig {
    /// Whether endpoints are guarded.
    pub fn enabled(&self) -> bool {
        self.enabled == Switch::On
    }
}

/// `on` or `off` (also `true` or `false` in the file).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Switch {
    #[default]
    On,
    Off,
}

impl std::str::FromStr for Switch {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "on" | "true" => Ok(Switch::On),
            "off" | "false" => Ok(Switch::Off),
            _ => Err(format!("{s:?}: expected on or off")),
        }
    }
}

impl<'de> Deserialize<'de> for Switch {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Text(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Bool(true) => Ok(Switch::On),
            Raw::Bool(false) => Ok(Switch::Off),
            Raw::Text(text) => text.parse().map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests;
