//! `tollgate run`: the agent's run loop. It loads the configuration and the
//! policy directory, restores the FQDN mirror from the kernel's FQDN sets,
//! starts one NFQUEUE worker per queue and the DNS reply worker, installs
//! the datapath, and then waits: a change in the policy directory (inotify,
//! debounced) or SIGHUP reloads, SIGTERM/SIGINT tears everything down. A
//! policy directory that fails validation (or has disappeared) never
//! replaces the ruleset in force, and a new ruleset is put in force only
//! once the kernel queues what it needs ([`datapath::transition`]); a
//! failed kernel write is retried with backoff ([`datapath::retry`]). This
//! module wires the pieces; it decides nothing itself.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use crate::audit::AuditConfig;
use crate::compile::{LocalNode, Ruleset};
use crate::config::{
    parse_labels, Config, ConfigError, FailMode, L7DenyResponse, MachineDefaults, MaskValue,
    Privileged, Settings,
};
use crate::datapath::{self, transition, ApplyError, Backoff, DatapathError, Kernel, Retry};
use crate::fqdn::FqdnTable;
use crate::fqdn::{FqdnPattern, LearnerConfig};
use crate::source::watch::{PolicyWatch, Refresh, WatchError};
use crate::status::{AgentFacts, AgentStatus};
use crate::telemetry::{Metrics, ReloadResult};
use crate::validate::Problem;
use crate::workers::fqdn_sets::restored_entries;
use crate::workers::L7WorkerConfig;
use crate::workers::{DnsWorker, DnsWorkerConfig, Observers, Worker, WorkerConfig};

/// Quiet time after the last change in the policy directory before a
/// reload: editors and `kubectl cp` write in several steps.
const DEBOUNCE: Duration = Duration::from_millis(300);
/// Longest a stream of changes can postpone a reload.
const DEBOUNCE_MAX: Duration = Duration::from_secs(3);

/// Options of `tollgate run`. Every option overrides the key of the same
/// name (camelCase) in the `--config` file.
#[derive(Clone, Debug, clap::Args)]
pub struct RunArgs {
    /// Directory of policy YAML files, watched for changes.
    #[arg(
        long,
        value_name = "DIR",
        required_unless_present = "kubernetes",
        conflicts_with_all = ["kubernetes", "kubeconfig"]
    )]
    pub policies: Option<PathBuf>,
    #[command(flatten)]
    pub kube: crate::source::kube::KubeArgs,
    /// YAML configuration file.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Name of the local Node (default: the host name).
    #[arg(long, value_name = "NAME", env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// Labels of the local Node.
    #[arg(long, value_name = "k=v,k2=v2", value_parser = parse_labels)]
    pub node_labels: Option<BTreeMap<String, String>>,
    /// Address of the local Node, in addition to those on its interfaces.
    #[arg(long = "node-address", value_name = "IP")]
    pub node_addresses: Vec<IpAddr>,
    /// Interfaces to enforce on (`veth*` style prefixes); default all.
    #[arg(long, value_name = "GLOB,...", value_delimiter = ',')]
    pub interfaces: Vec<String>,
    /// Number of NFQUEUE queues and workers (default: number of cores).
    #[arg(long, value_name = "N")]
    pub queues: Option<u32>,
    /// First NFQUEUE number (default 100).
    #[arg(long, value_name = "N")]
    pub queue_base: Option<u16>,
    /// Packet-mark bits tollgate owns (default 0xf00000).
    #[arg(long, value_name = "HEX")]
    pub mark_mask: Option<String>,
    /// What happens to undecidable new connections: open or closed (default).
    #[arg(long, value_name = "MODE", value_parser = parse_fail_mode)]
    pub fail_mode: Option<FailMode>,
    /// Always-allowed traffic, ahead of every policy.
    #[arg(long, value_name = "CIDR[,proto[/port]]", value_parser = parse_privileged)]
    pub privileged: Vec<Privileged>,
    /// NFQUEUE number of the DNS reply queue (default: after the others).
    #[arg(long, value_name = "N")]
    pub dns_queue: Option<u16>,
    /// Learn FQDN addresses only from replies of this DNS server.
    #[arg(long = "dns-trusted-server", value_name = "IP")]
    pub dns_trusted_servers: Vec<IpAddr>,
    /// Floor on the TTL of learned FQDN addresses, seconds (default 5).
    #[arg(long, value_name = "SECS")]
    pub fqdn_min_ttl: Option<u32>,
    /// Audit log file (the spec's np.log format); off when unset.
    #[arg(long, value_name = "FILE")]
    pub audit_log: Option<PathBuf>,
    /// Prometheus metrics endpoint, `host:port`; off when unset.
    #[arg(long, value_name = "ADDR")]
    pub metrics_address: Option<std::net::SocketAddr>,
    /// Unix socket of the status API (default /run/tollgate/tollgate.sock).
    #[arg(long, value_name = "PATH")]
    pub status_socket: Option<PathBuf>,
    #[command(flatten)]
    pub log: crate::logging::LogArgs,
    /// Answer to a denied HTTP request: 403 (default) or reset.
    #[arg(long, value_name = "403|reset", value_parser = parse_l7_deny_response)]
    pub l7_deny_response: Option<L7DenyResponse>,
}

