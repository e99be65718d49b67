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

use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use crate::cli::RunArgs;
use crate::compile::{LocalNode, Ruleset};
use crate::config::{AgentConfig, ConfigError, MachineDefaults};
use crate::datapath::{
    self, reconcile, teardown, transition, ApplyError, Backoff, DatapathError, Iptables, Kernel,
    Retry,
};
use crate::fqdn::FqdnPattern;
use crate::source::watch::{Directory, WatchError};
use crate::source::{Debounce, Source};
use crate::status::{AgentFacts, AgentStatus};
use crate::telemetry::{Metrics, ReloadResult};
use crate::validate::Problem;
use crate::workers::{
    parse_kernel_counters, DnsStats, DnsWorker, DnsWorkerConfig, FqdnMirror, Observers, Worker,
    WorkerConfig, PROC_QUEUES,
};
use crate::workers::{L7Stats, L7Worker, L7WorkerConfig};

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
    for (flat, nested) in &config.deprecated {
        tracing::warn!("configuration key {flat} is deprecated: write {nested}");
    }
    let config = config.config;
    let node = local_node(&config)?;
    let kernel = Iptables::detect()?;
    tracing::info!(
        backend = ?kernel.backend(),
        queues = %format!("{}-{}", config.queues.range().first(), config.queues.range().last()),
        fail_mode = %config.datapath.fail_mode,
        mark_mask = %format!("{:#x}", config.datapath.mark_mask.mask),
        "starting"
    );

    // Signals and directory changes are set up before anything is
    // installed, so a SIGTERM at any point after install tears down.
    let metrics = Arc::new(Metrics::new());
    let (events, inbox) = mpsc::channel();
    listen_for_signals(events.clone())?;
    let mut source: Box<dyn Source> = match &args.policies {
        Some(dir) => Box::new(Directory::start(dir, move || {
            let _ = events.send(Event::PolicyChanged);
        })?),
        None => {
            let connection = args.kube.connection();
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
            Box::new(source)
        }
    };
    let ruleset = load(source.as_mut(), &node).map_err(AgentError::InvalidPolicies)?;

    let audit = match &config.audit.file {
        Some(path) => {
            let sink = crate::audit::writer::spawn(path, &config.audit, Arc::clone(&metrics))?;
            tracing::info!(path = %path.display(), rate = config.audit.rate, burst = config.audit.burst, "audit log");
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
    let (mirror, restored) = FqdnMirror::restore(
        ruleset.fqdn_patterns().to_vec(),
        config.fqdn.learner(),
        &learned,
    );
    let mirror = Arc::new(mirror);
    tracing::info!(
        selectors = ruleset.fqdn_patterns().len(),
        restored,
        "fqdn mirror restored"
    );

    let patterns = ruleset.fqdn_patterns().to_vec();
    let policy = Arc::new(ArcSwap::from_pointee(ruleset));
    let workers = config
        .queues
        .range()
        .iter()
        .map(|queue| {
            Worker::spawn(
                WorkerConfig {
                    queue,
                    marks: config.datapath.mark_mask,
                    fail_mode: config.datapath.fail_mode,
                },
                Arc::clone(&policy),
                Arc::clone(&mirror),
                observers.clone(),
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let l7_worker = L7Worker::spawn(
        L7WorkerConfig {
            marks: config.datapath.mark_mask,
            fail_mode: config.datapath.fail_mode,
            l7: config.l7,
        },
        Arc::clone(&policy),
        Arc::clone(&mirror),
        observers,
    )?;
    let status = Arc::new(AgentStatus::new(
        AgentFacts {
            node_name: config.node.name.clone(),
            fail_mode: config.datapath.fail_mode,
            audit_log: config.audit.file.clone(),
            metrics_address: config.metrics.address.map(|a| a.to_string()),
        },
        Arc::clone(&policy),
        workers
            .iter()
            .map(|w| (w.queue, Arc::clone(&w.stats)))
            .collect(),
    ));
    let _status_server = serve_status(config.status.socket.as_deref(), Arc::clone(&status))?;
    if let Some(address) = config.metrics.address {
        let bound = crate::telemetry::http::serve(address, Arc::clone(&metrics))?;
        tracing::info!(address = %bound, "metrics listening");
    }

    let mut agent = Agent {
        config,
        source,
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

    teardown(&mut agent.kernel)?;
    if let Some(audit) = &audit {
        audit.flush(Duration::from_secs(2));
    }
    log_queue_stats(&workers);
    log_l7_stats(l7_worker.queue, &l7_worker.stats);
    if let Some(dns) = &agent.dns {
        log_dns_stats(dns.queue, &dns.stats, &agent.mirror);
    }
    tracing::info!("shutdown complete");
    Ok(())
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

fn load_config(args: &RunArgs) -> Result<crate::config::Loaded, ConfigError> {
    let file = match &args.config {
        Some(path) => Some((
            path,
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.clone(),
                source,
            })?,
        )),
        None => None,
    };
    let machine = MachineDefaults {
        node_name: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default(),
        queues: std::thread::available_parallelism()
            .map_or(1, |n| u32::try_from(n.get()).unwrap_or(1)),
    };
    let file = file
        .as_ref()
        .map(|(path, text)| (path.as_path(), text.as_str()));
    AgentConfig::load(&machine, file, &args.settings())
}

/// The local Node: configured name, labels and addresses, plus every
/// address on the namespace's interfaces.
fn local_node(config: &AgentConfig) -> Result<LocalNode, AgentError> {
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
    let mut addresses = config.node.addresses.clone();
    for address in found {
        if !addresses.contains(&address) {
            addresses.push(address);
        }
    }
    Ok(LocalNode {
        name: config.node.name.clone(),
        labels: config.node.labels.clone(),
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

/// The ruleset of the source's latest snapshot.
fn load(source: &mut dyn Source, node: &LocalNode) -> Result<Ruleset, Vec<Problem>> {
    source
        .latest()
        .map(|snapshot| Ruleset::compile(&snapshot, node))
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
    config: AgentConfig,
    source: Box<dyn Source>,
    kernel: Iptables,
    /// The ruleset in force: what the workers decide by.
    policy: Arc<ArcSwap<Ruleset>>,
    /// A valid ruleset waiting for the kernel to queue what it needs; a
    /// newer one replaces it.
    pending: Option<Arc<Ruleset>>,
    mirror: Arc<FqdnMirror>,
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
            let queues = self.config.queue_numbers();
            self.mirror.reselect(&selectors);
            if let Err(error) = self.start_dns_worker(&selectors) {
                // The DNS rules bypass a queue nobody reads: replies
                // pass unlearned, FQDN rules match nothing new.
                tracing::error!(%error, "dns worker failed to start");
            }
            let bridge = transition::bridge(
                |enforced, fqdn| datapath::desired(&self.config.datapath, &queues, enforced, fqdn),
                (current.enforced(), current.fqdn_patterns()),
                (next.enforced(), next.fqdn_patterns()),
            );
            changed |= reconcile(&mut self.kernel, &bridge)?;
            self.policy.store(Arc::clone(&next));
            self.pending = None;
            self.mirror.reselect(next.fqdn_patterns());
            self.generation += 1;
            self.put_in_force();
            self.reloaded(ReloadResult::Applied, None);
        }
        let ruleset = self.policy.load();
        let desired = datapath::desired(
            &self.config.datapath,
            &self.config.queue_numbers(),
            ruleset.enforced(),
            ruleset.fqdn_patterns(),
        );
        changed |= reconcile(&mut self.kernel, &desired)?;
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
        let node = match local_node(&self.config) {
            Ok(node) => node,
            Err(error) => {
                tracing::error!(%error, "reload failed");
                self.reloaded(ReloadResult::Failed, Some(error.to_string()));
                return;
            }
        };
        match load(self.source.as_mut(), &node) {
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

/// Waits until the sources have been quiet for a while (a
/// [`Debounce`]); a shutdown or SIGHUP meanwhile wins.
fn settle(inbox: &Receiver<Event>) -> Event {
    let mut debounce = Debounce::default();
    debounce.changed(Instant::now());
    loop {
        let now = Instant::now();
        if debounce.take(now) {
            return Event::PolicyChanged;
        }
        let wait = debounce.due().map_or(Duration::ZERO, |due| due - now);
        match inbox.recv_timeout(wait) {
            Ok(Event::PolicyChanged) => debounce.changed(Instant::now()),
            Err(RecvTimeoutError::Timeout) => return Event::PolicyChanged,
            Ok(other) => return other,
            Err(RecvTimeoutError::Disconnected) => return Event::Shutdown,
        }
    }
}

fn log_queue_stats(workers: &[Worker]) {
    let kernel = std::fs::read_to_string(PROC_QUEUES)
        .map(|text| parse_kernel_counters(&text))
        .unwrap_or_default();
    for worker in workers {
        let s = &worker.stats;
        let k = kernel.iter().find(|k| k.queue == worker.queue);
        tracing::info!(
            queue = worker.queue,
            allowed = s.allowed.load(Ordering::Relaxed),
            dropped = s.dropped.load(Ordering::Relaxed),
            rejected = s.rejected.load(Ordering::Relaxed),
            malformed = s.malformed.load(Ordering::Relaxed),
            overflows = s.overflows.load(Ordering::Relaxed),
            verdict_errors = s.verdict_errors.load(Ordering::Relaxed),
            kernel_queue_dropped = k.map_or(0, |k| k.queue_dropped),
            kernel_user_dropped = k.map_or(0, |k| k.user_dropped),
            "queue stats"
        );
    }
}

fn log_l7_stats(queue: u16, s: &L7Stats) {
    tracing::info!(
        queue,
        segments = s.segments.load(Ordering::Relaxed),
        flows = s.flows.load(Ordering::Relaxed),
        requests_allowed = s.requests_allowed.load(Ordering::Relaxed),
        requests_denied = s.requests_denied.load(Ordering::Relaxed),
        resets = s.resets.load(Ordering::Relaxed),
        held = s.held.load(Ordering::Relaxed),
        deferred = s.deferred.load(Ordering::Relaxed),
        deferred_evicted = s.deferred_evicted.load(Ordering::Relaxed),
        malformed = s.malformed.load(Ordering::Relaxed),
        inject_errors = s.inject_errors.load(Ordering::Relaxed),
        overflows = s.overflows.load(Ordering::Relaxed),
        verdict_errors = s.verdict_errors.load(Ordering::Relaxed),
        "L7 queue stats"
    );
}

fn log_dns_stats(queue: u16, s: &DnsStats, mirror: &FqdnMirror) {
    let load = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    tracing::info!(
        queue,
        packets = load(&s.packets),
        parsed = load(&s.parsed),
        failed = load(&s.failed),
        untrusted = load(&s.untrusted),
        tcp_untracked = load(&s.tcp_untracked),
        tcp_gaps = load(&s.tcp_gaps),
        oversized = load(&s.oversized),
        learned = load(&s.learned),
        refreshed = load(&s.refreshed),
        evicted = load(&s.evicted),
        expired = mirror.counters().expired,
        ipset_errors = load(&s.ipset_errors),
        overflows = load(&s.overflows),
        verdict_errors = load(&s.verdict_errors),
        "dns stats"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

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
