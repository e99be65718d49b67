//! `tollgate run`, wired: [`run`] starts the sources, workers, servers and
//! the first install, serves events until SIGTERM/SIGINT, and stops. It
//! decides nothing: what is in force and what the kernel gets is
//! `converge`'s, host facts `host`'s, events `signals`', the FQDN
//! table and DNS worker `fqdn`'s.
#![allow(clippy::disallowed_methods)] // the agent wires the edge: it reads the clock and starts threads.

mod converge;
mod error;
mod fqdn;
mod host;
mod serve;
mod signals;

use std::path::Path;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use crate::audit::AuditSink;
use crate::cli::RunArgs;
use crate::compile::{compile, LocalNode};
use crate::config::{AgentConfig, ConfigError, Loaded};
use crate::datapath::{teardown, Backoff, Iptables};
use crate::ruleset::Ruleset;
use crate::source::kube::KubeSource;
use crate::source::watch::Directory;
use crate::source::Source;
use crate::status::{AgentFacts, AgentStatus, StatusServer};
use crate::telemetry::Metrics;
use crate::validate::Problem;
use crate::workers::{Observers, Worker};

pub use error::AgentError;

use converge::Reconciler;
use fqdn::Fqdn;
use signals::Event;

/// Runs the agent until SIGTERM or SIGINT.
pub fn run(args: RunArgs) -> anyhow::Result<()> {
    args.log.install()?;
    let (mut running, inbox) = start(&args)?;
    running.serve(&inbox);
    Ok(running.stop()?)
}

/// The running agent.
struct Running {
    config: Arc<AgentConfig>,
    source: Box<dyn Source>,
    kernel: Iptables,
    reconciler: Reconciler,
    fqdn: Fqdn,
    metrics: Arc<Metrics>,
    status: Arc<AgentStatus>,
    audit: Option<AuditSink>,
    /// Removes the socket when the agent stops.
    _status_server: Option<StatusServer>,
}

fn start(args: &RunArgs) -> Result<(Running, Receiver<Event>), AgentError> {
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
        mark_mask = %format!("{:#x}", config.datapath.mark_mask.mask),
        "starting"
    );

    // Signals and directory changes are set up before anything is
    // installed, so a SIGTERM at any point after install tears down.
    let metrics = Arc::new(Metrics::new());
    let (events, inbox) = mpsc::channel();
    signals::listen(events.clone()).map_err(AgentError::Signals)?;
    let mut source = open_source(args, &config, events, &metrics)?;
    let complete = source.complete();
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
    let mut fqdn = Fqdn::restore(&kernel, &ruleset, &config, &metrics)?;
    let mirror = Arc::clone(&fqdn.mirror);
    let patterns = ruleset.fqdn_patterns().to_vec();
    let reconciler = Reconciler::new(ruleset, Backoff::DEFAULT);
    let policy = Arc::clone(reconciler.in_force());
    for queue in config.queues.range().iter() {
        Worker::spawn(
            queue,
            &config.datapath,
            Arc::clone(&policy),
            Arc::clone(&mirror),
            observers.clone(),
        )?;
    }
    crate::workers::l7::spawn(
        &config.datapath,
        &config.l7,
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
        Arc::clone(metrics.counters()),
        Arc::clone(metrics.health()),
    ));
    let status_server = serve_status(config.status.socket.as_deref(), Arc::clone(&status))?;
    if let Some(address) = config.metrics.address {
        let bound =
            crate::telemetry::http::serve(address, Arc::clone(&metrics), Arc::clone(&status) as _)?;
        tracing::info!(address = %bound, "metrics listening");
    }

    fqdn.start_dns_worker(&patterns)?;
    crate::workers::watchdog::spawn(Arc::clone(&metrics), config.health.stall_timeout())?;
    let mut running = Running {
        config,
        source,
        kernel,
        reconciler,
        fqdn,
        metrics,
        status,
        audit,
        _status_server: status_server,
    };
    running.put_in_force();
    // A failed install is retried from the run loop: tearing down here
    // would remove what an earlier agent left enforcing.
    running.sync();
    running.status.set_snapshot_complete(complete);
    Ok((running, inbox))
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

/// The policy directory, or the Kubernetes API; either wakes the run loop
/// through `events` when something changed.
fn open_source(
    args: &RunArgs,
    config: &AgentConfig,
    events: Sender<Event>,
    metrics: &Arc<Metrics>,
) -> Result<Box<dyn Source>, AgentError> {
    let changed = move || {
        let _ = events.send(Event::PolicyChanged);
    };
    Ok(match &args.policies {
        Some(dir) => Box::new(Directory::start(
            dir,
            config.policy_files.limits(),
            changed,
        )?),
        None => {
            let source = KubeSource::spawn(args.kube.connection(), Arc::clone(metrics), changed)?;
            tracing::info!(
                "kubernetes source started; privileged rules only until the first snapshot"
            );
            Box::new(source)
        }
    })
}

/// The ruleset of the source's latest snapshot.
fn load(source: &mut dyn Source, node: &LocalNode) -> Result<Ruleset, Vec<Problem>> {
    source.latest().map(|snapshot| compile(&snapshot, node))
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
    /// Removes what the agent installed, writes what the audit log holds,
    /// and logs the counters.
    fn stop(mut self) -> Result<(), AgentError> {
        teardown(&mut self.kernel)?;
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
