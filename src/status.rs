//! The status API of a running agent: a Unix stream socket (mode 0600 in a
//! 0700 directory, so only root reaches it) answering one JSON request per
//! connection with one JSON response, and the client the CLI uses
//! (`tollgate status`, `tollgate get`, `tollgate trace`). The agent owns an
//! [`AgentStatus`] that it updates on every (re)load; the server only
//! reads it. Nothing here touches the packet path.
//!
//! Clients are served concurrently, a thread each, at most
//! [`MAX_CLIENTS`] at once: one more is answered `busy` at once and
//! closed, so idle or slow clients can hold neither the socket nor a
//! probe. A client has [`REQUEST_TIMEOUT`] to send its request line (at
//! most 4096 bytes) and [`TIMEOUT`] to take the whole answer.
//!
//! ```text
//! → {"request":"status"}
//! ← {"status":{"uptimeSeconds":12,"rulesetGeneration":2,…}}
//! → {"request":"policies"}
//! ← {"policies":[{"policy":{"kind":"AntreaClusterNetworkPolicy",…},…}]}
//! → {"request":"check","probe":"ready"}
//! ← {"check":{"ok":false,"reason":"no complete policy snapshot yet"}}
//! → {"request":"fqdn"}
//! ← {"fqdn":[{"selector":"www.example.com","address":"203.0.113.7","source":"resolved"}]}
//! → {"request":"skipped"}
//! ← {"skipped":[{"kind":"Tier","name":"bad","uid":"…","reason":"PolicySkipped","problems":[…],…}]}
//! → {"request":"trace","src":"shop/client","dst":"10.0.0.3","protocol":"tcp","srcPort":40000,"dstPort":"http"}
//! ← {"trace":{"verdict":"Allow","protocol":"TCP",…,"egress":{…,"consulted":[…]},…}}
//! → {"request":"endpoints"}
//! ← {"endpoints":[{"endpoint":"node-1","kind":"Node","addresses":[…],"policies":[…]},…]}
//! ← {"error":"unknown request"}
//! ```
#![allow(clippy::disallowed_methods)] // the status server reports uptime.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};

use crate::config::{Privileged, PrivilegedHook, PrivilegedProtocol};
use crate::explain::{self, EndpointReport, TraceReport, TraceRequest};
use crate::fqdn::{FqdnTable, NoFqdn};
use crate::marks::FailMode;
use crate::ruleset::{Endpoint, PolicySummary, Ruleset};
use crate::source::kube::{Reason, Refusal, SourceState};
use crate::telemetry::{Check, Metrics, Probes};

/// Where `tollgate run` listens and the CLI connects unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/tollgate/tollgate.sock";
/// How long the client waits for the agent, and the agent for a client
/// to take its answer.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// How long a client has to send its whole request line.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Clients served at once; one more is refused at once.
pub const MAX_CLIENTS: usize = 16;
/// Longest request line read.
const MAX_REQUEST: usize = 4096;

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
    /// How each live FQDN set entry was learned (`tollgate get fqdn`).
    Fqdn,
    /// The objects skipped or partly enforced in Kubernetes mode
    /// (`tollgate get skipped`).
    Skipped,
    /// `tollgate trace`: a flow through the ruleset in force and the FQDN
    /// addresses learned.
    Trace(Box<TraceRequest>),
    /// `tollgate get endpoints`: the enforced endpoints and their policies.
    Endpoints,
}

/// What the agent answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Response {
    Status(Box<StatusReport>),
    Policies(Vec<PolicySummary>),
    Check(CheckReport),
    Fqdn(Vec<FqdnSource>),
    Skipped(Vec<Refusal>),
    Trace(Box<TraceReport>),
    Endpoints(Vec<EndpointReport>),
    Error(String),
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
    /// New connections the kernel answered from the verdict cache (read
    /// at every periodic check and before a ruleset change replaces the
    /// lookup rules); `None` while the cache is off or unread.
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

/// What the agent knows about itself, shared with the status server.
pub struct AgentStatus {
    started: Instant,
    node_name: String,
    fail_mode: FailMode,
    privileged: Vec<Privileged>,
    audit_log: Option<PathBuf>,
    metrics_address: Option<String>,
    ruleset: Arc<ArcSwap<Ruleset>>,
    /// The agent's metrics: the queues' counter sets, the workers'
    /// heartbeats and the agent-level series.
    metrics: Arc<Metrics>,
    /// The source's snapshot in force is complete (files loaded, or every
    /// Kubernetes kind listed once); false at start.
    snapshot_complete: AtomicBool,
    state: Mutex<State>,
    /// The FQDN table, once the first snapshot made it.
    fqdn: OnceLock<Arc<FqdnTable>>,
    /// The Kubernetes source's state, in Kubernetes mode.
    kubernetes: OnceLock<SourceState>,
    /// Describes the inventory source (Docker), if separate.
    inventory: OnceLock<InventoryReporter>,
}

/// Says in one line how the inventory source is doing.
pub type InventoryReporter = Arc<dyn Fn() -> String + Send + Sync>;

#[derive(Default)]
struct State {
    generation: u64,
    /// When a ruleset was last put in force.
    last_applied: Option<Instant>,
    last_reload: Option<(Instant, Option<String>)>,
    datapath_behind: Option<String>,
    bridged_traffic_unseen: Option<String>,
    verdict_cache_hits: Option<u64>,
    anti_spoofing: Option<AntiSpoofReport>,
    /// The kernel was written to match the ruleset in force and the last
    /// attempt did not fail; false until the first install succeeds.
    datapath_synced: bool,
}

/// The fixed facts of an agent, for [`AgentStatus::new`].
pub struct AgentFacts {
    pub node_name: String,
    pub fail_mode: FailMode,
    /// `datapath.privileged`: accepted ahead of any policy (`trace` says so).
    pub privileged: Vec<Privileged>,
    pub audit_log: Option<PathBuf>,
    pub metrics_address: Option<String>,
}

impl AgentStatus {
    pub fn new(
        facts: AgentFacts,
        ruleset: Arc<ArcSwap<Ruleset>>,
        metrics: Arc<Metrics>,
    ) -> AgentStatus {
        AgentStatus {
            started: Instant::now(),
            node_name: facts.node_name,
            fail_mode: facts.fail_mode,
            privileged: facts.privileged,
            audit_log: facts.audit_log,
            metrics_address: facts.metrics_address,
            ruleset,
            metrics,
            snapshot_complete: AtomicBool::new(false),
            state: Mutex::new(State::default()),
            fqdn: OnceLock::new(),
            kubernetes: OnceLock::new(),
            inventory: OnceLock::new(),
        }
    }

    /// The Kubernetes source to report on (set once, in Kubernetes mode).
    pub fn kubernetes_source(&self, state: SourceState) {
        let _ = self.kubernetes.set(state);
    }

    fn kubernetes_report(&self) -> Option<KubernetesReport> {
        let state = self.kubernetes.get()?;
        let refused = state.refused();
        let skipped = refused
            .iter()
            .filter(|r| r.reason == Reason::PolicySkipped)
            .count();
        Some(KubernetesReport {
            synced: state.synced(),
            skipped,
            partly_enforced: refused.len() - skipped,
        })
    }

