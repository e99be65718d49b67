//! The status API's wire contract: what a client asks ([`Request`]), what
//! the agent answers ([`Response`]) and the reports inside, one JSON line
//! each way; where the socket is by default and how long either side
//! waits for the other. Plain data: nothing here opens a socket, reads the
//! clock or the agent's state.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::explain::{EndpointReport, TraceReport, TraceRequest};
use crate::observe::{FlowEvent, ObserveFilter};
use crate::ruleset::PolicySummary;
use crate::source::kube::Refusal;
use crate::telemetry::Check;

/// Where `tollgate run` listens and the CLI connects unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/tollgate/tollgate.sock";
/// How long the client waits for the agent, and the agent for a client
/// to take its answer.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// Why the status API failed.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("status socket {path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("status socket {path} is in use by a running agent")]
    InUse { path: PathBuf },
    #[error("status socket {path}: the agent answered {answer:?}")]
    Protocol { path: PathBuf, answer: String },
    #[error("status socket {path}: no answer within {}s (the agent is stuck or overloaded)", after.as_secs_f32())]
    Timeout { path: PathBuf, after: Duration },
    #[error("status socket {path}: the agent closed the connection without answering")]
    Closed { path: PathBuf },
    #[error("the agent: {0}")]
    Agent(String),
}

/// What a client asks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "camelCase")]
pub enum Request {
    Status,
    Policies,
    /// `tollgate status --check live|ready`.
    Check {
        probe: Check,
    },
    /// The agent's FQDN sets as the kernel holds them, and how each entry
    /// was learned (`tollgate get fqdn`).
    Fqdn,
    /// The objects skipped or partly enforced in Kubernetes mode
    /// (`tollgate get skipped`).
    Skipped,
    /// `tollgate trace`: a flow through the ruleset in force and the FQDN
    /// addresses learned.
    Trace(Box<TraceRequest>),
    /// `tollgate get endpoints`: the enforced endpoints and their policies.
    Endpoints,
    /// `tollgate observe`: the last `last` decisions `filter` asks for,
    /// then, with `follow`, each new one as it is made. The answer is one
    /// line per event (and a [`Response::Lost`] line when a follower read
    /// too slowly), until the agent closes (without `follow`) or the
    /// client does.
    Observe {
        #[serde(default)]
        filter: ObserveFilter,
        #[serde(default)]
        follow: bool,
        #[serde(default)]
        last: usize,
    },
    /// `tollgate log-level`: the log filter in force, replaced first when
    /// `filter` is given.
    LogLevel {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        filter: Option<String>,
    },
    /// `tollgate bundle`: what only the agent can tell (its command line,
    /// configuration, log tail, kernel state and tools).
    Support,
    /// `tollgate diff … live` and `get matrix`: the objects the latest
    /// ruleset was compiled from, and the Node it was compiled for.
    Snapshot,
}

impl Request {
    /// The request's name as the protocol spells it (`status`, `trace`).
    pub fn name(&self) -> &'static str {
        match self {
            Request::Status => "status",
            Request::Policies => "policies",
            Request::Check { .. } => "check",
            Request::Fqdn => "fqdn",
            Request::Skipped => "skipped",
            Request::Trace(_) => "trace",
            Request::Endpoints => "endpoints",
            Request::Observe { .. } => "observe",
            Request::LogLevel { .. } => "logLevel",
            Request::Support => "support",
            Request::Snapshot => "snapshot",
        }
    }
}

/// What the agent answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Response {
    Status(Box<StatusReport>),
    Policies(Vec<PolicySummary>),
    Check(CheckReport),
    Fqdn(FqdnReport),
    Skipped(Vec<Refusal>),
    Trace(Box<TraceReport>),
    Endpoints(Vec<EndpointReport>),
    /// One decision, of an `observe` answer.
    Event(Box<FlowEvent>),
    /// Decisions an `observe -f` client lost since its last line by
    /// reading too slowly.
    Lost(u64),
    LogLevel(String),
    Support(Box<SupportReport>),
    Snapshot(Box<SnapshotReport>),
    Error(String),
}

