//! The agent's FQDN side: the table seeded from what the kernel's FQDN sets
//! still hold at start, the DNS reply worker, started (once) before the
//! first ruleset whose DNS rules would queue replies is installed, and with
//! it the resolve-ahead thread (`fqdn.resolve: exact`), told the selectors
//! of each ruleset once its sets exist. It decides no verdict and writes no
//! kernel rule.

use std::sync::Arc;
use std::time::Instant;

use super::converge::Handover;
use super::AgentError;
use crate::config::{AgentConfig, FqdnConfig};
use crate::datapath::Kernel;
use crate::fqdn::{FqdnPattern, FqdnResolve, FqdnTable};
use crate::ruleset::Ruleset;
use crate::telemetry::Metrics;
use crate::workers::fqdn_sets::restored_entries;
use crate::workers::resolver::{nameservers, Resolver};
use crate::workers::DnsWorker;

/// Where the node's resolvers are listed (default `fqdn.resolvers`).
const RESOLV_CONF: &str = "/etc/resolv.conf";

/// What a ruleset with FQDN selectors needs before the kernel queues DNS
/// replies: the mirror learning for its selectors and the DNS worker.
pub(super) struct Fqdn {
    config: Arc<AgentConfig>,
    pub(super) mirror: Arc<FqdnTable>,
    /// The DNS reply worker, started with the first ruleset that has FQDN
    /// selectors (its queue is not bound before).
    dns: Option<DnsWorker>,
    /// The resolve-ahead thread, started with the DNS worker unless
    /// `fqdn.resolve` is off or no resolver is known.
    resolver: Option<Resolver>,
    metrics: Arc<Metrics>,
}

impl Fqdn {
    /// The table for `ruleset`'s selectors, seeded from the kernel's FQDN
    /// sets (what a previous run learned; their entries time out in the
    /// kernel meanwhile), before any worker runs.
    pub(super) fn restore(
        kernel: &impl Kernel,
        ruleset: &Ruleset,
        config: &Arc<AgentConfig>,
        metrics: &Arc<Metrics>,
    ) -> Result<Fqdn, AgentError> {
        let learned: Vec<_> = kernel
            .installed()?
            .learned
            .into_iter()
            .map(|(name, set)| (name, set.entries))
            .collect();
        let (table, restored) = FqdnTable::restore(
            ruleset.fqdn_patterns().to_vec(),
            config.fqdn.learner(),
            &restored_entries(ruleset.fqdn_patterns(), &learned),
            Instant::now(),
        );
        tracing::info!(
            selectors = ruleset.fqdn_patterns().len(),
            restored,
            "fqdn mirror restored"
        );
        Ok(Fqdn {
            config: Arc::clone(config),
            mirror: Arc::new(table),
            dns: None,
            resolver: None,
            metrics: Arc::clone(metrics),
        })
    }

    /// Starts the DNS reply worker if `selectors` (those the kernel is
    /// about to snoop DNS for) is not empty and it is not running yet.
    /// Called before the rules that queue DNS replies are installed.
    pub(super) fn start_dns_worker(
        &mut self,
        selectors: &[FqdnPattern],
    ) -> Result<(), crate::workers::QueueError> {
        if self.dns.is_some() || selectors.is_empty() {
            return Ok(());
        }
        let worker = DnsWorker::spawn(
            &self.config.fqdn,
            Arc::clone(&self.mirror),
            Arc::clone(&self.metrics),
        )?;
        tracing::info!(queue = worker.queue, "dns worker started");
        self.resolver = start_resolver(&self.config.fqdn, &self.mirror, &worker);
        self.dns = Some(worker);
        Ok(())
    }

    /// The ruleset with `selectors` is realized (its FQDN sets exist):
    /// resolve its exact names ahead from now on.
    pub(super) fn realized(&self, selectors: &[FqdnPattern]) {
        if let Some(resolver) = &self.resolver {
            resolver.reselect(selectors);
        }
    }
}

/// The resolve-ahead thread for `config`, adding to `worker`'s counters;
/// none when it is off, no resolver is known or it cannot start (logged:
/// snooping goes on alone).
fn start_resolver(
    config: &FqdnConfig,
    mirror: &Arc<FqdnTable>,
    worker: &DnsWorker,
) -> Option<Resolver> {
    if config.resolve == FqdnResolve::Off {
        return None;
    }
    let servers: Vec<_> = if config.resolvers.is_empty() {
        match std::fs::read_to_string(RESOLV_CONF) {
            Ok(text) => nameservers(&text),
            Err(error) => {
                tracing::warn!(%error, path = RESOLV_CONF, "fqdn names are not resolved ahead: no resolver");
                return None;
            }
        }
    } else {
        config
            .resolvers
            .iter()
            .map(|&ip| std::net::SocketAddr::new(ip, crate::fqdn::DNS_PORT))
            .collect()
    };
    if servers.is_empty() {
        tracing::warn!(
            path = RESOLV_CONF,
            "fqdn names are not resolved ahead: no nameserver"
        );
        return None;
    }
    match Resolver::spawn(
        servers.clone(),
        config.resolve_bounds(),
        Arc::clone(mirror),
        Arc::clone(&worker.stats),
    ) {
        Ok(resolver) => {
            let servers: Vec<String> = servers.iter().map(ToString::to_string).collect();
            tracing::info!(servers = servers.join(","), "fqdn resolver started");
            Some(resolver)
        }
        Err(error) => {
            tracing::error!(%error, "fqdn resolver failed to start: snooping only");
            None
        }
    }
}

impl Handover for Fqdn {
    /// The mirror learns for both rulesets' selectors while the bridge is
    /// in place, and the DNS worker runs before DNS replies are queued.
    fn widening(&mut self, selectors: &[FqdnPattern]) {
        self.mirror.reselect(selectors, Instant::now());
        if let Err(error) = self.start_dns_worker(selectors) {
            // The DNS rules bypass a queue nobody reads: replies pass
            // unlearned, FQDN rules match nothing new.
            tracing::error!(%error, "dns worker failed to start");
        }
    }

    fn switched(&mut self, ruleset: &Ruleset) {
        self.mirror
            .reselect(ruleset.fqdn_patterns(), Instant::now());
    }
}