    /// The inventory source to report on (set once).
    pub fn inventory_source(&self, reporter: InventoryReporter) {
        let _ = self.inventory.set(reporter);
    }

    /// The FQDN table to report the sources of (set once).
    pub fn fqdn_table(&self, table: Arc<FqdnTable>) {
        let _ = self.fqdn.set(table);
    }

    fn fqdn_sources(&self) -> Vec<FqdnSource> {
        let Some(table) = self.fqdn.get() else {
            return Vec::new();
        };
        table
            .sources(Instant::now())
            .into_iter()
            .map(|(pattern, address, source)| FqdnSource {
                selector: pattern.to_string(),
                address,
                source: source.as_str().to_string(),
            })
            .collect()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A ruleset was put in force as `generation`.
    pub fn applied(&self, generation: u64) {
        let mut state = self.state();
        state.generation = generation;
        state.last_applied = Some(Instant::now());
    }

    /// The last kernel write failed (`Some(why)`), or the kernel matches.
    pub fn datapath(&self, behind: Option<String>) {
        let mut state = self.state();
        state.datapath_synced = behind.is_none();
        state.datapath_behind = behind;
    }

    /// The verdict cache's hits counted so far.
    pub fn verdict_cache_hits(&self, hits: u64) {
        self.state().verdict_cache_hits = Some(hits);
    }

    /// The anti-spoofing guards as last planned and counted.
    pub fn anti_spoofing(&self, report: Option<AntiSpoofReport>) {
        self.state().anti_spoofing = report;
    }

    /// Why bridged traffic bypasses iptables (`None`: it is seen).
    pub fn bridged_traffic(&self, unseen: Option<String>) {
        self.state().bridged_traffic_unseen = unseen;
    }

    /// Whether the snapshot the agent has applied is complete: files
    /// loaded, or every Kubernetes kind listed once. Call it after the
    /// snapshot was offered and synced, so that readiness never runs ahead
    /// of the kernel.
    pub fn set_snapshot_complete(&self, complete: bool) {
        self.snapshot_complete.store(complete, Ordering::SeqCst);
    }

    /// Ready: a complete snapshot is applied and the kernel matches it.
    pub fn ready(&self) -> Result<(), String> {
        if !self.snapshot_complete.load(Ordering::SeqCst) {
            return Err("no complete policy snapshot applied yet".into());
        }
        let state = self.state();
        match &state.datapath_behind {
            Some(why) => Err(format!(
                "the kernel does not match the ruleset in force: {why}"
            )),
            None if !state.datapath_synced => {
                Err("the ruleset in force is not installed in the kernel yet".into())
            }
            None => Ok(()),
        }
    }

    /// A reload ended; `error` says why it did not apply.
    pub fn reloaded(&self, error: Option<String>) {
        self.state().last_reload = Some((Instant::now(), error));
    }

    pub fn report(&self) -> StatusReport {
        let ruleset = self.ruleset.load();
        let state = self.state();
        let queues = self
            .metrics
            .counters()
            .snapshot()
            .into_iter()
            .map(|queue| QueueReport {
                queue: queue.queue,
                worker: queue.name.to_string(),
                counters: Counts(
                    queue
                        .samples
                        .iter()
                        .map(|s| (s.series.key.to_string(), s.value))
                        .collect(),
                ),
            })
            .collect();
        let process = crate::telemetry::process::ProcessStats::read();
        StatusReport {
            version: env!("CARGO_PKG_VERSION").to_string(),
            commit: crate::telemetry::metrics::COMMIT.to_string(),
            node_name: self.node_name.clone(),
            uptime_seconds: self.started.elapsed().as_secs(),
            ruleset_generation: state.generation,
            policies: ruleset.policies().len(),
            rules: ruleset.rule_count(),
            enforced_endpoints: ruleset.endpoints().len(),
            snapshot_complete: self.snapshot_complete.load(Ordering::SeqCst),
            last_applied_seconds_ago: state.last_applied.map(|at| at.elapsed().as_secs()),
            process: ProcessReport {
                cpu_seconds: process.cpu_seconds,
                resident_bytes: process.resident_bytes,
                open_fds: process.open_fds,
                max_fds: process.max_fds,
            },
            fail_mode: self.fail_mode.to_string(),
            last_reload: state.last_reload.as_ref().map(|(at, error)| ReloadReport {
                seconds_ago: at.elapsed().as_secs(),
                error: error.clone(),
            }),
            datapath_behind: state.datapath_behind.clone(),
            bridged_traffic_unseen: state.bridged_traffic_unseen.clone(),
            verdict_cache_hits: state.verdict_cache_hits,
            anti_spoofing: state.anti_spoofing.clone(),
            queues,
            agent_series: self
                .metrics
                .agent_series()
                .into_iter()
                .map(|(series, value)| AgentSeries { series, value })
                .collect(),
            audit_log: self.audit_log.clone(),
            metrics_address: self.metrics_address.clone(),
            kubernetes: self.kubernetes_report(),
            inventory: self.inventory.get().map(|describe| describe()),
        }
    }

    /// The answer to one request.
    pub fn answer(&self, request: &Request) -> Response {
        match request {
            Request::Status => Response::Status(Box::new(self.report())),
            Request::Policies => Response::Policies(self.ruleset.load().policies().to_vec()),
            Request::Check { probe } => Response::Check(self.check(*probe).into()),
            Request::Fqdn => Response::Fqdn(self.fqdn_sources()),
            Request::Skipped => match self.kubernetes.get() {
                Some(state) => Response::Skipped(state.refused()),
                None => Response::Error(
                    "the agent reads a policy directory: it skips nothing (an invalid change is rejected whole; see `tollgate validate`)".into(),
                ),
            },
            Request::Trace(request) => self.trace(request),
            Request::Endpoints => Response::Endpoints(explain::endpoints(&self.ruleset.load())),
        }
    }

    /// Traces through the ruleset in force with the addresses learned now.
    fn trace(&self, request: &TraceRequest) -> Response {
        let ruleset = self.ruleset.load();
        let traced = match self.fqdn.get() {
            Some(table) => explain::trace(&ruleset, &table.lookup(Instant::now()), request),
            None => explain::trace(&ruleset, &NoFqdn, request),
        };
        match traced {
            Ok(mut report) => {
                if let Some(entry) = self.privileged_for(&ruleset, &report) {
                    report.privileged = Some(entry.to_string());
                    report.verdict = crate::packet::flow::Verdict::Allow.to_string();
                }
                Response::Trace(Box::new(report))
            }
            Err(error) => Response::Error(error.to_string()),
        }
    }

    /// The `datapath.privileged` entry the datapath accepts a traced flow
    /// by before any policy, as its rules do: on its hook (input to the
    /// Node, output from it, forward when routed) if the entry lists it,
    /// from the entry's range (input), to it (output), from or to it
    /// (forward); never from (input) or to (output) an enforced endpoint;
    /// on the entry's protocol and destination port when it names them.
    fn privileged_for(&self, ruleset: &Ruleset, report: &TraceReport) -> Option<&Privileged> {
        let node = |ip| matches!(ruleset.endpoint_of(ip), Some(Endpoint::Node { .. }));
        let enforced = |ip| ruleset.enforced().endpoints.contains(&ip);
        let (src, dst) = (report.src.address, report.dst.address);
        let hook = match (node(src), node(dst)) {
            (_, true) => PrivilegedHook::Input,
            (true, false) => PrivilegedHook::Output,
            (false, false) => PrivilegedHook::Forward,
        };
        self.privileged.iter().find(|entry| {
            let range = match hook {
                PrivilegedHook::Input => entry.cidr.contains(&src) && !enforced(src),
                PrivilegedHook::Output => entry.cidr.contains(&dst) && !enforced(dst),
                PrivilegedHook::Forward => entry.cidr.contains(&src) || entry.cidr.contains(&dst),
            };
            let protocol = entry.protocol.is_none_or(|p| {
                let name = match p {
                    PrivilegedProtocol::Tcp => "TCP",
                    PrivilegedProtocol::Udp => "UDP",
                    PrivilegedProtocol::Sctp => "SCTP",
                    PrivilegedProtocol::Icmp => "ICMP",
                };
                report.protocol == name
            });
            let port = entry.port.is_none_or(|p| report.dst_port == Some(p));
            entry.on(hook) && range && protocol && port
        })
    }
}

impl Probes for AgentStatus {
    /// Live: every worker runs and drains its queue; ready: see
    /// [`AgentStatus::ready`].
    fn check(&self, check: Check) -> Result<(), String> {
        match check {
            Check::Live => self.metrics.health().live(),
            Check::Ready => self.ready(),
        }
    }
}

/// The listening socket; removes its file when dropped.
pub struct StatusServer {
    path: PathBuf,
}

impl Drop for StatusServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Binds `path` (creating its directory with mode 0700 when missing; a
/// stale socket left by a killed agent is replaced, a live one is an
/// error) with mode 0600, and serves on a thread until the process exits.
pub fn serve(path: &Path, status: Arc<AgentStatus>) -> Result<StatusServer, StatusError> {
    let io = |error| StatusError::Io {
        path: path.to_path_buf(),
        error,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io)?;
        }
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "exists and is not a socket",
            )));
        }
        if UnixStream::connect(path).is_ok() {
            return Err(StatusError::InUse {
                path: path.to_path_buf(),
            });
        }
        std::fs::remove_file(path).map_err(io)?;
    }
    let listener = bind_private(path).map_err(io)?;
    let server = StatusServer {
        path: path.to_path_buf(),
    };
    std::thread::Builder::new()
        .name("status".into())
        .spawn(move || accept(&listener, &status))
        .map_err(io)?;
    Ok(server)
}

