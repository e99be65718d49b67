//! `tollgate run`, wired: [`run`] takes the namespace's agent lock
//! ([`lock`]), starts the sources and servers, waits for the source's
//! first complete snapshot while the kernel keeps what it holds (an
//! earlier agent's state, the `startupPolicy` state, or nothing), then
//! starts the workers and reconciles by diff, serves events until
//! SIGTERM/SIGINT, and stops leaving the kernel state in force (unless
//! `datapath.cleanupOnExit`). [`cleanup`] is `tollgate cleanup`. It
//! decides nothing: what is in force and what the kernel gets is
//! `converge`'s, host facts `host`'s, events `signals`', the FQDN
//! table and DNS worker `fqdn`'s.

mod antispoof;
mod bridge;
mod compiler;
mod converge;
mod counters;
mod error;
mod fqdn;
mod host;
mod links;
mod lock;
mod serve;
mod signals;
mod warnings;

use std::path::Path;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use crate::cli::RunArgs;
use crate::compile::{compile, LocalNode};
use crate::config::{AgentConfig, ConfigError, Loaded, Peers, StartupPolicy};
use crate::datapath::cache::Generations;
use crate::datapath::{
    self, adopted, owns_anything, reconcile, teardown, Backoff, Changes, Iptables, Kernel,
};
use crate::model::Snapshot;
use crate::ruleset::Ruleset;
use crate::source::docker::{DockerHealth, DockerSource};
use crate::source::kube::{KubeSource, PeerGroups, SourceState};
use crate::source::watch::Directory;
use crate::source::Source;
use crate::status::{AgentFacts, AgentStatus, StatusServer};
use crate::telemetry::Metrics;
use crate::validate::Inventory;
use crate::workers::audit::AuditSink;
use crate::workers::observe::ObserveSink;
use crate::workers::{Observers, Worker};

pub use counters::{AgentCounters, ReloadResult, Sets};
pub use error::AgentError;
pub use lock::{LockError, NamespaceLock};

use converge::Reconciler;
use fqdn::Fqdn;
use signals::Event;

/// Runs the agent until SIGTERM or SIGINT.
pub fn run(args: RunArgs) -> anyhow::Result<()> {
    crate::sys::return_large_allocations();
    args.log.install()?;
    let (starting, inbox) = start(&args)?;
    match starting.wait_for_snapshot(&inbox)? {
        Waited::Ready(mut running) => {
            let served = running.serve(&inbox);
            running.stop()?;
            Ok(served?)
        }
        Waited::Stopped(starting) => Ok(starting.stop()?),
    }
}

/// `tollgate cleanup`: removes every chain, jump and set tollgate owns in
/// the current network namespace, learned sets included, and nothing
/// else. While an agent holds the namespace's lock it is refused, or with
/// `wait` it waits for the agent to end (told its pid through `waiting`)
/// and removes the state the moment it has. Returns what was removed and
/// how long the removal took from the moment the lock was free.
pub fn cleanup(
    wait: bool,
    waiting: impl FnMut(Option<u32>),
) -> Result<(Changes, std::time::Duration), AgentError> {
    let _lock = if wait {
        NamespaceLock::acquire_waiting(waiting)?
    } else {
        NamespaceLock::acquire()?
    };
    #[allow(clippy::disallowed_methods)] // how long the removal took, reported.
    let free = std::time::Instant::now();
    let mut kernel = Iptables::detect()?;
    let removed = teardown(&mut kernel)?;
    Ok((removed, free.elapsed()))
}

/// What every phase of the agent holds: the lock, the configuration, the
/// source, the kernel and the reporting side.
struct Base {
    /// Held until the process ends.
    _lock: NamespaceLock,
    config: Arc<AgentConfig>,
    source: Box<dyn Source>,
    kernel: Iptables,
    metrics: Arc<Metrics>,
    /// The agent's own counters (registered with `metrics`).
    counters: Arc<AgentCounters>,
    status: Arc<AgentStatus>,
    audit: Option<AuditSink>,
    /// Where the workers hand their decisions for `tollgate observe`.
    observe: ObserveSink,
    /// Removes the socket when the agent stops.
    _status_server: Option<StatusServer>,
    /// The verdict cache generation of each ruleset put in force.
    generations: Generations,
    /// The DNS worker's counters, registered at the start.
    dns_counters: Arc<crate::workers::DnsCounters>,
    /// The anti-spoofing guards.
    antispoof: Box<antispoof::AntiSpoof>,
    /// What the policies probably do not mean, logged and published.
    warnings: warnings::Warnings,
    /// Kept across reloads: a change recompiles what it touches.
    compiler: compiler::Compiler,
    /// Kubernetes mode: the source reloads at the cluster's changes, most
    /// of which decide nothing here, and never rejects a snapshot, so a
    /// reload the compiler builds no ruleset for offers none. A policy
    /// directory's reloads (the Docker Engine's inventory beside it
    /// included) are the operator's edits: each is answered with a
    /// ruleset applied, and one after a rejected edit clears the error.
    keeps_unchanged: bool,
}

