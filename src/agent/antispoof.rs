//! The anti-spoofing guards of the running agent: which endpoints the
//! inventory has, what the node's interfaces say about them
//! ([`super::links`]), the guard chains planned from that
//! ([`crate::datapath::antispoof`]) and the drops counted from their rule
//! counters. It logs, meters and publishes; what is written to the kernel
//! is the reconciler's, with the guards laid into every planned state.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use crate::config::{AgentConfig, AllowedSource};
use crate::datapath::antispoof::{self, DropCount, Endpoint, Facts, Guards, Planned, Reason};
use crate::datapath::{Iptables, State};
use crate::model::Snapshot;
use crate::status::{AgentStatus, AntiSpoofReport, GuardedReport, UnguardedReport};
use crate::telemetry::Metrics;

use super::AgentCounters;

pub(super) struct AntiSpoof {
    enabled: bool,
    /// Files mode: the inventory may name an endpoint's interface.
    named_interfaces: bool,
    allowed: Vec<AllowedSource>,
    node: String,
    endpoints: Vec<Endpoint>,
    guards: Guards,
    planned: Planned,
    count: DropCount,
    /// Whether the status has the guards yet.
    published: bool,
    /// Endpoint addresses whose traffic bypasses netfilter, last read.
    unseen: Vec<String>,
}

impl AntiSpoof {
    pub(super) fn new(config: &AgentConfig, named_interfaces: bool) -> AntiSpoof {
        AntiSpoof {
            enabled: config.anti_spoofing.enabled(),
            named_interfaces,
            allowed: config.anti_spoofing.allowed_source_prefixes.clone(),
            node: config.node.name.clone(),
            endpoints: Vec::new(),
            guards: Guards::default(),
            planned: Planned::default(),
            count: DropCount::default(),
            published: false,
            unseen: Vec::new(),
        }
    }

    /// The endpoints of the snapshot about to be put in force.
    pub(super) fn inventory(&mut self, snapshot: &Snapshot) {
        self.endpoints = antispoof::endpoints(snapshot, &self.node, self.named_interfaces);
    }

    /// Lays the guards into a planned datapath state.
    pub(super) fn install(&self, state: &mut State) {
        self.planned.install(state);
    }

    /// Reads the interfaces again and plans the guards; returns whether
    /// they changed (the caller then converges). The drops counted by the
    /// rules about to be replaced are read first.
    /// Whether every endpoint's traffic crosses netfilter is checked from
    /// the same facts, anti-spoofing on or off.
    pub(super) fn refresh(
        &mut self,
        kernel: &Iptables,
        metrics: &Metrics,
        counters: &AgentCounters,
        status: &AgentStatus,
    ) -> bool {
        let mut addresses: Vec<_> = self
            .endpoints
            .iter()
            .flat_map(|e| e.addresses.iter().copied())
            .collect();
        addresses.sort();
        addresses.dedup();
        let facts = if addresses.is_empty() {
            Facts::default()
        } else {
            match super::links::read(&addresses, kernel.bridge_guards()) {
                Ok(facts) => facts,
                Err(error) => {
                    tracing::warn!(%error, "reading the interfaces failed; the anti-spoofing guards and the endpoint traffic check stay as they are");
                    return false;
                }
            }
        };
        self.check_seen(&facts, counters, status);
        let guards = if self.enabled {
            antispoof::attach(&self.endpoints, &facts, &self.allowed, &self.guards)
        } else {
            Guards::default()
        };
        if guards == self.guards && self.published {
            return false;
        }
        let planned = antispoof::plan(&guards);
        let changed = planned != self.planned;
        if changed {
            self.count_drops(kernel, metrics);
        }
        let unguarded = |g: &Guards| -> Vec<String> {
            g.unguarded
                .iter()
                .map(|u| format!("{} ({})", u.endpoint, u.reason))
                .collect()
        };
        let (before, after) = (unguarded(&self.guards), unguarded(&guards));
        for line in after.iter().filter(|u| !before.contains(u)) {
            tracing::warn!("anti-spoofing: endpoint not guarded: {line}");
        }
        if self.enabled && guards.guarded.len() != self.guards.guarded.len() {
            tracing::info!(
                guarded = guards.guarded.len(),
                unguarded = guards.unguarded.len(),
                "anti-spoofing guards planned"
            );
        }
        self.guards = guards;
        self.planned = planned;
        let mut names: Vec<String> = self
            .guards
            .guarded
            .iter()
            .map(|g| g.endpoint.clone())
            .collect();
        names.sort();
        names.dedup();
        metrics.antispoof_endpoints(&names, self.guards.unguarded.len(), &Reason::LABELS);
        self.publish(metrics, status);
        changed
    }

    /// Which endpoints' traffic bypasses netfilter: logged when it
    /// changes (a warning per new address), published in the status and
    /// the `endpoints_unseen` gauge.
    fn check_seen(&mut self, facts: &Facts, counters: &AgentCounters, status: &AgentStatus) {
        let unseen = crate::datapath::visibility::unseen(&self.endpoints, facts);
        if unseen == self.unseen {
            return;
        }
        for line in unseen.iter().filter(|l| !self.unseen.contains(l)) {
            tracing::warn!("endpoint traffic not seen by netfilter, not enforced: {line}");
        }
        if unseen.is_empty() {
            tracing::info!("every endpoint's traffic crosses netfilter again");
        }
        counters
            .endpoints_unseen
            .store(unseen.len() as u64, Ordering::Relaxed);
        status.endpoint_traffic(unseen.clone());
        self.unseen = unseen;
    }

    /// Reads the guards' drop counters into the metrics and the status.
    pub(super) fn count(&mut self, kernel: &Iptables, metrics: &Metrics, status: &AgentStatus) {
        self.count_drops(kernel, metrics);
        self.publish(metrics, status);
    }

    fn count_drops(&mut self, kernel: &Iptables, metrics: &Metrics) {
        if self.planned.drops.is_empty() {
            return;
        }
        match kernel.antispoof_counters() {
            Ok(reading) => {
                for ((endpoint, reason), gained) in self.count.gained(reading, &self.planned) {
                    // A drop rule of several endpoints (one veth) counts
                    // for each.
                    for endpoint in endpoint.split(',') {
                        metrics.antispoof_dropped(endpoint, reason.label(), gained);
                    }
                }
            }
            Err(error) => tracing::debug!("reading the anti-spoofing counters failed: {error}"),
        }
    }

    fn publish(&mut self, metrics: &Metrics, status: &AgentStatus) {
        self.published = true;
        let guarded = self
            .guards
            .guarded
            .iter()
            .map(|g| GuardedReport {
                endpoint: g.endpoint.clone(),
                interface: g.attachment.to_string(),
                dropped: metrics
                    .antispoof_dropped_of(&g.endpoint, &Reason::LABELS)
                    .into_iter()
                    .map(|(reason, n)| (reason.to_string(), n))
                    .collect::<BTreeMap<_, _>>(),
            })
            .collect();
        let unguarded = self
            .guards
            .unguarded
            .iter()
            .map(|u| UnguardedReport {
                endpoint: u.endpoint.clone(),
                reason: u.reason.clone(),
            })
            .collect();
        status.anti_spoofing(Some(AntiSpoofReport {
            enabled: self.enabled,
            guarded,
            unguarded,
        }));
    }
}