/// Hands each client to a thread of its own while fewer than
/// [`MAX_CLIENTS`] are served; refuses the others at once.
fn accept(listener: &UnixListener, status: &Arc<AgentStatus>) {
    let serving = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(stream) => stream,
            Err(error) => {
                // Out of descriptors, most likely: let some clients end.
                tracing::warn!(%error, "status socket: accept failed");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let Some(slot) = Slot::take(&serving) else {
            refuse(stream);
            continue;
        };
        let status = Arc::clone(status);
        let spawned = std::thread::Builder::new()
            .name("status-client".into())
            .spawn(move || {
                let _slot = slot;
                if let Err(error) = answer(stream, &status) {
                    tracing::debug!(%error, "status client");
                }
            });
        if let Err(error) = spawned {
            // The closure, its slot and its stream are dropped.
            tracing::warn!(%error, "status socket: cannot start a client thread");
        }
    }
}

/// One of the [`MAX_CLIENTS`] places; given back when dropped.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(serving: &Arc<AtomicUsize>) -> Option<Slot> {
        serving
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_CLIENTS).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(Arc::clone(serving)))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Answers a client over [`MAX_CLIENTS`] `busy` without waiting for it.
fn refuse(stream: UnixStream) {
    let busy = Response::Error(format!(
        "busy: {MAX_CLIENTS} status clients are being served; try again"
    ));
    let Ok(mut text) = serde_json::to_string(&busy) else {
        return;
    };
    text.push('\n');
    // Whatever request already came is read first, so that closing does
    // not turn the answer into a reset.
    if stream.set_nonblocking(true).is_ok() {
        let mut request = [0; MAX_REQUEST];
        let _ = (&stream).read(&mut request);
    }
    let _ = (&stream).write_all(text.as_bytes());
}

/// Binds `path` with mode 0600 from the first moment anyone else could
/// reach it, without touching the process-wide umask: the socket is bound
/// in a fresh 0700 directory beside `path`, given mode 0600 there, then
/// renamed into place.
fn bind_private(path: &Path) -> std::io::Result<UnixListener> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no file name"))?;
    let staging = dir.join(format!(
        ".{}.{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let staged = staging.join("s");
    let create = || std::fs::DirBuilder::new().mode(0o700).create(&staging);
    if let Err(error) = create() {
        if error.kind() != std::io::ErrorKind::AlreadyExists {
            return Err(error);
        }
        // Left by an agent with our process id that died while binding
        // (in a container, every agent is process 1).
        let _ = std::fs::remove_file(&staged);
        std::fs::remove_dir(&staging)?;
        create()?;
    }
    let bound = UnixListener::bind(&staged).and_then(|listener| {
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))?;
        std::fs::rename(&staged, path)?;
        Ok(listener)
    });
    let _ = std::fs::remove_file(&staged);
    let _ = std::fs::remove_dir(&staging);
    bound
}

fn answer(stream: UnixStream, status: &AgentStatus) -> std::io::Result<()> {
    let line = read_request(&stream, Instant::now() + REQUEST_TIMEOUT)?;
    let response = match serde_json::from_slice::<Request>(line.trim_ascii()) {
        Ok(request) => status.answer(&request),
        Err(error) => Response::Error(format!("bad request: {error}")),
    };
    let mut text = serde_json::to_string(&response).map_err(std::io::Error::other)?;
    text.push('\n');
    write_answer(&stream, text.as_bytes(), Instant::now() + TIMEOUT)
}

