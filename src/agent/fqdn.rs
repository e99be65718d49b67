//! The agent's FQDN side: the DNS counters, registered at the agent's
//! start (so every `tollgate_dns_*`/`tollgate_fqdn_*` series is exported,
//! at zero, before any FQDN policy exists), the table seeded from what the
//! kernel's FQDN sets still hold at start, the DNS reply worker, started
//! (once) before the first ruleset whose DNS rules would queue replies is
//! installed, and with
//! it the resolve-ahead threads (`fqdn.resolve: exact`), told the selectors
//! of each ruleset, and the policies using them, once its sets exist. Its resolvers: `fqdn.resolvers`,
//! else the cluster DNS (Service `kube-system/kube-dns` in the inventory),
//! else the node's resolv.conf. It decides no verdict and writes no kernel
//! rule.
#![allow(clippy::disallowed_methods)] // the FQDN mirror is stamped with the clock on each reselection.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use super::converge::Handover;
use super::AgentError;
use crate::config::{AgentConfig, FqdnConfig};
use crate::datapath::Kernel;
use crate::fqdn::{FqdnPattern, FqdnResolve, FqdnTable, DNS_PORT};
use crate::model::{Object, Snapshot};
use crate::ruleset::Ruleset;
use crate::telemetry::Metrics;
use crate::workers::fqdn_sets::restored_entries;
use crate::workers::resolver::{nameservers, Resolver};
use crate::workers::{DnsCounters, DnsWorker};

/// Where the node's resolvers are listed (default `fqdn.resolvers` without
/// a cluster DNS).
const RESOLV_CONF: &str = "/etc/resolv.conf";
/// The cluster DNS Service (kubeadm, kops, k3s, managed clusters: CoreDNS
/// keeps the name), as `namespace/name`.
const CLUSTER_DNS: (&str, &str) = ("kube-system", "kube-dns");

/// What a ruleset with FQDN selectors needs before the kernel queues DNS
/// replies: the mirror learning for its selectors and the DNS worker.
pub(super) struct Fqdn {
    config: Arc<AgentConfig>,
    pub(super) mirror: Arc<FqdnTable>,
    /// The DNS reply worker, started with the first ruleset that has FQDN
    /// selectors (its queue is not bound before).
    dns: Option<DnsWorker>,
    /// Whether the DNS worker may bind its queue: not before the agent
    /// binds its other queues ([`Fqdn::bind`]).
    bound: bool,
    /// The resolve-ahead threads, started with the DNS worker unless
    /// `fqdn.resolve` is off or no resolver is known.
    resolver: Option<Resolver>,
    /// The cluster DNS the first snapshot named (empty: none).
    cluster_dns: Vec<IpAddr>,
    /// The DNS worker's counters, registered since the agent's start.
    stats: Arc<DnsCounters>,
    metrics: Arc<Metrics>,
}

/// The DNS worker's counters, registered for `config`'s DNS queue before
/// any worker runs: the worker counts into them once it starts.
pub(super) fn register_dns_counters(config: &AgentConfig, metrics: &Metrics) -> Arc<DnsCounters> {
    let stats = Arc::new(DnsCounters::default());
    metrics
        .counters()
        .register(config.fqdn.dns_queue, "dns", vec![Arc::clone(&stats) as _]);
    stats
}

impl Fqdn {
    /// The table for `ruleset`'s selectors, seeded from the kernel's FQDN
    /// sets (what a previous run learned; their entries time out in the
    /// kernel meanwhile), before any worker runs.
    pub(super) fn restore(
        kernel: &impl Kernel,
        ruleset: &Ruleset,
        snapshot: &Snapshot,
        config: &Arc<AgentConfig>,
        stats: &Arc<DnsCounters>,
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
            bound: false,
            resolver: None,
            cluster_dns: cluster_dns(snapshot),
            stats: Arc::clone(stats),
            metrics: Arc::clone(metrics),
        })
    }

    /// From now on the DNS worker may bind its queue: starts it for
    /// `selectors` (those of the ruleset in force).
    pub(super) fn bind(
        &mut self,
        selectors: &[FqdnPattern],
    ) -> Result<(), crate::workers::QueueError> {
        self.bound = true;
        self.start_dns_worker(selectors)
    }

    /// Starts the DNS reply worker if `selectors` (those the kernel is
    /// about to snoop DNS for) is not empty, it is not running yet and
    /// the agent binds its queues. Called before the rules that queue DNS
    /// replies are installed.
    fn start_dns_worker(
        &mut self,
        selectors: &[FqdnPattern],
    ) -> Result<(), crate::workers::QueueError> {
        if self.dns.is_some() || selectors.is_empty() || !self.bound {
            return Ok(());
        }
        let worker = DnsWorker::spawn(
            &self.config.fqdn,
            self.config.datapath.fail_mode,
            Arc::clone(&self.mirror),
            Arc::clone(&self.stats),
            Arc::clone(&self.metrics),
        )?;
        tracing::info!(queue = worker.queue, "dns worker started");
        self.resolver = start_resolver(&self.config.fqdn, &self.cluster_dns, &self.mirror, &worker);
        self.dns = Some(worker);
        Ok(())
    }

    /// `ruleset` is realized (its FQDN sets exist): resolve its exact
    /// names ahead from now on, fairly across the policies that select
    /// them.
    pub(super) fn realized(&self, ruleset: &Ruleset) {
        if let Some(resolver) = &self.resolver {
            resolver.reselect(&ruleset.fqdn_owners());
        }
    }
}