/// The agent before its source's first complete snapshot. No queue is
/// bound yet: an incomplete snapshot must decide nothing, and a queue
/// without a reader is what the kernel state already means while no agent
/// runs — fail-closed drops new connections (the client's SYN retransmit
/// connects once the agent is ready), fail-open passes them, as the
/// operator chose. Workers bound early and answering "drop" would need a
/// ruleset of their own and override a fail-open choice; binding late
/// needs neither.
struct Starting {
    base: Base,
    /// What the shared ruleset slot holds until then (an empty ruleset,
    /// for the status API); the workers get it with the first snapshot.
    policy: Arc<ArcSwap<Ruleset>>,
    /// Whether the `startupPolicy` state was installed (or found).
    startup_done: bool,
}

/// How waiting for the first snapshot ended.
enum Waited {
    Ready(Box<Running>),
    Stopped(Box<Starting>),
}

/// The running agent.
struct Running {
    base: Base,
    reconciler: Reconciler,
    fqdn: Fqdn,
    /// When the periodic checks are next due: drift (when on), bridged
    /// traffic, the verdict cache's hits.
    checks_due: Instant,
    /// Why bridged traffic bypasses iptables, as last seen
    /// ([`bridge::unseen`]); checked at start and with the periodic checks.
    bridged_unseen: Option<String>,
    /// The verdict cache's hits counted from the counters of the chains
    /// that carry out cached verdicts ([`datapath::cache::hit_counters`]).
    cache_hits: datapath::cache::HitCount,
    /// The workers, until their queues are bound ([`Running::bind`]).
    unbound: Option<Workers>,
    /// Why the workers could not be started after the agent's start: the
    /// run loop stops with it.
    fatal: Option<AgentError>,
    /// A ruleset was replaced (or the first built) since the heap's free
    /// pages were last handed back ([`crate::sys::release_free_memory`],
    /// with the periodic checks).
    replaced: bool,
}

/// What the workers decide by and report to, until they are started.
struct Workers {
    policy: Arc<ArcSwap<Ruleset>>,
    mirror: Arc<crate::fqdn::FqdnTable>,
    observers: Observers,
}