/// Writes the whole answer by `deadline`, however slowly the client reads.
fn write_answer(stream: &UnixStream, mut bytes: &[u8], deadline: Instant) -> std::io::Result<()> {
    while !bytes.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        stream.set_write_timeout(Some(left))?;
        match (&*stream).write(bytes) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The request line, read by `deadline`: at most [`MAX_REQUEST`] bytes up
/// to a newline or the end of the stream.
fn read_request(stream: &UnixStream, deadline: Instant) -> std::io::Result<Vec<u8>> {
    let mut line = Vec::new();
    let mut chunk = [0; 512];
    while !line.contains(&b'\n') && line.len() < MAX_REQUEST {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        let want = chunk.len().min(MAX_REQUEST - line.len());
        match (&*stream).read(&mut chunk[..want]) {
            Ok(0) => break,
            Ok(n) => line.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    if let Some(end) = line.iter().position(|b| *b == b'\n') {
        line.truncate(end);
    }
    Ok(line)
}

/// Sends one request to the agent listening on `path`, waiting at most
/// [`TIMEOUT`] for each step.
pub fn request(path: &Path, request: &Request) -> Result<Response, StatusError> {
    request_within(path, request, TIMEOUT)
}

fn request_within(
    path: &Path,
    request: &Request,
    timeout: Duration,
) -> Result<Response, StatusError> {
    let failed = |error: std::io::Error| match error.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => StatusError::Timeout {
            path: path.to_path_buf(),
            after: timeout,
        },
        _ => StatusError::Io {
            path: path.to_path_buf(),
            error,
        },
    };
    let stream = connect(path, Instant::now() + timeout).map_err(failed)?;
    stream.set_read_timeout(Some(timeout)).map_err(failed)?;
    stream.set_write_timeout(Some(timeout)).map_err(failed)?;
    let mut text = serde_json::to_string(request).map_err(|e| failed(std::io::Error::other(e)))?;
    text.push('\n');
    // A busy agent may answer and close before the request is written:
    // its answer is still read.
    let written = (&stream).write_all(text.as_bytes());
    let mut answer = String::new();
    let read = BufReader::new(&stream).read_line(&mut answer);
    if answer.is_empty() {
        return Err(match read.err().or(written.err()) {
            Some(e) if !matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) => {
                failed(e)
            }
            _ => StatusError::Closed {
                path: path.to_path_buf(),
            },
        });
    }
    match serde_json::from_str::<Response>(answer.trim()) {
        Ok(Response::Error(message)) => Err(StatusError::Agent(message)),
        Ok(response) => Ok(response),
        Err(_) => Err(StatusError::Protocol {
            path: path.to_path_buf(),
            answer,
        }),
    }
}

/// Connects by `deadline`: a listener whose queue is full (an agent that
/// stopped accepting) is a timeout, not a hang.
fn connect(path: &Path, deadline: Instant) -> std::io::Result<UnixStream> {
    use socket2::{Domain, SockAddr, Socket, Type};
    let address = SockAddr::unix(path)?;
    let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    socket.set_nonblocking(true)?;
    loop {
        match socket.connect(&address) {
            Ok(()) => break,
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    socket.set_nonblocking(false)?;
    Ok(UnixStream::from(socket))
}

/// The anti-spoofing rows: a summary, each unguarded endpoint with the
/// reason, each guarded one that had packets dropped.
fn render_anti_spoofing(out: &mut String, report: Option<&AntiSpoofReport>) {
    use std::fmt::Write as _;
    let Some(report) = report else {
        return;
    };
    if !report.enabled {
        let _ = writeln!(out, "anti-spoofing:      off (antiSpoofing.enabled)");
        return;
    }
    let total = |g: &GuardedReport| g.dropped.values().sum::<u64>();
    let _ = writeln!(
        out,
        "anti-spoofing:      {} endpoints guarded, {} dropped packets; {}",
        report.guarded.len(),
        report.guarded.iter().map(total).sum::<u64>(),
        match report.unguarded.len() {
            0 => "none unguarded".to_string(),
            n => format!("{n} UNGUARDED"),
        }
    );
    for u in &report.unguarded {
        let _ = writeln!(out, "  {:<30} UNGUARDED: {}", u.endpoint, u.reason);
    }
    for g in report.guarded.iter().filter(|g| total(g) > 0) {
        let dropped: Vec<String> = g
            .dropped
            .iter()
            .map(|(reason, n)| format!("{reason} {n}"))
            .collect();
        let _ = writeln!(
            out,
            "  {:<30} {}: dropped {}",
            g.endpoint,
            g.interface,
            dropped.join(", ")
        );
    }
}

/// `tollgate status` as text.
pub fn render_status(report: &StatusReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "node:               {}", report.node_name);
    let _ = writeln!(
        out,
        "version:            {} (commit {})",
        report.version, report.commit
    );
    let _ = writeln!(out, "uptime:             {}s", report.uptime_seconds);
    let _ = writeln!(out, "ruleset generation: {}", report.ruleset_generation);
    let _ = writeln!(
        out,
        "policies loaded:    {} ({} rules)",
        report.policies, report.rules
    );
    let reload = match &report.last_reload {
        None => "none since start".to_string(),
        Some(ReloadReport {
            seconds_ago,
            error: None,
        }) => format!("applied {seconds_ago}s ago"),
        Some(ReloadReport {
            seconds_ago,
            error: Some(error),
        }) => format!("FAILED {seconds_ago}s ago: {error}"),
    };
    let _ = writeln!(out, "enforced endpoints: {}", report.enforced_endpoints);
    let source = if report.snapshot_complete {
        "complete snapshot"
    } else {
        "waiting for a complete snapshot"
    };
    let _ = writeln!(out, "policy source:      {source}");
    if let Some(k) = &report.kubernetes {
        let _ = writeln!(
            out,
            "kubernetes:         {}, {} skipped, {} partly enforced (tollgate get skipped)",
            if k.synced {
                "synced"
            } else {
                "NOT SYNCED (first list pending, or a watch failed: listing again)"
            },
            k.skipped,
            k.partly_enforced
        );
    }
    if let Some(inventory) = &report.inventory {
        let _ = writeln!(out, "inventory:          {inventory}");
    }
    let applied = report
        .last_applied_seconds_ago
        .map_or("never".to_string(), |s| format!("{s}s ago"));
    let _ = writeln!(out, "last applied:       {applied}");
    let _ = writeln!(out, "last reload:        {reload}");
    let datapath = match &report.datapath_behind {
        None => "in sync".to_string(),
        Some(error) => format!("BEHIND, retrying: {error}"),
    };
    let _ = writeln!(out, "datapath:           {datapath}");
    if let Some(hits) = report.verdict_cache_hits {
        let _ = writeln!(
            out,
            "verdict cache:      {hits} connections answered by the kernel (read every drift check, or 10 s)"
        );
    }
    if let Some(why) = &report.bridged_traffic_unseen {
        let _ = writeln!(out, "bridged traffic:    NOT SEEN: {why}");
    }
    render_anti_spoofing(&mut out, report.anti_spoofing.as_ref());
    let _ = writeln!(out, "fail mode:          {}", report.fail_mode);
    let unknown = |v: Option<String>| v.unwrap_or_else(|| "?".into());
    let p = &report.process;
    let _ = writeln!(
        out,
        "process:            cpu {}s, resident {} MiB, fds {}/{}",
        unknown(p.cpu_seconds.map(|s| format!("{s:.2}"))),
        unknown(p.resident_bytes.map(|b| (b / (1024 * 1024)).to_string())),
        unknown(p.open_fds.map(|n| n.to_string())),
        unknown(p.max_fds.map(|n| n.to_string())),
    );
    let _ = writeln!(
        out,
        "audit log:          {}",
        report
            .audit_log
            .as_ref()
            .map_or("off".to_string(), |p| p.display().to_string())
    );
    let _ = writeln!(
        out,
        "metrics:            {}",
        report.metrics_address.as_deref().unwrap_or("off")
    );
    // The agent-level series, as /metrics names them.
    if !report.agent_series.is_empty() {
        let width = report
            .agent_series
            .iter()
            .map(|row| row.series.len())
            .max()
            .unwrap_or(0);
        let _ = writeln!(out);
        let _ = writeln!(out, "{:<width$} VALUE", "METRIC");
        for row in &report.agent_series {
            let _ = writeln!(out, "{:<width$} {}", row.series, row.value);
        }
    }
    // One table per kind of worker, every counter any of its queues has
    // as a column (the kernel lists only the queues bound now): `-` where
    // a queue has no such counter.
    for group in report.queues.chunk_by(|a, b| a.worker == b.worker) {
        let mut keys: Vec<&str> = Vec::new();
        for (key, _) in group.iter().flat_map(|q| &q.counters.0) {
            if !keys.contains(&key.as_str()) {
                keys.push(key);
            }
        }
        let header = std::iter::once(group[0].worker.to_uppercase())
            .chain(keys.iter().map(|k| k.to_uppercase().replace('_', "-")))
            .collect();
        let rows: Vec<Vec<String>> = std::iter::once(header)
            .chain(group.iter().map(|q| {
                std::iter::once(q.queue.to_string())
                    .chain(
                        keys.iter()
                            .map(|k| q.counters.get(k).map_or("-".into(), |v| v.to_string())),
                    )
                    .collect()
            }))
            .collect();
        let widths: Vec<usize> = (0..rows[0].len())
            .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
            .collect();
        let _ = writeln!(out);
        for row in rows {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(cell, w)| format!("{cell:<w$}"))
                .collect();
            let _ = writeln!(out, "{}", cells.join(" ").trim_end());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::workers::ConnectionCounters;

    fn status() -> Arc<AgentStatus> {
        status_with(Arc::new(Metrics::new()))
    }

    fn facts() -> AgentFacts {
        AgentFacts {
            node_name: "n1".into(),
            fail_mode: FailMode::Closed,
            privileged: Vec::new(),
            audit_log: None,
            metrics_address: None,
        }
    }

    fn status_with(metrics: Arc<Metrics>) -> Arc<AgentStatus> {
        let ruleset = Arc::new(ArcSwap::from_pointee(Ruleset::default()));
        let stats = Arc::new(ConnectionCounters::default());
        stats.allowed.fetch_add(2, Ordering::Relaxed);
        metrics.counters().register(100, "queue", vec![stats]);
        Arc::new(AgentStatus::new(
            AgentFacts {
                metrics_address: Some("127.0.0.1:9100".into()),
                ..facts()
            },
            ruleset,
            metrics,
        ))
    }

    fn check(s: &AgentStatus, probe: Check) -> CheckReport {
        match s.answer(&Request::Check { probe }) {
            Response::Check(report) => report,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn ready_once_a_complete_snapshot_is_in_the_kernel_live_while_workers_run() {
        let metrics = Arc::new(Metrics::new());
        let s = status_with(Arc::clone(&metrics));
        let not = |why: &str| CheckReport {
            ok: false,
            reason: Some(why.into()),
        };
        let ok = CheckReport {
            ok: true,
            reason: None,
        };
        assert_eq!(
            check(&s, Check::Ready),
            not("no complete policy snapshot applied yet")
        );
        // The kernel matches, but no complete snapshot is in force yet
        // (e.g. the startup policy): still not ready.
        s.applied(1);
        s.datapath(None);
        assert!(!check(&s, Check::Ready).ok);
        s.set_snapshot_complete(true);
        assert_eq!(check(&s, Check::Ready), ok);
        s.datapath(Some("iptables-restore: exited with 1".into()));
        assert_eq!(
            check(&s, Check::Ready),
            not("the kernel does not match the ruleset in force: iptables-restore: exited with 1")
        );
        s.datapath(None);
        assert_eq!(check(&s, Check::Ready), ok);
        // Liveness follows the heartbeats.
        assert_eq!(check(&s, Check::Live), ok);
        let beat = metrics.health().register(100, "queue");
        beat.down("panicked: boom; restarting in 1s".into());
        assert_eq!(
            check(&s, Check::Live),
            not("queue 100: panicked: boom; restarting in 1s")
        );
        beat.up();
        assert_eq!(check(&s, Check::Live), ok);
        // On the wire.
        assert_eq!(
            serde_json::to_string(&Request::Check { probe: Check::Live }).unwrap(),
            r#"{"request":"check","probe":"live"}"#
        );
        assert_eq!(
            serde_json::to_string(&Response::Check(not("x"))).unwrap(),
            r#"{"check":{"ok":false,"reason":"x"}}"#
        );
        assert_eq!(
            serde_json::to_string(&Response::Check(ok)).unwrap(),
            r#"{"check":{"ok":true}}"#
        );
    }

    #[test]
    fn requests_and_responses_are_one_json_line_each() {
        assert_eq!(
            serde_json::to_string(&Request::Status).unwrap(),
            r#"{"request":"status"}"#
        );
        assert_eq!(
            serde_json::from_str::<Request>(r#"{"request":"policies"}"#).unwrap(),
            Request::Policies
        );
        let s = status();
        s.applied(1);
        s.reloaded(Some("bad.yaml: nope".into()));
        let Response::Status(report) = s.answer(&Request::Status) else {
            panic!()
        };
        assert_eq!(report.ruleset_generation, 1);
        assert_eq!(report.queues[0].counters.get("allowed"), Some(2));
        let text = render_status(&report);
        assert!(
            text.contains("last reload:        FAILED 0s ago: bad.yaml: nope"),
            "{text}"
        );
        assert!(text.contains("fail mode:          closed"));
        assert!(text.contains("datapath:           in sync"), "{text}");
        // The rows of the agent-level metrics.
        let commit = crate::telemetry::metrics::COMMIT;
        assert!(text.contains(&format!(" (commit {commit})\n")), "{text}");
        assert!(text.contains("enforced endpoints: "), "{text}");
        assert!(
            text.contains("policy source:      waiting for a complete snapshot"),
            "{text}"
        );
        assert!(text.contains("last applied:       0s ago"), "{text}");
        assert!(text.contains("process:            cpu "), "{text}");
        assert!(!text.contains("fds ?/"), "{text}");
        assert_eq!(
            report.enforced_endpoints,
            s.ruleset.load().endpoints().len()
        );
        s.datapath(Some("iptables-restore: exited with 1".into()));
        let Response::Status(behind) = s.answer(&Request::Status) else {
            panic!()
        };
        assert!(render_status(&behind)
            .contains("datapath:           BEHIND, retrying: iptables-restore: exited with 1"));
        s.datapath(None);
        assert!(
            !text.contains("bridged traffic:"),
            "no row while seen: {text}"
        );
        s.bridged_traffic(Some("br_netfilter is not loaded".into()));
        let Response::Status(unseen) = s.answer(&Request::Status) else {
            panic!()
        };
        assert!(render_status(&unseen)
            .contains("\nbridged traffic:    NOT SEEN: br_netfilter is not loaded\n"));
        s.bridged_traffic(None);
        assert!(text.contains("\n100   2       0       0 "), "{text}");
        let json = serde_json::to_string(&Response::Status(report.clone())).unwrap();
        assert!(json.starts_with(r#"{"status":{"version":"#), "{json}");
        assert_eq!(
            serde_json::from_str::<Response>(&json).unwrap(),
            Response::Status(report)
        );
    }

    /// Status shows what metrics exports: every counter of every set a
    /// worker registers, and the kernel's counters of its queue, as a
    /// column of its worker's table with a value for each queue; a queue
    /// the kernel does not list shows `-` there.
    #[test]
    fn status_shows_every_declared_counter_of_every_queue() {
        use crate::counters::{CounterSet, Series};
        use crate::telemetry::kernel::KernelCounters;
        use crate::workers::{DnsCounters, L7Counters, QueueCounters};
        let metrics = Arc::new(Metrics::new());
        let counters = metrics.counters();
        let connection = |kernel: bool| {
            // In the agent's order: the worker's own set, then the queue's.
            let mut sets: Vec<Arc<dyn CounterSet>> = vec![
                Arc::new(ConnectionCounters::default()),
                Arc::new(QueueCounters::default()),
            ];
            if kernel {
                sets.push(Arc::new(KernelCounters::default()));
            }
            sets
        };
        // Two connection queues, only the second bound in the kernel.
        counters.register(100, "queue", connection(false));
        counters.register(101, "queue", connection(true));
        let dns: Vec<Arc<dyn CounterSet>> = vec![
            Arc::new(DnsCounters::default()),
            Arc::new(QueueCounters::default()),
            Arc::new(KernelCounters::default()),
        ];
        counters.register(53, "dns", dns);
        let l7: Vec<Arc<dyn CounterSet>> = vec![
            Arc::new(L7Counters::default()),
            Arc::new(QueueCounters::default()),
            Arc::new(KernelCounters::default()),
        ];
        counters.register(102, "L7 queue", l7);
        let s = AgentStatus::new(
            facts(),
            Arc::new(ArcSwap::from_pointee(Ruleset::default())),
            Arc::clone(&metrics),
        );
        let report = s.report();
        let text = render_status(&report);
        let table = |worker: &str| -> Vec<Vec<String>> {
            let header = worker.to_uppercase();
            text.split("\n\n")
                .find(|block| block.starts_with(&format!("{header} ")))
                .unwrap_or_else(|| panic!("no {worker} table in\n{text}"))
                .lines()
                .map(|l| {
                    l.split(' ')
                        .filter(|c| !c.is_empty())
                        .map(String::from)
                        .collect()
                })
                .collect()
        };
        let kernel = KernelCounters::SERIES;
        // Worker, its sets in registration order, its queues.
        type Expected<'a> = (&'a str, Vec<&'a [Series]>, &'a [&'a str]);
        let expected: [Expected; 3] = [
            (
                "queue",
                vec![ConnectionCounters::SERIES, QueueCounters::SERIES, kernel],
                &["100", "101"],
            ),
            (
                "dns",
                vec![DnsCounters::SERIES, QueueCounters::SERIES, kernel],
                &["53"],
            ),
            (
                "L7 queue",
                vec![L7Counters::SERIES, QueueCounters::SERIES, kernel],
                &["102"],
            ),
        ];
        for (worker, sets, queues) in expected {
            let rows = table(worker);
            // `L7 QUEUE` is two words of the header.
            let header: Vec<&str> = rows[0]
                .iter()
                .skip(worker.split(' ').count())
                .map(String::as_str)
                .collect();
            let keys: Vec<String> = sets
                .iter()
                .flat_map(|set| set.iter())
                .map(|series| series.key.to_uppercase().replace('_', "-"))
                .collect();
            assert_eq!(header, keys, "{worker}");
            let shown: Vec<&str> = rows[1..].iter().map(|r| r[0].as_str()).collect();
            assert_eq!(shown, queues, "{worker}");
            for row in &rows[1..] {
                assert_eq!(row.len(), keys.len() + 1, "{worker}: {row:?}");
            }
        }
        // Queue 100 is not in the kernel's list: its kernel cells say so.
        let queue = table("queue");
        assert_eq!(queue[1].iter().filter(|c| *c == "-").count(), kernel.len());
        assert!(!queue[2].contains(&"-".to_string()), "{queue:?}");
        // JSON carries the same keys, per queue.
        let json = serde_json::to_value(&report).unwrap();
        let l7 = &json["queues"][3]["counters"];
        for series in L7Counters::SERIES.iter().chain(kernel) {
            assert_eq!(l7[series.key], 0, "{}", series.key);
        }
    }

    /// The agent-level rows of `status` are the agent-level series of
    #[test]
    fn anti_spoofing_rows_name_the_unguarded_and_the_drops_the_metrics_count() {
        let metrics = Arc::new(Metrics::new());
        let s = status_with(Arc::clone(&metrics));
        assert!(!render_status(&s.report()).contains("anti-spoofing"));
        metrics.antispoof_endpoints(
            &["apps/a".into(), "apps/b".into()],
            1,
            &crate::datapath::antispoof::Reason::LABELS,
        );
        metrics.antispoof_dropped("apps/a", "source", 3);
        let guarded = |endpoint: &str, interface: &str| GuardedReport {
            endpoint: endpoint.into(),
            interface: interface.into(),
            dropped: metrics
                .antispoof_dropped_of(endpoint, &crate::datapath::antispoof::Reason::LABELS)
                .into_iter()
                .map(|(r, n)| (r.to_string(), n))
                .collect(),
        };
        s.anti_spoofing(Some(AntiSpoofReport {
            enabled: true,
            guarded: vec![
                guarded("apps/a", "veth-a"),
                guarded("apps/b", "br0 port vb"),
            ],
            unguarded: vec![UnguardedReport {
                endpoint: "apps/x".into(),
                reason: "the node has no route to 10.9.9.9".into(),
            }],
        }));
        let text = render_status(&s.report());
        assert!(
            text.contains(
                "\nanti-spoofing:      2 endpoints guarded, 3 dropped packets; 1 UNGUARDED\n  \
                 apps/x                         UNGUARDED: the node has no route to 10.9.9.9\n  \
                 apps/a                         veth-a: dropped address 0, neighbour 0, source 3\n"
            ),
            "{text}"
        );
        assert!(!text.contains("apps/b "), "no drops, no row: {text}");
        let exposition = metrics.render();
        assert!(exposition.contains(
            "tollgate_antispoof_dropped_packets_total{endpoint=\"apps/a\",reason=\"source\"} 3\n"
        ));
        assert!(exposition.contains(
            "tollgate_antispoof_dropped_packets_total{endpoint=\"apps/b\",reason=\"address\"} 0\n"
        ));
        assert!(exposition.contains("tollgate_antispoof_unguarded_endpoints 1\n"));
        // An endpoint no longer guarded leaves the exposition.
        metrics.antispoof_endpoints(
            &["apps/b".into()],
            0,
            &crate::datapath::antispoof::Reason::LABELS,
        );
        assert!(!metrics.render().contains("endpoint=\"apps/a\""));
        s.anti_spoofing(Some(AntiSpoofReport::default()));
        assert!(render_status(&s.report())
            .contains("\nanti-spoofing:      off (antiSpoofing.enabled)\n"));
    }

    /// `/metrics`, by name and value, read from the same counters: what
    /// moves one moves the other.
    #[test]
    fn status_shows_the_agent_series_of_the_metrics() {
        use crate::agent::{ReloadResult, Sets};
        use std::sync::atomic::Ordering::Relaxed;
        let metrics = Arc::new(Metrics::new());
        let sets = Sets::registered(&metrics);
        let s = status_with(Arc::clone(&metrics));
        sets.agent.reload(ReloadResult::Rejected);
        sets.agent.reload(ReloadResult::Applied);
        metrics.datapath_applied(Duration::from_millis(250));
        sets.agent
            .apply_failed(&crate::datapath::ApplyError::Write {
                step: crate::datapath::Step::Table(crate::datapath::Family::V4),
                source: crate::datapath::DatapathError::UnknownBackend {
                    version: String::new(),
                },
            });
        sets.agent.drift_repairs.fetch_add(1, Relaxed);
        sets.audit.written.fetch_add(7, Relaxed);
        sets.audit.skipped_queue_full.fetch_add(2, Relaxed);
        sets.kube.watch_errors.fetch_add(1, Relaxed);
        sets.kube.events_created.fetch_add(1, Relaxed);
        sets.kube.events_failed.fetch_add(1, Relaxed);
        let report = s.report();
        let rendered = metrics.render();
        let exposition: std::collections::BTreeMap<&str, f64> = rendered
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (key, value) = l.rsplit_once(' ')?;
                Some((key, value.parse().ok()?))
            })
            .collect();
        // Every series of the subsystems' sets, and the last apply's time.
        let declared = crate::agent::AgentCounters::SERIES.len()
            + crate::source::kube::KubeCounters::SERIES.len()
            + crate::source::docker::DockerCounters::SERIES.len()
            + crate::workers::audit::AuditCounters::SERIES.len();
        assert_eq!(report.agent_series.len(), declared + 1);
        for row in &report.agent_series {
            assert_eq!(
                exposition.get(row.series.as_str()),
                Some(&row.value),
                "{} in status, not so in /metrics",
                row.series
            );
        }
        // Every family the rows come from, each label value included.
        let names: Vec<&str> = report
            .agent_series
            .iter()
            .map(|r| r.series.as_str())
            .collect();
        for expected in [
            "tollgate_reloads_total{result=\"applied\"}",
            "tollgate_reloads_total{result=\"rejected\"}",
            "tollgate_reloads_total{result=\"failed\"}",
            "tollgate_last_reload_success",
            "tollgate_datapath_last_apply_duration_seconds",
            "tollgate_datapath_apply_failures_total{step=\"iptables\"}",
            "tollgate_datapath_drift_repairs_total",
            "tollgate_audit_lines_written_total",
            "tollgate_audit_lines_skipped_total{reason=\"queue_full\"}",
            "tollgate_kubernetes_watch_errors_total",
            "tollgate_kubernetes_events_total{result=\"dropped\"}",
        ] {
            assert!(names.contains(&expected), "{expected} not in status");
        }
        let text = render_status(&report);
        for line in [
            "tollgate_reloads_total{result=\"rejected\"}",
            "tollgate_datapath_last_apply_duration_seconds",
            "tollgate_audit_lines_written_total",
            "tollgate_kubernetes_events_total{result=\"created\"}",
        ] {
            let row = text
                .lines()
                .find(|l| l.split_whitespace().next() == Some(line))
                .unwrap_or_else(|| panic!("{line} missing in\n{text}"));
            let shown: f64 = row.split_whitespace().nth(1).unwrap().parse().unwrap();
            assert_eq!(Some(&shown), exposition.get(line), "{row}");
        }
        assert!(text.contains("\nMETRIC "), "{text}");
        // JSON carries the rows too.
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(
            json["agentSeries"][0]["series"],
            "tollgate_reloads_total{result=\"applied\"}"
        );
        assert_eq!(json["agentSeries"][0]["value"], 1.0);
    }

    #[test]
    fn trace_answers_with_the_live_ruleset_and_says_when_privileged_accepts() {
        let yaml = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {addresses: [{type: InternalIP, address: 10.0.0.1}]}\n---\napiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: lock}\nspec:\n  priority: 1\n  tier: securityops\n  appliedTo: [{nodeSelector: {}}]\n  ingress: [{name: drop-all, action: Drop, from: [{ipBlock: {cidr: 0.0.0.0/0}}]}]\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: locked, namespace: apps, labels: {app: locked}}\nspec: {nodeName: n1}\nstatus: {podIP: 10.9.5.5}\n---\napiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: pod-lock}\nspec:\n  priority: 2\n  tier: securityops\n  appliedTo: [{podSelector: {matchLabels: {app: locked}}}]\n  egress: [{name: no-nodes, action: Drop, to: [{nodeSelector: {}}]}]\n";
        let (objects, problems) = crate::decode::parse_documents("t.yaml".as_ref(), yaml);
        assert!(problems.is_empty(), "{problems:?}");
        let local = crate::compile::LocalNode {
            name: "n1".into(),
            ..Default::default()
        };
        let ruleset = crate::compile::compile(&crate::model::Snapshot { objects }, &local);
        let s = AgentStatus::new(
            AgentFacts {
                node_name: "n1".into(),
                fail_mode: FailMode::Closed,
                privileged: vec![
                    "10.9.0.0/16,tcp/22".parse().unwrap(),
                    Privileged {
                        hooks: vec![PrivilegedHook::Forward],
                        .."10.7.0.0/16,tcp/22".parse::<Privileged>().unwrap()
                    },
                ],
                audit_log: None,
                metrics_address: None,
            },
            Arc::new(ArcSwap::from_pointee(ruleset)),
            Arc::new(Metrics::new()),
        );
        let trace_to = |src: &str, dst: &str, port: &str| {
            let request = TraceRequest {
                src: src.into(),
                dst: dst.into(),
                protocol: explain::TraceProtocol::Tcp,
                src_port: 40000,
                dst_port: Some(port.into()),
                icmp_type: 8,
                icmp_code: 0,
                igmp_type: 0x11,
                igmp_group: None,
                fqdn: None,
                http_method: None,
                http_host: None,
                http_path: None,
            };
            match s.answer(&Request::Trace(Box::new(request))) {
                Response::Trace(report) => *report,
                other => panic!("{other:?}"),
            }
        };
        let trace = |src: &str, port: &str| trace_to(src, "node:n1", port);
        let ssh = trace("10.9.3.4", "22");
        assert_eq!(ssh.privileged.as_deref(), Some("10.9.0.0/16,tcp/22"));
        assert_eq!(ssh.verdict, "Allow");
        assert_eq!(
            ssh.ingress.rule.as_deref(),
            Some("drop-all"),
            "what policy says"
        );
        for (src, port) in [("10.9.3.4", "23"), ("10.8.3.4", "22")] {
            let denied = trace(src, port);
            assert_eq!((denied.verdict.as_str(), denied.privileged), ("Drop", None));
        }
        // Routed traffic: only the entry that lists `forward` accepts it,
        // and the Node's entry accepts nothing routed (the trace has no
        // policy for these addresses, so their verdict is Allow anyway).
        let routed = trace_to("10.9.3.4", "10.9.3.5", "22");
        assert_eq!(routed.privileged, None);
        let routed = trace_to("10.6.0.1", "10.7.3.5", "22");
        assert_eq!(
            routed.privileged.as_deref(),
            Some("10.7.0.0/16,tcp/22 on forward")
        );
        // The entry does not reach the Node.
        assert_eq!(trace("10.7.3.4", "22").privileged, None);
        // An enforced Pod in an entry's range meets its own policy: the
        // entry matches no enforced endpoint, to the Node or from it.
        let pod = trace("apps/locked", "22");
        assert_eq!((pod.verdict.as_str(), pod.privileged), ("Drop", None));
        assert_eq!(pod.egress.rule.as_deref(), Some("no-nodes"));
        let to_pod = trace_to("node:n1", "apps/locked", "22");
        assert_eq!(
            (to_pod.verdict.as_str(), to_pod.privileged),
            ("Allow", None)
        );
        let unknown = Request::Trace(Box::new(TraceRequest {
            src: "ns/nobody".into(),
            ..match serde_json::from_str::<Request>(
                r#"{"request":"trace","src":"1.1.1.1","dst":"10.0.0.1","protocol":"icmp","srcPort":0}"#,
            )
            .unwrap()
            {
                Request::Trace(request) => *request,
                other => panic!("{other:?}"),
            }
        }));
        assert!(matches!(s.answer(&unknown), Response::Error(e) if e.contains("ns/nobody")));
    }

    #[test]
    fn skipped_is_answered_in_kubernetes_mode_only() {
        let s = status();
        let Response::Error(error) = s.answer(&Request::Skipped) else {
            panic!("a policy directory skips nothing")
        };
        assert!(error.contains("policy directory"), "{error}");
        assert_eq!(s.report().kubernetes, None);
        s.kubernetes_source(SourceState::default());
        assert_eq!(s.answer(&Request::Skipped), Response::Skipped(vec![]));
        let report = s.report();
        assert_eq!(
            report.kubernetes,
            Some(KubernetesReport {
                synced: false,
                skipped: 0,
                partly_enforced: 0
            })
        );
        assert!(render_status(&report).contains(
            "kubernetes:         NOT SYNCED (first list pending, or a watch failed: listing again), 0 skipped, 0 partly enforced"
        ));
        assert_eq!(
            serde_json::to_string(&Request::Skipped).unwrap(),
            r#"{"request":"skipped"}"#
        );
    }

    #[test]
    fn fqdn_sources_come_from_the_table_once_it_is_set() {
        use crate::dns::Resolution;
        use crate::fqdn::{FqdnPattern, LearnerConfig, Source};
        let s = status();
        assert_eq!(s.answer(&Request::Fqdn), Response::Fqdn(vec![]));
        let now = Instant::now();
        let selectors = vec![FqdnPattern::new("a.test")];
        let (table, _) = FqdnTable::restore(selectors, LearnerConfig::default(), &[], now);
        let answer = |last| Resolution {
            names: vec!["a.test".into()],
            address: std::net::IpAddr::from([10, 0, 0, last]),
            ttl: 60,
        };
        table.learn_answers(&[answer(1)], Source::Snooped, 0);
        table.learn_answers(&[answer(2)], Source::Resolved, 0);
        s.fqdn_table(Arc::new(table));
        let Response::Fqdn(mut sources) = s.answer(&Request::Fqdn) else {
            panic!()
        };
        sources.sort_by_key(|s| s.address);
        let json = serde_json::to_string(&Response::Fqdn(sources)).unwrap();
        assert_eq!(
            json,
            r#"{"fqdn":[{"selector":"a.test","address":"10.0.0.1","source":"snooped"},{"selector":"a.test","address":"10.0.0.2","source":"resolved"}]}"#
        );
        assert_eq!(
            serde_json::to_string(&Request::Fqdn).unwrap(),
            r#"{"request":"fqdn"}"#
        );
    }

    #[test]
    fn socket_round_trip_mode_0600_and_stale_socket_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/tollgate.sock");
        let server = serve(&path, status()).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dir_mode = std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dir_mode, 0o700);
        assert!(matches!(
            request(&path, &Request::Policies).unwrap(),
            Response::Policies(p) if p.is_empty()
        ));
        assert!(matches!(
            serve(&path, status()),
            Err(StatusError::InUse { .. })
        ));
        // A garbage request gets an error answer.
        let stream = UnixStream::connect(&path).unwrap();
        (&stream).write_all(b"nonsense\n").unwrap();
        let mut answer = String::new();
        BufReader::new(&stream).read_line(&mut answer).unwrap();
        assert!(answer.starts_with(r#"{"error":"bad request"#), "{answer}");
        drop(server);
        assert!(!path.exists());
        // A stale socket file (no listener) is replaced.
        let stale = UnixListener::bind(&path).unwrap();
        drop(stale);
        let _server = serve(&path, status()).unwrap();
        assert!(request(&path, &Request::Status).is_ok());
    }

    /// `n` connections that never send a request.
    fn idle_clients(path: &Path, n: usize) -> Vec<UnixStream> {
        (0..n).map(|_| UnixStream::connect(path).unwrap()).collect()
    }

    #[test]
    fn idle_clients_do_not_keep_others_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sock");
        let _server = serve(&path, status()).unwrap();
        let _idle = idle_clients(&path, 3);
        let started = Instant::now();
        assert!(matches!(
            request(&path, &Request::Status),
            Ok(Response::Status(_))
        ));
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn clients_over_the_cap_are_refused_at_once_and_served_once_others_leave() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sock");
        let _server = serve(&path, status()).unwrap();
        let idle = idle_clients(&path, MAX_CLIENTS);
        let started = Instant::now();
        let refused = request(&path, &Request::Status).unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(
            refused.to_string(),
            "the agent: busy: 16 status clients are being served; try again"
        );
        drop(idle);
        let deadline = Instant::now() + Duration::from_secs(5);
        while request(&path, &Request::Status).is_err() {
            assert!(Instant::now() < deadline, "places given back");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn slow_and_oversized_requests_are_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sock");
        let _server = serve(&path, status()).unwrap();
        // Half a request, then nothing: closed after REQUEST_TIMEOUT.
        let slow = UnixStream::connect(&path).unwrap();
        (&slow).write_all(b"{\"request\":").unwrap();
        slow.set_read_timeout(Some(REQUEST_TIMEOUT * 3)).unwrap();
        let started = Instant::now();
        let mut answer = Vec::new();
        let _ = (&slow).read_to_end(&mut answer);
        assert!(answer.is_empty(), "{answer:?}");
        assert!(
            started.elapsed() < REQUEST_TIMEOUT * 2,
            "{:?}",
            started.elapsed()
        );
        // An endless request: answered as a bad one after 4096 bytes.
        let long = UnixStream::connect(&path).unwrap();
        let _ = (&long).write_all(&[b'x'; 3 * MAX_REQUEST]);
        let mut answer = String::new();
        BufReader::new(&long).read_line(&mut answer).unwrap();
        assert!(answer.starts_with(r#"{"error":"bad request"#), "{answer}");
    }

    #[test]
    fn a_silent_or_stopped_agent_is_a_timeout_and_an_empty_answer_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sock");
        // Bound, never accepting: the connection waits in the queue.
        let _listener = UnixListener::bind(&path).unwrap();
        let short = Duration::from_millis(300);
        let error = request_within(&path, &Request::Status, short).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "status socket {}: no answer within 0.3s (the agent is stuck or overloaded)",
                path.display()
            )
        );
        // Accepting and closing without a word.
        let closing = dir.path().join("c.sock");
        let listener = UnixListener::bind(&closing).unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                drop(stream);
            }
        });
        let error = request_within(&closing, &Request::Status, short).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "status socket {}: the agent closed the connection without answering",
                closing.display()
            )
        );
    }

    #[test]
    fn binding_leaves_nothing_behind_even_after_a_crashed_bind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sock");
        let leftover = dir.path().join(format!(".t.sock.{}", std::process::id()));
        std::fs::create_dir(&leftover).unwrap();
        std::fs::write(leftover.join("s"), b"").unwrap();
        let _server = serve(&path, status()).unwrap();
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["t.sock"]);
        assert!(request(&path, &Request::Status).is_ok());
    }
}