fn parse_l7_deny_response(s: &str) -> Result<L7DenyResponse, ConfigError> {
    s.parse()
}

/// A repeatable flag given at least once.
fn non_empty<T: Clone>(values: &[T]) -> Option<Vec<T>> {
    (!values.is_empty()).then(|| values.to_vec())
}

fn parse_fail_mode(s: &str) -> Result<FailMode, ConfigError> {
    s.parse()
}

fn parse_privileged(s: &str) -> Result<Privileged, ConfigError> {
    s.parse()
}

impl RunArgs {
    /// The flags as settings to lay over the configuration file.
    fn settings(&self) -> Settings {
        Settings {
            node_name: self.node_name.clone(),
            node_labels: self.node_labels.clone(),
            node_addresses: non_empty(&self.node_addresses),
            interfaces: non_empty(&self.interfaces),
            queues: self.queues,
            queue_base: self.queue_base,
            mark_mask: self.mark_mask.clone().map(MaskValue::Text),
            fail_mode: self.fail_mode,
            privileged: non_empty(&self.privileged),
            l7_deny_response: self.l7_deny_response,
            dns_queue: self.dns_queue,
            dns_trusted_servers: non_empty(&self.dns_trusted_servers),
            fqdn_min_ttl: self.fqdn_min_ttl,
            audit_log: self.audit_log.clone(),
            metrics_address: self.metrics_address,
            status_socket: self.status_socket.clone(),
            ..Settings::default()
        }
    }
}

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
    #[error("reading interface addresses: {0}")]
    Addresses(String),
    #[error(transparent)]
    Watch(#[from] WatchError),
    #[error(transparent)]
    Kubernetes(#[from] crate::source::kube::KubeError),
    #[error("installing signal handlers: {0}")]
    Signals(std::io::Error),
    #[error(transparent)]
    Audit(#[from] crate::audit::AuditError),
    #[error(transparent)]
    Metrics(#[from] crate::telemetry::http::ListenError),
    #[error(transparent)]
    Status(#[from] crate::status::StatusError),
    #[error(transparent)]
    Privilege(#[from] crate::privilege::PrivilegeError),
}

fn list(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs the agent until SIGTERM or SIGINT.
pub fn run(args: RunArgs) -> anyhow::Result<()> {
    args.log.install()?;
    run_agent(args).map_err(anyhow::Error::from)
}

fn run_agent(args: RunArgs) -> Result<(), AgentError> {
    // Before any thread exists: capabilities are per thread, and threads
    // inherit them from their creator.
    let kept = crate::privilege::drop_to_network_capabilities()?;
    tracing::info!(
        kept = ?kept.effective,
        bounding_reduced = kept.bounding_reduced,
        "capabilities reduced"
    );
    if !kept.effective.contains(&caps::Capability::CAP_NET_ADMIN) {
        tracing::warn!("running without CAP_NET_ADMIN: installing rules will fail (run as root, or grant CAP_NET_ADMIN and CAP_NET_RAW)");
    }
    let config = load_config(&args)?;
    let node = local_node(&config)?;
    let kernel = Kernel::detect()?;
    tracing::info!(
        backend = ?kernel.backend(),
        queues = %format!("{}-{}", config.queues.first(), config.queues.last()),
        fail_mode = %config.fail_mode,
        mark_mask = %format!("{:#x}", config.marks.mask),
        "starting"
    );

    // Signals and directory changes are set up before anything is
    // installed, so a SIGTERM at any point after install tears down.
    let metrics = Arc::new(Metrics::new());
    let (events, inbox) = mpsc::channel();
    listen_for_signals(events.clone())?;
    let (policies, watch) = match &args.policies {
        Some(dir) => {
            let watch = PolicyWatch::start(dir, move || {
                let _ = events.send(Event::PolicyChanged);
            })?;
            (Policies::Directory(dir.clone()), Some(watch))
        }
        None => {
            let connection = crate::source::kube::Connection::from_args(&args.kube);
            let source = crate::source::kube::KubeSource::spawn(
                connection,
                Arc::clone(&metrics),
                move || {
                    let _ = events.send(Event::PolicyChanged);
                },
            )?;
            tracing::info!(
                "kubernetes source started; privileged rules only until the first snapshot"
            );
            (Policies::Kubernetes(source), None)
        }
    };
    let ruleset = policies.load(&node).map_err(AgentError::InvalidPolicies)?;

    let audit = match &config.audit_log {
        Some(path) => {
            let sink = crate::audit::writer::spawn(
                AuditConfig {
                    path: path.clone(),
                    rate: config.audit_rate,
                    burst: config.audit_burst,
                    max_bytes: config.audit_log_max_bytes,
                    max_files: config.audit_log_max_files,
                },
                Arc::clone(&metrics),
            )?;
            tracing::info!(path = %path.display(), rate = config.audit_rate, burst = config.audit_burst, "audit log");
            Some(sink)
        }
        None => None,
    };
    let observers = Observers {
        metrics: Arc::clone(&metrics),
        audit: audit.clone(),
    };
    // What the FQDN sets still hold from a previous run (their entries time
    // out in the kernel meanwhile) seeds the mirror before any worker runs.
    let learned: Vec<(String, Vec<(IpAddr, u32)>)> = kernel
        .installed()?
        .learned
        .into_iter()
        .map(|(name, set)| (name, set.entries))
        .collect();
    let (mirror, restored) = FqdnTable::restore(
        ruleset.fqdn_patterns().to_vec(),
        learner_config(&config),
        &restored_entries(ruleset.fqdn_patterns(), &learned),
    );
    let mirror = Arc::new(mirror);
    tracing::info!(
        selectors = ruleset.fqdn_patterns().len(),
        restored,
        "fqdn mirror restored"
    );

    let patterns = ruleset.fqdn_patterns().to_vec();
    let policy = Arc::new(ArcSwap::from_pointee(ruleset));
    for queue in config.queues.iter() {
        Worker::spawn(
            WorkerConfig {
                queue,
                marks: config.marks,
                fail_mode: config.fail_mode,
            },
            Arc::clone(&policy),
            Arc::clone(&mirror),
            observers.clone(),
        )?;
    }
    crate::workers::l7::spawn(
        L7WorkerConfig {
            marks: config.marks,
            fail_mode: config.fail_mode,
            l7: config.l7,
        },
        Arc::clone(&policy),
        Arc::clone(&mirror),
        observers,
    )?;
    let status = Arc::new(AgentStatus::new(
        AgentFacts {
            node_name: config.node_name.clone(),
            fail_mode: config.fail_mode,
            audit_log: config.audit_log.clone(),
            metrics_address: config.metrics_address.map(|a| a.to_string()),
        },
        Arc::clone(&policy),
        Arc::clone(metrics.counters()),
    ));
    let _status_server = serve_status(config.status_socket.as_deref(), Arc::clone(&status))?;
    if let Some(address) = config.metrics_address {
        let bound = crate::telemetry::http::serve(address, Arc::clone(&metrics))?;
        tracing::info!(address = %bound, "metrics listening");
    }

    let mut agent = Agent {
        config,
        policies,
        watch,
        kernel,
        policy,
        pending: None,
        mirror,
        dns: None,
        generation: 1,
        announced: 0,
        retry: Retry::new(Backoff::DEFAULT),
        metrics,
        status,
    };
    agent.start_dns_worker(&patterns)?;
    agent.put_in_force();
    // A failed install is retried from the run loop: tearing down here
    // would remove what an earlier agent left enforcing.
    agent.sync();
    agent.serve(&inbox);

    agent.kernel.teardown()?;
    if let Some(audit) = &audit {
        audit.flush(Duration::from_secs(2));
    }
    for queue in agent.metrics.counters().snapshot() {
        tracing::info!("{}", queue.line());
    }
    tracing::info!("shutdown complete");
    Ok(())
}

fn learner_config(config: &Config) -> LearnerConfig {
    LearnerConfig {
        min_ttl_secs: config.fqdn.min_ttl_secs,
        max_addresses_per_name: config.fqdn.max_addresses_per_name,
        max_addresses: config.fqdn.max_addresses,
    }
}

/// Starts the status API. A socket that was configured must work; the
/// default one is best effort (another agent on the host, e.g. in another
/// network namespace, may hold it): the agent then runs without it.
fn serve_status(
    configured: Option<&Path>,
    status: Arc<AgentStatus>,
) -> Result<Option<crate::status::StatusServer>, AgentError> {
    let path = configured.unwrap_or(Path::new(crate::status::DEFAULT_SOCKET));
    match crate::status::serve(path, status) {
        Ok(server) => {
            tracing::info!(path = %path.display(), "status socket");
            Ok(Some(server))
        }
        Err(error) if configured.is_none() => {
            tracing::warn!(%error, "status API off");
            Ok(None)
        }
        Err(error) => Err(error.into()),
    }
}

fn load_config(args: &RunArgs) -> Result<Config, ConfigError> {
    let file = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.clone(),
                source,
            })?;
            Settings::from_yaml(path, &text)?
        }
        None => Settings::default(),
    };
    let defaults = MachineDefaults {
        node_name: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default(),
        queues: std::thread::available_parallelism()
            .map_or(1, |n| u32::try_from(n.get()).unwrap_or(1)),
    };
    file.overlay(args.settings()).resolve(&defaults)
}

/// The local Node: configured name, labels and addresses, plus every
/// address on the namespace's interfaces.
fn local_node(config: &Config) -> Result<LocalNode, AgentError> {
    let output = std::process::Command::new("ip")
        .args(["-j", "addr", "show"])
        .output()
        .map_err(|e| AgentError::Addresses(format!("ip -j addr show: {e}")))?;
    if !output.status.success() {
        return Err(AgentError::Addresses(format!(
            "ip -j addr show: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    let found = parse_ip_addr_json(&String::from_utf8_lossy(&output.stdout))
        .map_err(AgentError::Addresses)?;
    let mut addresses = config.node_addresses.clone();
    for address in found {
        if !addresses.contains(&address) {
            addresses.push(address);
        }
    }
    Ok(LocalNode {
        name: config.node_name.clone(),
        labels: config.node_labels.clone(),
        addresses,
    })
}

/// Addresses in `ip -j addr show` output.
fn parse_ip_addr_json(text: &str) -> Result<Vec<IpAddr>, String> {
    #[derive(serde::Deserialize)]
    struct Link {
        #[serde(default)]
        addr_info: Vec<AddrInfo>,
    }
    #[derive(serde::Deserialize)]
    struct AddrInfo {
        local: Option<IpAddr>,
    }
    let links: Vec<Link> = serde_json::from_str(text).map_err(|e| e.to_string())?;
    Ok(links
        .iter()
        .flat_map(|l| &l.addr_info)
        .filter_map(|a| a.local)
        .collect())
}

/// Where policies and inventory come from.
enum Policies {
    /// A directory of YAML files: an invalid change is rejected whole.
    Directory(PathBuf),
    /// The API server: invalid objects are skipped by the source, which
    /// publishes admitted snapshots; before the first one, the ruleset is
    /// empty (only privileged rules and the node's own defaults apply).
    Kubernetes(crate::source::kube::KubeSource),
}

impl Policies {
    fn load(&self, node: &LocalNode) -> Result<Ruleset, Vec<Problem>> {
        Ok(match self {
            Policies::Directory(dir) => Ruleset::compile(
                &crate::source::load_and_validate(std::slice::from_ref(dir))?,
                node,
            ),
            Policies::Kubernetes(source) => match source.latest().get() {
                Some(admitted) => Ruleset::compile(&admitted.snapshot, node),
                None => Ruleset::compile(&crate::model::Snapshot::default(), node),
            },
        })
    }
}

/// What wakes the run loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    PolicyChanged,
    Reload,
    Shutdown,
}

fn listen_for_signals(events: Sender<Event>) -> Result<(), AgentError> {
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])
        .map_err(AgentError::Signals)?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                let event = if signal == SIGHUP {
                    Event::Reload
                } else {
                    Event::Shutdown
                };
                if events.send(event).is_err() {
                    return;
                }
            }
        })
        .map_err(AgentError::Signals)?;
    Ok(())
}

