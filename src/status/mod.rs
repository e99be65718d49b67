//! The status API of a running agent: a Unix stream socket answering one
//! JSON request per connection with one JSON response, and the client the
//! CLI uses (`tollgate status`, `tollgate get`, `tollgate trace`). The
//! agent owns an [`AgentStatus`] that it updates on every (re)load; the
//! server only reads it. Nothing here touches the packet path, and nothing
//! here renders for a person (that is `commands::render`'s).
//!
//! - `protocol.rs`: the requests, the answers and the reports in them;
//! - `server.rs`: the socket, its clients and their limits;
//! - `client.rs`: [`request`] and [`stream`], as the CLI asks;
//! - `observe.rs`: the `observe` answer, a line per decision;
//! - `support.rs`: what `tollgate bundle` asks the agent;
//! - this file: [`AgentStatus`], what the agent knows about itself and how
//!   it answers each request.
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
//! → {"request":"observe","filter":{"verdicts":["drop"]},"follow":true,"last":20}
//! ← {"event":{"time":"…","verdict":"Drop","protocol":"TCP","src":{…},"dst":{…},…}}
//! ← {"lost":12}
//! → {"request":"logLevel","filter":"debug"}
//! ← {"logLevel":"debug"}
//! → {"request":"support"}
//! ← {"support":{"commandLine":[…],"config":"…","log":[…],"iptablesSave":"…",…}}
//! → {"request":"snapshot"}
//! ← {"snapshot":{"nodeName":"node-1","nodeLabels":{},"nodeAddresses":[…],"objects":[{"apiVersion":"v1","kind":"Pod",…},…]}}
//! ← {"error":"unknown request"}
//! ```
#![allow(clippy::disallowed_methods)] // the agent reports its uptime and the age of its reloads.

mod answer;
mod client;
mod observe;
mod protocol;
mod server;
mod support;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use arc_swap::ArcSwap;

pub use client::{request, stream};
pub use protocol::{
    AgentSeries, AntiSpoofReport, CheckReport, Counts, FqdnReport, FqdnSource, GuardedReport,
    KubernetesReport, LearnedSetReport, PeersReport, ProcessReport, QueueReport, ReloadReport,
    Request, Response, SnapshotReport, StatusError, StatusReport, SupportReport, UnguardedReport,
    DEFAULT_SOCKET, TIMEOUT,
};
pub use server::{serve, StatusServer, MAX_CLIENTS, REQUEST_TIMEOUT};

use crate::compile::LocalNode;
use crate::config::{Privileged, PrivilegedHook, PrivilegedProtocol};
use crate::counters;
use crate::datapath::Iptables;
use crate::explain::{self, TraceReport, TraceRequest};
use crate::fqdn::{FqdnTable, NoFqdn};
use crate::marks::FailMode;
use crate::model::{Object, Snapshot};
use crate::ruleset::{Endpoint, Ruleset};
use crate::source::kube::{Reason, SourceState};
use crate::telemetry::{Check, Metrics, Probes};
use crate::workers::observe::Hub;