fn start(args: &RunArgs) -> Result<(Starting, Receiver<Event>), AgentError> {
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
    // Before the kernel is read or written: one agent per namespace.
    let lock = NamespaceLock::acquire()?;
    let Loaded { config, deprecated } = read_config(args)?;
    for (flat, nested) in deprecated {
        tracing::warn!("configuration key {flat} is deprecated: write {nested}");
    }
    let config = Arc::new(config);
    let node = host::local_node(&config.node)?;
    let kernel = Iptables::detect()?;
    let queues = config.queues.range();
    tracing::info!(
        backend = ?kernel.backend(),
        queues = %format!("{}-{}", queues.first(), queues.last()),
        fail_mode = %config.datapath.fail_mode,
        startup_policy = %config.datapath.startup_policy,
        mark_mask = %format!("{:#x}", config.datapath.mark_mask.mask),
        "starting"
    );

    let metrics = Arc::new(Metrics::new());
    let sets = Sets::registered(&metrics);
    let dns_counters = fqdn::register_dns_counters(&config, &metrics);
    let (events, inbox) = mpsc::channel();
    signals::listen(events.clone()).map_err(AgentError::Signals)?;
    let (source, kubernetes, docker) = open_source(args, &config, events, &sets)?;

    let audit = match &config.audit.file {
        Some(path) => {
            let sink = crate::workers::audit::spawn(path, &config.audit, sets.audit)?;
            tracing::info!(path = %path.display(), rate = config.audit.rate, burst = config.audit.burst, "audit log");
            Some(sink)
        }
        None => None,
    };
    let policy = Arc::new(ArcSwap::from_pointee(compile(&Snapshot::default(), &node)));
    let (observe, hub) =
        crate::workers::observe::spawn(Arc::clone(&sets.observe)).map_err(AgentError::Observe)?;
    let status = Arc::new(AgentStatus::new(
        AgentFacts {
            node_name: config.node.name.clone(),
            fail_mode: config.datapath.fail_mode,
            privileged: config.datapath.privileged.clone(),
            audit_log: config.audit.file.clone(),
            metrics_address: config.metrics.address.map(|a| a.to_string()),
            config: format!("{config:#?}"),
            kernel: Some(kernel),
        },
        Arc::clone(&policy),
        Arc::clone(&metrics),
    ));
    status.observe_hub(hub);
    let compiler = match kubernetes.as_ref().and_then(|k| k.peers()) {
        Some(peers) => compiler::Compiler::controller(peers.clone()),
        None => compiler::Compiler::default(),
    };
    if let Some(state) = kubernetes {
        status.kubernetes_source(state);
    }
    if let Some(docker) = docker {
        status.inventory_source(Arc::new(move || docker.describe()));
    }
    let status_server = serve_status(config.status.socket.as_deref(), Arc::clone(&status))?;
    if let Some(address) = config.metrics.address {
        let bound =
            crate::telemetry::http::serve(address, Arc::clone(&metrics), Arc::clone(&status) as _)?;
        tracing::info!(address = %bound, "metrics listening");
    }
    let installed = kernel.installed()?;
    let found = owns_anything(&installed);
    if found {
        tracing::info!(
            "adopting the kernel state an earlier agent left: it stays as it is until the first complete snapshot"
        );
    }
    let cache = &config.verdict_cache;
    let generations = Generations::new(cache.enabled(), cache.timeout_seconds, cache.max_entries);
    // Files mode: the inventory is the operator's, so it may name an
    // endpoint's interface (a Pod's owner writes its annotations).
    let named_interfaces = args.policies.is_some() && !config.docker.enabled;
    let antispoof = Box::new(antispoof::AntiSpoof::new(&config, named_interfaces));
    let keeps_unchanged = args.policies.is_none();
    let warnings = match &args.policies {
        Some(dir) => warnings::Warnings::new(dir.clone(), Inventory::Whole, !config.docker.enabled),
        None => {
            let inventory = match config.kubernetes.peers {
                Peers::Watch => Inventory::Whole,
                Peers::Controller => Inventory::Local,
            };
            warnings::Warnings::new("kubernetes".into(), inventory, false)
        }
    };
    let starting = Starting {
        base: Base {
            _lock: lock,
            config,
            source,
            kernel,
            metrics,
            counters: sets.agent,
            status,
            audit,
            observe,
            _status_server: status_server,
            generations,
            dns_counters,
            antispoof,
            warnings,
            compiler,
            keeps_unchanged,
        },
        policy,
        startup_done: found,
    };
    Ok((starting, inbox))
}

impl Starting {
    /// Waits for the source's first complete snapshot, then enforces it.
    /// Without earlier kernel state a closed `startupPolicy` installs its
    /// state first. A shutdown meanwhile stops the agent.
    fn wait_for_snapshot(mut self, inbox: &Receiver<Event>) -> Result<Waited, AgentError> {
        loop {
            if let Some(snapshot) = self
                .base
                .source
                .latest()
                .map_err(AgentError::InvalidPolicies)?
            {
                // In controller mode the first ruleset also waits for
                // every group its rules use.
                let node = host::local_node(&self.base.config.node)?;
                let base = &mut self.base;
                if let Some(compiled) = base.compiler.compile(&snapshot, &node, &base.counters) {
                    return self
                        .enforce(&snapshot, node, compiled.ruleset)
                        .map(|r| Waited::Ready(Box::new(r)));
                }
            }
            if !self.startup_done {
                self.startup_done = true;
                self.install_startup_state();
            }
            match inbox.recv() {
                Ok(Event::Shutdown) | Err(_) => return Ok(Waited::Stopped(Box::new(self))),
                Ok(Event::PolicyChanged | Event::Settled | Event::Reload) => {}
            }
        }
    }