struct Agent {
    config: Config,
    policies: Policies,
    /// The policy directory's watch (standalone mode).
    watch: Option<PolicyWatch>,
    kernel: Kernel,
    /// The ruleset in force: what the workers decide by.
    policy: Arc<ArcSwap<Ruleset>>,
    /// A valid ruleset waiting for the kernel to queue what it needs; a
    /// newer one replaces it.
    pending: Option<Arc<Ruleset>>,
    mirror: Arc<FqdnTable>,
    /// The DNS reply worker, started with the first ruleset that has FQDN
    /// selectors (its queue is not bound before).
    dns: Option<DnsWorker>,
    /// Generation of the ruleset in force.
    generation: u64,
    /// Last generation logged as `ruleset applied` (kernel fully matching).
    announced: u64,
    retry: Retry,
    metrics: Arc<Metrics>,
    status: Arc<AgentStatus>,
}

impl Agent {
    /// Starts the DNS reply worker if `selectors` (those the kernel is
    /// about to snoop DNS for) is not empty and it is not running yet.
    /// Called before the rules that queue DNS replies are installed.
    fn start_dns_worker(
        &mut self,
        selectors: &[FqdnPattern],
    ) -> Result<(), crate::workers::QueueError> {
        if self.dns.is_some() || selectors.is_empty() {
            return Ok(());
        }
        let worker = DnsWorker::spawn(
            DnsWorkerConfig {
                queue: self.config.fqdn.dns_queue,
                trusted_servers: self.config.fqdn.trusted_servers.clone(),
            },
            Arc::clone(&self.mirror),
            Arc::clone(&self.metrics),
        )?;
        tracing::info!(queue = worker.queue, "dns worker started");
        self.dns = Some(worker);
        Ok(())
    }