/// The clusterIPs of the cluster DNS Service in `snapshot`, if it has it.
fn cluster_dns(snapshot: &Snapshot) -> Vec<IpAddr> {
    snapshot
        .iter()
        .find_map(|object| match object {
            Object::Service(service)
                if service.metadata.namespace.as_deref() == Some(CLUSTER_DNS.0)
                    && service.metadata.name == CLUSTER_DNS.1 =>
            {
                Some(service.cluster_ips())
            }
            _ => None,
        })
        .unwrap_or_default()
}

/// The resolvers to ask: `fqdn.resolvers`, else `cluster_dns`, else the
/// nameservers of `resolv_conf` (read only when needed).
fn resolvers(
    config: &FqdnConfig,
    cluster_dns: &[IpAddr],
    resolv_conf: impl FnOnce() -> std::io::Result<String>,
) -> std::io::Result<Vec<SocketAddr>> {
    let port = |ips: &[IpAddr]| {
        ips.iter()
            .map(|&ip| SocketAddr::new(ip, DNS_PORT))
            .collect()
    };
    Ok(if !config.resolvers.is_empty() {
        port(&config.resolvers)
    } else if !cluster_dns.is_empty() {
        port(cluster_dns)
    } else {
        nameservers(&resolv_conf()?)
    })
}

/// The resolve-ahead threads for `config`, adding to `worker`'s counters;
/// none when it is off, no resolver is known or it cannot start (logged:
/// snooping goes on alone).
fn start_resolver(
    config: &FqdnConfig,
    cluster_dns: &[IpAddr],
    mirror: &Arc<FqdnTable>,
    worker: &DnsWorker,
) -> Option<Resolver> {
    if config.resolve == FqdnResolve::Off {
        return None;
    }
    let servers = match resolvers(config, cluster_dns, || std::fs::read_to_string(RESOLV_CONF)) {
        Ok(servers) if !servers.is_empty() => servers,
        Ok(_) => {
            tracing::warn!(
                path = RESOLV_CONF,
                "fqdn names are not resolved ahead: no nameserver"
            );
            return None;
        }
        Err(error) => {
            tracing::warn!(%error, path = RESOLV_CONF, "fqdn names are not resolved ahead: no resolver");
            return None;
        }
    };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Sourced;

    fn snapshot(yaml_services: &[(&str, &str, &str)]) -> Snapshot {
        let objects = yaml_services
            .iter()
            .map(|(namespace, name, ip)| {
                let json = serde_json::json!({
                    "metadata": {"name": name, "namespace": namespace},
                    "spec": {"clusterIP": ip, "clusterIPs": [ip]},
                });
                Sourced::new(
                    std::path::Path::new("inventory"),
                    Object::Service(serde_json::from_value(json).unwrap()),
                )
            })
            .collect();
        Snapshot { objects }
    }

    #[test]
    fn resolvers_are_configured_else_the_cluster_dns_else_resolv_conf() {
        let cluster = cluster_dns(&snapshot(&[
            ("default", "kube-dns", "10.96.0.99"),
            ("kube-system", "kube-dns", "10.96.0.10"),
        ]));
        assert_eq!(cluster, ["10.96.0.10".parse::<IpAddr>().unwrap()]);
        assert!(cluster_dns(&snapshot(&[("kube-system", "coredns-x", "10.96.0.11")])).is_empty());
        let resolv = || Ok("nameserver 192.0.2.53\n".to_string());
        let unread = || -> std::io::Result<String> { panic!("resolv.conf read") };
        let mut config = FqdnConfig::default();
        assert_eq!(
            resolvers(&config, &[], resolv).unwrap(),
            ["192.0.2.53:53".parse::<SocketAddr>().unwrap()]
        );
        assert_eq!(
            resolvers(&config, &cluster, unread).unwrap(),
            ["10.96.0.10:53".parse::<SocketAddr>().unwrap()]
        );
        config.resolvers = vec!["fd00::53".parse().unwrap()];
        assert_eq!(
            resolvers(&config, &cluster, unread).unwrap(),
            ["[fd00::53]:53".parse::<SocketAddr>().unwrap()]
        );
        let missing = || Err(std::io::Error::from(std::io::ErrorKind::NotFound));
        assert!(resolvers(&FqdnConfig::default(), &[], missing).is_err());
    }
}