    /// The `startupPolicy` state, when the kernel holds nothing of
    /// tollgate's and the policy is closed.
    fn install_startup_state(&mut self) {
        let config = &self.base.config;
        if config.datapath.startup_policy == StartupPolicy::Open {
            tracing::warn!(
                "startup policy open: everything passes until the first complete snapshot"
            );
            return;
        }
        let state = datapath::startup(&config.datapath, &config.queue_numbers());
        match reconcile(&mut self.base.kernel, &state) {
            Ok(_) => tracing::info!(
                "startup policy closed: new connections through INPUT and FORWARD are dropped until the first complete snapshot (privileged rules, loopback and the node's own egress pass)"
            ),
            Err(error) => tracing::error!("installing the startup policy failed: {error}"),
        }
    }

    /// Puts the first complete snapshot in force: the workers start
    /// deciding by it, and the kernel moves to it from what it holds by
    /// the bridge of both. The workers bind their queues first, so that
    /// they read what the kernel already queues — unless the kernel an
    /// earlier agent left sends packets to one of those queues in another
    /// role (a changed queue layout: `queues`, `fqdn.dnsQueue`,
    /// `l7.queue`); then no queue is bound until the kernel is rewritten
    /// to this agent's layout, and its queues have no reader meanwhile,
    /// as while no agent ran.
    fn enforce(
        self,
        snapshot: &Arc<Snapshot>,
        node: LocalNode,
        compiled: Ruleset,
    ) -> Result<Running, AgentError> {
        let Starting {
            mut base, policy, ..
        } = self;
        base.antispoof.inventory(snapshot);
        base.antispoof
            .refresh(&base.kernel, &base.metrics, &base.counters, &base.status);
        let config = &base.config;
        base.warnings
            .reloaded(snapshot, &node, &compiled, &base.counters, &base.status);
        let groups = base.compiler.groups();
        let ruleset = base.generations.stamp(compiled, snapshot, groups, &node);
        base.status.compiled(Arc::clone(snapshot), &node);
        let found = base.kernel.installed()?;
        let crossed = datapath::roles::crossed(&found, &config.queue_numbers());
        let installed = adopted(&found);
        let fqdn = Fqdn::restore(
            &base.kernel,
            &ruleset,
            snapshot,
            config,
            &base.dns_counters,
            &base.metrics,
        )?;
        let mirror = Arc::clone(&fqdn.mirror);
        base.status.fqdn_table(Arc::clone(&mirror));
        let reconciler = Reconciler::adopting(policy, ruleset, installed, Backoff::DEFAULT);
        let policy = Arc::clone(reconciler.in_force());
        let cache = match config.verdict_cache.enabled() {
            true => Some(crate::workers::cache::spawn().map_err(AgentError::VerdictCache)?),
            false => None,
        };
        let observers = Observers {
            metrics: Arc::clone(&base.metrics),
            observe: base.observe.clone(),
            audit: base.audit.clone(),
            cache,
        };
        #[allow(clippy::disallowed_methods)] // the first drift check is due one interval from now.
        let checks_due = Instant::now() + Running::checks_every(config);
        let mut running = Running {
            base,
            reconciler,
            fqdn,
            checks_due,
            bridged_unseen: None,
            cache_hits: datapath::cache::HitCount::default(),
            unbound: Some(Workers {
                policy,
                mirror,
                observers,
            }),
            fatal: None,
            replaced: true,
        };
        if crossed.is_empty() {
            running.bind()?;
        } else {
            let crossed: Vec<String> = crossed.iter().map(ToString::to_string).collect();
            tracing::warn!(
                "the kernel state an earlier agent left queues packets to this agent's queues in another role ({}): no queue is bound until it is rewritten",
                crossed.join("; ")
            );
        }
        running.check_bridges();
        running.put_in_force();
        running.base.status.set_snapshot_complete(true);
        // A failed install is retried from the run loop: tearing down here
        // would remove what an earlier agent left enforcing.
        running.sync();
        match running.fatal.take() {
            Some(error) => Err(error),
            None => Ok(running),
        }
    }

    fn stop(self) -> Result<(), AgentError> {
        self.base.stop()
    }
}

fn read_config(args: &RunArgs) -> Result<Loaded, ConfigError> {
    let text = match &args.config {
        Some(path) => Some(
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.clone(),
                source,
            })?,
        ),
        None => None,
    };
    let file = args.config.as_deref().zip(text.as_deref());
    AgentConfig::load(&host::machine_defaults(), file, &args.settings())
}

