//! The agent's FQDN side: the table seeded from what the kernel's FQDN sets
//! still hold at start, and the DNS reply worker, started (once) before
//! the first ruleset whose DNS rules would queue replies is installed. It
//! decides no verdict and writes no kernel rule.

use std::sync::Arc;
use std::time::Instant;

use super::converge::Handover;
use super::AgentError;
use crate::config::AgentConfig;
use crate::datapath::Kernel;
use crate::fqdn::{FqdnPattern, FqdnTable};
use crate::ruleset::Ruleset;
use crate::telemetry::Metrics;
use crate::workers::fqdn_sets::restored_entries;
use crate::workers::DnsWorker;

/// What a ruleset with FQDN selectors needs before the kernel queues DNS
/// replies: the mirror learning for its selectors and the DNS worker.
pub(super) struct Fqdn {
    config: Arc<AgentConfig>,
    pub(super) mirror: Arc<FqdnTable>,
    /// The DNS reply worker, started with the first ruleset that has FQDN
    /// selectors (its queue is not bound before).
    dns: Option<DnsWorker>,
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
        self.dns = Some(worker);
        Ok(())
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