/// The FQDN sets of the agent's namespace, and how their entries were
/// learned.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FqdnReport {
    pub sets: Vec<LearnedSetReport>,
    pub sources: Vec<FqdnSource>,
}

/// One FQDN set: its entries with their remaining timeout in seconds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LearnedSetReport {
    pub name: String,
    pub entries: Vec<(std::net::IpAddr, u32)>,
}

/// What `tollgate bundle` asks the agent for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SupportReport {
    /// The agent's command line.
    pub command_line: Vec<String>,
    /// The configuration in force, every key (defaults included).
    pub config: String,
    /// The last lines of its log, oldest first.
    pub log: Vec<String>,
    /// `iptables-save`, `ip6tables-save`, `ebtables-save` of the agent's
    /// namespace (the backend it uses), `ipset list` of tollgate's sets.
    pub iptables_save: String,
    pub ip6tables_save: String,
    pub ebtables_save: String,
    pub ipsets: String,
    /// The kernel release and the tools' versions, one per line.
    pub versions: Vec<String>,
}

/// The objects the agent's latest ruleset was compiled from, each a
/// document as a policy file would hold it (`apiVersion`, `kind`, and the
/// fields tollgate reads), and the Node it compiled them for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotReport {
    pub node_name: String,
    #[serde(default)]
    pub node_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub node_addresses: Vec<std::net::IpAddr>,
    pub objects: Vec<serde_json::Value>,
}

/// The Kubernetes source in `tollgate status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesReport {
    /// In step with the API server (as `tollgate_kubernetes_synced`).
    pub synced: bool,
    /// Objects skipped (not enforced) in the latest snapshot.
    pub skipped: usize,
    /// Objects enforced only in part.
    pub partly_enforced: usize,
    /// `kubernetes.peers: controller`: the groups of peers; absent in
    /// watch mode.
    #[serde(default)]
    pub peers: Option<PeersReport>,
}

/// Controller mode's groups of peers (`tollgate_controller_*` metrics).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PeersReport {
    /// AddressGroups the rules use.
    pub needed: usize,
    /// Of those, not received: no ruleset is built meanwhile.
    pub waiting: usize,
    /// AddressGroup slices held.
    pub slices: usize,
    /// The controller's Lease absent or not renewed in time.
    pub controller_stale: bool,
}

/// One live FQDN set entry and how it was learned: `snooped` or
/// `resolved` (asked for by tollgate).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FqdnSource {
    pub selector: String,
    pub address: std::net::IpAddr,
    pub source: String,
}

/// The answer to a probe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckReport {
    pub ok: bool,
    /// Why not, when not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl From<Result<(), String>> for CheckReport {
    fn from(result: Result<(), String>) -> CheckReport {
        CheckReport {
            ok: result.is_ok(),
            reason: result.err(),
        }
    }
}