/// The source, the Kubernetes source's state (for the status API) in
/// Kubernetes mode, and the Docker API's health when it is the inventory.
type Opened = (
    Box<dyn Source>,
    Option<SourceState>,
    Option<Arc<DockerHealth>>,
);

/// The policy directory (with the Docker inventory when
/// `docker.enabled`), or the Kubernetes API; each wakes the run loop
/// through `events` when something changed.
fn open_source(
    args: &RunArgs,
    config: &AgentConfig,
    events: Sender<Event>,
    sets: &Sets,
) -> Result<Opened, AgentError> {
    // The Docker inventory and the Kubernetes source settle their own
    // bursts (and a change of the groups held is whole): acted on at once.
    let settled = {
        let events = events.clone();
        move || {
            let _ = events.send(Event::Settled);
        }
    };
    let changed = move || {
        let _ = events.send(Event::PolicyChanged);
    };
    if config.docker.enabled {
        let dir = args
            .policies
            .as_deref()
            .ok_or(crate::source::docker::DockerError::NoPolicies)?;
        let policies = Directory::start(dir, config.policy_files, changed)?;
        let source = DockerSource::spawn(
            &config.docker,
            &config.node.name,
            policies,
            Arc::clone(&sets.docker),
            settled,
        )?;
        let health = source.health();
        return Ok((Box::new(source), None, Some(health)));
    }
    Ok(match &args.policies {
        Some(dir) => (
            Box::new(Directory::start(dir, config.policy_files, changed)?) as Box<dyn Source>,
            None,
            None,
        ),
        None => {
            sets.kube
                .enabled
                .store(1, std::sync::atomic::Ordering::Relaxed);
            let peers = (config.kubernetes.peers == Peers::Controller)
                .then(|| PeerGroups::new(config.node.name.clone(), Arc::clone(&sets.kube)));
            let source = KubeSource::spawn(
                args.kube.connection(),
                Some(config.node.name.clone()),
                peers,
                Arc::clone(&sets.kube),
                settled,
            )?;
            tracing::info!(
                "kubernetes source started; no decision before its first complete snapshot"
            );
            let state = source.state();
            (Box::new(source), Some(state), None)
        }
    })
}

/// Starts the status API. A socket that was configured must work; the
/// default one is best effort (another agent on the host, e.g. in another
/// network namespace, may hold it): the agent then runs without it.
fn serve_status(
    configured: Option<&Path>,
    status: Arc<AgentStatus>,
) -> Result<Option<StatusServer>, AgentError> {
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

impl Running {
    /// Starts the workers, once: the connection and L7 queues' (bound
    /// here, errors returned), the DNS worker when the ruleset in force
    /// has FQDN selectors, and the watchdog over them.
    fn bind(&mut self) -> Result<(), AgentError> {
        let Some(Workers {
            policy,
            mirror,
            observers,
        }) = self.unbound.take()
        else {
            return Ok(());
        };
        let config = &self.base.config;
        for queue in config.queues.range().iter() {
            Worker::spawn(
                queue,
                &config.datapath,
                Arc::clone(&policy),
                Arc::clone(&mirror),
                observers.clone(),
            )?;
        }
        crate::workers::l7::spawn(&config.datapath, &config.l7, policy, mirror, observers)?;
        let patterns = self.reconciler.in_force().load().fqdn_patterns().to_vec();
        self.fqdn.bind(&patterns)?;
        crate::workers::watchdog::spawn(
            Arc::clone(&self.base.metrics),
            config.health.stall_timeout(),
        )?;
        Ok(())
    }

    fn stop(self) -> Result<(), AgentError> {
        self.base.stop()
    }
}

impl Base {
    /// Leaves the kernel state in force (or, with
    /// `datapath.cleanupOnExit`, removes it), writes what the audit log
    /// holds, and logs the counters.
    fn stop(mut self) -> Result<(), AgentError> {
        if self.config.datapath.cleanup_on_exit {
            let removed = teardown(&mut self.kernel)?;
            tracing::info!(removed = %removed.summary(), "kernel state removed (datapath.cleanupOnExit)");
        } else {
            tracing::info!("kernel state left in force; `tollgate cleanup` removes it");
        }
        if let Some(audit) = &self.audit {
            audit.flush(Duration::from_secs(2));
        }
        for queue in self.metrics.counters().snapshot() {
            tracing::info!("{}", queue.line());
        }
        tracing::info!("shutdown complete");
        Ok(())
    }
}