    /// Publishes the ruleset in force as the current generation.
    fn put_in_force(&self) {
        let ruleset = self.policy.load();
        self.metrics.ruleset_applied(
            self.generation,
            ruleset.policies().len(),
            ruleset.rule_count(),
        );
        self.status.applied(self.generation);
    }

    /// Brings the kernel and the ruleset in force to the desired state: a
    /// pending ruleset is put in force once the bridge to it is installed,
    /// then the kernel is narrowed to the ruleset in force. Every call
    /// starts from the installed state, so it is also the retry. Returns
    /// whether anything was written.
    fn converge(&mut self) -> Result<bool, ApplyError> {
        let mut changed = false;
        if let Some(next) = self.pending.clone() {
            let current = self.policy.load_full();
            // The mirror learns for both rulesets' selectors while the
            // bridge is in place; lookups are by selector, so the ruleset
            // in force keeps finding its own.
            let selectors = transition::union(current.fqdn_patterns(), next.fqdn_patterns());
            self.mirror.reselect(&selectors);
            if let Err(error) = self.start_dns_worker(&selectors) {
                // The DNS rules bypass a queue nobody reads: replies
                // pass unlearned, FQDN rules match nothing new.
                tracing::error!(%error, "dns worker failed to start");
            }
            let bridge = transition::bridge(
                |enforced, fqdn| datapath::desired(&self.config, enforced, fqdn),
                (current.enforced(), current.fqdn_patterns()),
                (next.enforced(), next.fqdn_patterns()),
            );
            changed |= self.kernel.reconcile(&bridge)?;
            self.policy.store(Arc::clone(&next));
            self.pending = None;
            self.mirror.reselect(next.fqdn_patterns());
            self.generation += 1;
            self.put_in_force();
            self.reloaded(ReloadResult::Applied, None);
        }
        let ruleset = self.policy.load();
        let desired = datapath::desired(&self.config, ruleset.enforced(), ruleset.fqdn_patterns());
        changed |= self.kernel.reconcile(&desired)?;
        Ok(changed)
    }