/// `tollgate status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    pub version: String,
    /// The commit the binary was built from (`unknown` outside git).
    #[serde(default)]
    pub commit: String,
    pub node_name: String,
    pub uptime_seconds: u64,
    pub ruleset_generation: u64,
    pub policies: usize,
    pub rules: usize,
    /// Endpoints the ruleset in force enforces (the Node, local Pods and
    /// ExternalEntities).
    #[serde(default)]
    pub enforced_endpoints: usize,
    /// The policy source has published a complete snapshot (files loaded,
    /// or every Kubernetes kind listed once).
    #[serde(default)]
    pub snapshot_complete: bool,
    /// Seconds since a ruleset was last put in force (start or reload).
    #[serde(default)]
    pub last_applied_seconds_ago: Option<u64>,
    /// The agent process: CPU, memory, file descriptors.
    #[serde(default)]
    pub process: ProcessReport,
    pub fail_mode: String,
    /// The last reload (`None` until one happened).
    pub last_reload: Option<ReloadReport>,
    /// Why the kernel does not match the desired state (the last apply
    /// failed; a retry is scheduled), or `None` when it does.
    #[serde(default)]
    pub datapath_behind: Option<String>,
    /// Why traffic between the ports of a Linux bridge bypasses iptables
    /// (`br_netfilter`), or `None` when it is seen or there is no bridge.
    #[serde(default)]
    pub bridged_traffic_unseen: Option<String>,
    /// Local endpoint addresses whose traffic never crosses the node's
    /// netfilter (Open vSwitch, macvlan, ipvlan, …), as `namespace/name
    /// address: why` (`datapath::visibility`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoint_traffic_unseen: Vec<String>,
    /// What the policies in force probably do not mean: valid and
    /// enforced, but a label key no object carries, no policy at all,
    /// rules in no defined order (as `tollgate validate` warns).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policy_warnings: Vec<String>,
    /// New connections the kernel answered from the verdict cache (read
    /// at every periodic check); `None` while the cache is off or unread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict_cache_hits: Option<u64>,
    /// The anti-spoofing guards; `None` before the first snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anti_spoofing: Option<AntiSpoofReport>,
    pub queues: Vec<QueueReport>,
    /// The agent-level series of the metrics (reloads, kernel writes,
    /// audit lines, Kubernetes watch errors and Events), read from the
    /// same counters.
    #[serde(default)]
    pub agent_series: Vec<AgentSeries>,
    pub audit_log: Option<PathBuf>,
    pub metrics_address: Option<String>,
    /// The Kubernetes source; `None` with a policy directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesReport>,
    /// Where the inventory comes from when it is not the policy source
    /// (`docker.enabled`: connected or unreachable, how many containers).
    #[serde(default)]
    pub inventory: Option<String>,
}

/// The anti-spoofing guards (`tollgate_antispoof_*` metrics).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AntiSpoofReport {
    /// `antiSpoofing.enabled`.
    pub enabled: bool,
    pub guarded: Vec<GuardedReport>,
    /// Endpoints (or some of their addresses) left unguarded, and why.
    pub unguarded: Vec<UnguardedReport>,
}

/// One guarded endpoint: where its packets enter and what was dropped.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GuardedReport {
    /// `namespace/name`.
    pub endpoint: String,
    /// Its veth, or `bridge port PORT`.
    pub interface: String,
    /// Packets dropped, by reason (`source`, `neighbour`, `address`).
    pub dropped: BTreeMap<String, u64>,
}

/// One unguarded endpoint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnguardedReport {
    pub endpoint: String,
    pub reason: String,
}

/// The agent process's own figures (the `process_*` metrics).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessReport {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<u64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
}

/// How the last reload ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReloadReport {
    pub seconds_ago: u64,
    /// `None` when it was applied.
    pub error: Option<String>,
}

/// One agent-level series: its name as `/metrics` exports it, labels
/// included, and its value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentSeries {
    pub series: String,
    pub value: f64,
}

/// One queue's counters: its worker's, then the kernel's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueReport {
    pub queue: u16,
    /// The worker reading the queue: `queue` (new connections), `dns`,
    /// `L7 queue`.
    pub worker: String,
    pub counters: Counts,
}

/// Counter values by key, in the order they are declared; a JSON object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts(pub Vec<(String, u64)>);

impl Counts {
    /// The value of counter `key`.
    pub fn get(&self, key: &str) -> Option<u64> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }
}

impl Serialize for Counts {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (key, value) in &self.0 {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Counts {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct InOrder;
        impl<'de> serde::de::Visitor<'de> for InOrder {
            type Value = Counts;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of counter values")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Counts, A::Error> {
                let mut counts = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    counts.push(entry);
                }
                Ok(Counts(counts))
            }
        }
        deserializer.deserialize_map(InOrder)
    }
}