counters! {
    /// Whether the agent is ready, for the alert rules (`/readyz` answers
    /// the probes).
    pub struct ReadinessCounters: one per agent {
        ready: Gauge "ready" = "1 while the agent is ready (a complete policy snapshot applied and the kernel matching it, as /readyz answers), else 0",
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
    /// The decisions `tollgate observe` reads (set once).
    observe: OnceLock<Hub>,
    /// `ready` as a gauge, kept with the state it reads.
    readiness: Arc<ReadinessCounters>,
    /// The configuration in force, written out (`tollgate bundle`).
    config: String,
    /// The kernel's tools, to show its state (`tollgate bundle`).
    kernel: Option<Iptables>,
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
    endpoint_traffic_unseen: Vec<String>,
    policy_warnings: Vec<String>,
    verdict_cache_hits: Option<u64>,
    anti_spoofing: Option<AntiSpoofReport>,
    /// The kernel was written to match the ruleset in force and the last
    /// attempt did not fail; false until the first install succeeds.
    datapath_synced: bool,
    /// The snapshot the latest ruleset was compiled from, and its Node.
    compiled: Option<(Arc<Snapshot>, Arc<LocalNode>)>,
}

/// The fixed facts of an agent, for [`AgentStatus::new`].
pub struct AgentFacts {
    pub node_name: String,
    pub fail_mode: FailMode,
    /// `datapath.privileged`: accepted ahead of any policy (`trace` says so).
    pub privileged: Vec<Privileged>,
    pub audit_log: Option<PathBuf>,
    pub metrics_address: Option<String>,
    /// The configuration in force, written out for `tollgate bundle`.
    pub config: String,
    /// The kernel's tools, for `tollgate bundle` (`None`: not shown).
    pub kernel: Option<Iptables>,
}

impl AgentStatus {
    pub fn new(
        facts: AgentFacts,
        ruleset: Arc<ArcSwap<Ruleset>>,
        metrics: Arc<Metrics>,
    ) -> AgentStatus {
        let readiness = Arc::new(ReadinessCounters::default());
        metrics.counters().register_set(Arc::clone(&readiness) as _);
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
            observe: OnceLock::new(),
            readiness,
            config: facts.config,
            kernel: facts.kernel,
        }
    }

    /// The decisions `tollgate observe` reads (set once).
    pub fn observe_hub(&self, hub: Hub) {
        let _ = self.observe.set(hub);
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
            peers: state.peers().map(|peers| PeersReport {
                needed: peers.needed(),
                waiting: peers.waiting(),
                slices: peers.held().len(),
                controller_stale: peers.stale(),
            }),
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

    /// The FQDN sets of the agent's namespace, as the kernel holds them,
    /// and how each entry was learned.
    fn fqdn_report(&self) -> Response {
        match crate::datapath::learned_sets() {
            Ok(sets) => Response::Fqdn(FqdnReport {
                sets: sets
                    .into_iter()
                    .map(|(name, set)| LearnedSetReport {
                        name,
                        entries: set.entries,
                    })
                    .collect(),
                sources: self.fqdn_sources(),
            }),
            Err(error) => Response::Error(format!("reading the FQDN sets: {error}")),
        }
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
        {
            let mut state = self.state();
            state.datapath_synced = behind.is_none();
            state.datapath_behind = behind;
        }
        self.readiness_changed();
    }

    /// The `ready` gauge follows [`AgentStatus::ready`].
    fn readiness_changed(&self) {
        let ready = u64::from(self.ready().is_ok());
        self.readiness.ready.store(ready, Ordering::Relaxed);
    }

    /// The latest ruleset was compiled from `snapshot` for `node`.
    pub fn compiled(&self, snapshot: Arc<Snapshot>, node: &LocalNode) {
        self.state().compiled = Some((snapshot, Arc::new(node.clone())));
    }

    /// The snapshot the latest ruleset was compiled from, as documents.
    fn snapshot(&self) -> Response {
        let Some(compiled) = self.state().compiled.clone() else {
            return Response::Error("no policy snapshot compiled yet".into());
        };
        let (snapshot, node) = &compiled;
        Response::Snapshot(Box::new(SnapshotReport {
            node_name: node.name.clone(),
            node_labels: node.labels.clone().into_iter().collect(),
            node_addresses: node.addresses.clone(),
            objects: snapshot.iter().map(Object::to_document).collect(),
        }))
    }

    /// The warnings about the policies in force (admission and intent).
    pub fn policy_warnings(&self, warnings: Vec<String>) {
        self.state().policy_warnings = warnings;
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

    /// Local endpoint addresses whose traffic does not cross netfilter,
    /// each with the path that bypasses it.
    pub fn endpoint_traffic(&self, unseen: Vec<String>) {
        self.state().endpoint_traffic_unseen = unseen;
    }

    /// Whether the snapshot the agent has applied is complete: files
    /// loaded, or every Kubernetes kind listed once. Call it after the
    /// snapshot was offered and synced, so that readiness never runs ahead
    /// of the kernel.
    pub fn set_snapshot_complete(&self, complete: bool) {
        self.snapshot_complete.store(complete, Ordering::SeqCst);
        self.readiness_changed();
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
            endpoint_traffic_unseen: state.endpoint_traffic_unseen.clone(),
            policy_warnings: state.policy_warnings.clone(),
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
            Request::Policies => Response::Policies(self.ruleset.load().policy_summaries()),
            Request::Check { probe } => Response::Check(self.check(*probe).into()),
            Request::Fqdn => self.fqdn_report(),
            Request::Skipped => match self.kubernetes.get() {
                Some(state) => Response::Skipped(state.refused()),
                None => Response::Error(
                    "the agent reads a policy directory: it skips nothing (an invalid change is rejected whole; see `tollgate validate`)".into(),
                ),
            },
            Request::Trace(request) => self.trace(request),
            Request::Endpoints => Response::Endpoints(explain::endpoints(&self.ruleset.load())),
            Request::Snapshot => self.snapshot(),
            Request::LogLevel { filter } => {
                let changed = match filter {
                    Some(filter) => crate::logging::set(filter).inspect(|now| {
                        tracing::info!(filter = %now, "log filter changed");
                    }),
                    None => crate::logging::current(),
                };
                match changed {
                    Ok(filter) => Response::LogLevel(filter),
                    Err(error) => Response::Error(error.to_string()),
                }
            }
            Request::Support => Response::Support(Box::new(self.support())),
            // Streamed by the server, a line per event.
            Request::Observe { .. } => {
                Response::Error("observe is answered as a stream".into())
            }
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