    /// One attempt to converge, with its logging and bookkeeping; a
    /// failure schedules the retry. Returns the error, if any.
    fn sync(&mut self) -> Option<ApplyError> {
        match self.converge() {
            Ok(changed) => {
                if let Some(recovered) = self.retry.succeeded() {
                    tracing::info!(
                        "datapath apply recovered after {} attempts",
                        recovered.attempts
                    );
                }
                self.metrics.datapath_behind(false);
                self.status.datapath(None);
                if self.announced != self.generation {
                    if self.generation == 1 {
                        self.metrics.started();
                    }
                    self.announced = self.generation;
                    tracing::info!(generation = self.generation, changed, "ruleset applied");
                }
                None
            }
            Err(error) => {
                let delay = self.retry.failed(Instant::now());
                tracing::error!("datapath apply failed: {error}; retrying in {delay:?}");
                self.metrics.datapath_apply_failed(&error);
                self.metrics.datapath_behind(true);
                self.status.datapath(Some(error.to_string()));
                Some(error)
            }
        }
    }

    /// Records how a reload ended.
    fn reloaded(&self, result: ReloadResult, error: Option<String>) {
        self.metrics.reload(result);
        self.status.reloaded(error);
    }

    /// Validates and compiles the policy directory again and converges to
    /// it: the new ruleset replaces any pending one and is tried at once
    /// (workers pick it up with their next packet once the kernel is
    /// ready for it). An invalid or missing directory leaves everything as
    /// it was.
    fn reload(&mut self) {
        if let Some(watch) = &mut self.watch {
            match watch.refresh() {
                Ok(Refresh::Unchanged) => {}
                Ok(Refresh::Rewatched) => tracing::info!("policy directory watch re-established"),
                Ok(Refresh::Missing) => {
                    tracing::warn!("policy directory missing; keeping the ruleset in force")
                }
                Err(error) => tracing::error!(%error, "policy directory not watched"),
            }
        }
        let node = match local_node(&self.config) {
            Ok(node) => node,
            Err(error) => {
                tracing::error!(%error, "reload failed");
                self.reloaded(ReloadResult::Failed, Some(error.to_string()));
                return;
            }
        };
        match self.policies.load(&node) {
            Ok(ruleset) => {
                self.pending = Some(Arc::new(ruleset));
                if let Some(error) = self.sync() {
                    if self.pending.is_some() {
                        self.reloaded(ReloadResult::Failed, Some(error.to_string()));
                    }
                }
            }
            Err(problems) => {
                let text = problems
                    .iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join("; ");
                tracing::error!("reload rejected: {text}");
                self.reloaded(ReloadResult::Rejected, Some(format!("rejected: {text}")));
            }
        }
    }

