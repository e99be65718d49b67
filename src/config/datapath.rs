//! `datapath`, `verdictCache` and `antiSpoofing`: which packets go to the
//! queues, what is always accepted, the fail and startup modes, marks, the
//! kernel verdict cache and the endpoints' source-address guards. Keys,
//! defaults and checks; pure.

use std::time::Duration;

use serde::Deserialize;

use super::values::{allowed_sources, privileged};
use super::{AllowedSource, ConfigError, Interface, Privileged};
use crate::marks::{FailMode, MarkLayout};

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
    /// What tollgate does with what the inventory does not know yet:
    /// without earlier kernel state, new connections before the first
    /// complete snapshot, and afterwards new connections from and to the
    /// addresses of the local endpoint ranges (the Node's podCIDRs, a
    /// Docker host's container networks) that no known endpoint holds.
    /// closed (default; they are dropped; before the first snapshot
    /// privileged rules and the node's own egress pass) or open
    /// (everything passes; unsafe).
    #[arg(long = "startup-policy", value_name = "closed|open")]
    pub startup_policy: StartupPolicy,
    /// Seconds between checks that the kernel still holds the state of the
    /// ruleset in force (repaired when not); 0 turns the check off, and
    /// then nothing repairs what someone else changes (default 10).
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

/// What is done with traffic the inventory cannot judge yet: a starting
/// agent's that finds no earlier kernel state, before its source has a
/// complete snapshot (Kubernetes mode: every kind listed once); and,
/// once there is one, the new connections of addresses in the local
/// endpoint ranges that no known endpoint holds (a Pod or container the
/// inventory does not know yet; on a Docker host, every container address
/// while the engine's API is away).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StartupPolicy {
    /// New connections through the node's FORWARD and INPUT hooks (on the
    /// configured interfaces) are queued to queues nobody reads yet, so
    /// they are dropped; loopback, privileged entries, the node's own
    /// outgoing connections (the agent's to the API server) and
    /// established connections pass. Afterwards the unknown addresses
    /// of the local endpoint ranges are dropped both ways.
    #[default]
    Closed,
    /// Nothing is installed before the first snapshot, and unknown
    /// addresses are not closed: everything they send or receive passes.
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

/// Anti-spoofing (`docs/guide/security-model.md`): every endpoint whose
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