    /// Handles events until a shutdown is asked for; retries a failed
    /// apply when it is due.
    fn serve(&mut self, inbox: &Receiver<Event>) {
        loop {
            let received = match self.retry.wait(Instant::now()) {
                None => inbox.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(wait) => inbox.recv_timeout(wait),
            };
            let event = match received {
                Ok(event) => event,
                Err(RecvTimeoutError::Timeout) => {
                    self.sync();
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return,
            };
            let event = match event {
                Event::PolicyChanged => settle(inbox),
                other => other,
            };
            match event {
                Event::Shutdown => return,
                Event::Reload | Event::PolicyChanged => self.reload(),
            }
        }
    }
}

/// Waits until the policy directory has been quiet for [`DEBOUNCE`] (at
/// most [`DEBOUNCE_MAX`]); a shutdown or SIGHUP meanwhile wins.
fn settle(inbox: &Receiver<Event>) -> Event {
    let deadline = Instant::now() + DEBOUNCE_MAX;
    loop {
        let wait = DEBOUNCE.min(deadline.saturating_duration_since(Instant::now()));
        match inbox.recv_timeout(wait) {
            Ok(Event::PolicyChanged) if Instant::now() < deadline => continue,
            Ok(Event::PolicyChanged) | Err(RecvTimeoutError::Timeout) => {
                return Event::PolicyChanged
            }
            Ok(other) => return other,
            Err(RecvTimeoutError::Disconnected) => return Event::Shutdown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    #[test]
    fn flags_parse_into_settings() {
        let cli = Cli::try_parse_from([
            "tollgate",
            "--policies",
            "/p",
            "--node-labels",
            "role=cp,zone=a",
            "--node-address",
            "10.0.0.1",
            "--node-address",
            "fd00::1",
            "--interfaces",
            "veth*,eth0",
            "--queues",
            "2",
            "--mark-mask",
            "0x30000",
            "--fail-mode",
            "open",
            "--privileged",
            "10.0.0.0/24,tcp/22",
            "--privileged",
            "fd00::/64",
            "--l7-deny-response",
            "reset",
        ])
        .unwrap();
        let settings = cli.run.settings();
        assert_eq!(settings.node_labels.unwrap()["zone"], "a");
        assert_eq!(settings.node_addresses.unwrap().len(), 2);
        assert_eq!(settings.interfaces.unwrap(), ["veth*", "eth0"]);
        assert_eq!(settings.fail_mode, Some(FailMode::Open));
        assert_eq!(settings.privileged.unwrap().len(), 2);
        assert_eq!(settings.l7_deny_response, Some(L7DenyResponse::Reset));
        assert_eq!(settings.mark_mask, Some(MaskValue::Text("0x30000".into())));
        assert!(settings.node_name.is_none() && settings.queue_base.is_none());
        assert!(Cli::try_parse_from(["tollgate", "--policies", "/p", "--fail-mode", "x"]).is_err());
    }

    #[test]
    fn kubernetes_mode_replaces_the_policy_directory() {
        let cli = Cli::try_parse_from(["tollgate", "--kubernetes", "--kubeconfig", "/k"]).unwrap();
        assert!(cli.run.kube.kubernetes && cli.run.policies.is_none());
        assert!(Cli::try_parse_from(["tollgate"]).is_err());
        assert!(Cli::try_parse_from(["tollgate", "--kubernetes", "--policies", "/p"]).is_err());
        assert!(
            Cli::try_parse_from(["tollgate", "--policies", "/p", "--kubeconfig", "/k"]).is_err()
        );
    }

    #[test]
    fn interface_addresses_from_ip_json() {
        let json = r#"[{"ifindex":1,"ifname":"lo","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8},{"family":"inet6","local":"::1","prefixlen":128}]},
                      {"ifindex":2,"ifname":"veth0","addr_info":[]},{"ifindex":3,"ifname":"dummy0"}]"#;
        assert_eq!(
            parse_ip_addr_json(json).unwrap(),
            vec![
                "127.0.0.1".parse::<IpAddr>().unwrap(),
                "::1".parse().unwrap()
            ]
        );
        assert!(parse_ip_addr_json("not json").is_err());
    }

    #[test]
    fn settle_waits_for_quiet_and_lets_shutdown_win() {
        let (tx, rx) = mpsc::channel();
        tx.send(Event::PolicyChanged).unwrap();
        assert_eq!(settle(&rx), Event::PolicyChanged);
        assert!(rx.try_recv().is_err(), "burst drained");
        tx.send(Event::PolicyChanged).unwrap();
        tx.send(Event::Shutdown).unwrap();
        assert_eq!(settle(&rx), Event::Shutdown);
    }
}
