//! The agent's own counters — the ruleset in force, reloads, kernel writes
//! and the periodic checks — declared once, and [`Sets`]: every
//! subsystem's set, registered with the telemetry registry at the start
//! whatever the mode (so exported at zero before anything happened). Only
//! the agent writes [`AgentCounters`].

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::counters;
use crate::datapath::{ApplyError, Family, Step};
use crate::ruleset::Ruleset;
use crate::source::docker::DockerCounters;
use crate::source::kube::KubeCounters;
use crate::telemetry::Metrics;
use crate::workers::audit::AuditCounters;
use crate::workers::observe::ObserveCounters;

counters! {
    /// What the agent did with its rulesets and the kernel.
    pub struct AgentCounters: one per agent {
        reloads_applied: Counter "reloads" { result = "applied" } = "Reloads of the policy directory, by result (applied, rejected, failed)",
        reloads_rejected: Counter "reloads" { result = "rejected" } = "Reloads of the policy directory, by result (applied, rejected, failed)",
        reloads_failed: Counter "reloads" { result = "failed" } = "Reloads of the policy directory, by result (applied, rejected, failed)",
        last_reload_success: Gauge "last_reload_success" = "1 when the last reload (or the start) applied, 0 when it was rejected or failed",
        apply_failed_read: Counter "datapath_apply_failures" { step = "read" } = "Kernel writes (reconciles) that failed, by the step that failed; each is retried with backoff",
        apply_failed_ipset_prepare: Counter "datapath_apply_failures" { step = "ipset_prepare" } = "Kernel writes (reconciles) that failed, by the step that failed; each is retried with backoff",
        apply_failed_iptables: Counter "datapath_apply_failures" { step = "iptables" } = "Kernel writes (reconciles) that failed, by the step that failed; each is retried with backoff",
        apply_failed_ip6tables: Counter "datapath_apply_failures" { step = "ip6tables" } = "Kernel writes (reconciles) that failed, by the step that failed; each is retried with backoff",
        apply_failed_ebtables: Counter "datapath_apply_failures" { step = "ebtables" } = "Kernel writes (reconciles) that failed, by the step that failed; each is retried with backoff",
        apply_failed_ipset_cleanup: Counter "datapath_apply_failures" { step = "ipset_cleanup" } = "Kernel writes (reconciles) that failed, by the step that failed; each is retried with backoff",
        drift_repairs: Counter "datapath_drift_repairs" = "Times the periodic check found the kernel state changed behind the agent's back (datapath.driftCheckSeconds) and restored it",
        datapath_behind: Gauge "datapath_behind" = "1 while the kernel does not match the desired state (the last apply failed and a retry is scheduled)",
        bridge_netfilter_off: Gauge "bridge_netfilter_off" = "1 while the namespace has a Linux bridge whose internal traffic bypasses iptables (br_netfilter not loaded, or net.bridge.bridge-nf-call-ip(6)tables = 0): container-to-container traffic on one bridge is not enforced",
        endpoints_unseen: Gauge "endpoints_unseen" = "Local endpoint addresses whose traffic never crosses this node's netfilter (behind Open vSwitch, on a macvlan or ipvlan, beyond a veth that does not hold them): not enforced; tollgate status names them and the path",
        policy_warnings: Gauge "policy_warnings" = "Warnings about the policies in force: valid, enforced, but probably not meant (no policy at all, a label key no object carries, a policy that applies nowhere, rules of two policies in no defined order, a group not defined); tollgate status lists them",
        verdict_cache_hits: Counter "verdict_cache_hits" = "New connections the kernel answered from the verdict cache without a worker (the packet counters of the chains that carry out cached verdicts, read at every drift check, or every 10 s without them)",
        compiles_assembled: Counter "compiles" { how = "assembled" } = "Rulesets the incremental compiler built for a snapshot, by how: assembled (the rules applied again over the local endpoints: the first, a policy, Namespace or local endpoint change), patched (only the address sets of the selections a remote change moved), unchanged (nothing any rule, set or endpoint reads changed: the last one kept)",
        compiles_patched: Counter "compiles" { how = "patched" } = "Rulesets the incremental compiler built for a snapshot, by how: assembled (the rules applied again over the local endpoints: the first, a policy, Namespace or local endpoint change), patched (only the address sets of the selections a remote change moved), unchanged (nothing any rule, set or endpoint reads changed: the last one kept)",
        compiles_unchanged: Counter "compiles" { how = "unchanged" } = "Rulesets the incremental compiler built for a snapshot, by how: assembled (the rules applied again over the local endpoints: the first, a policy, Namespace or local endpoint change), patched (only the address sets of the selections a remote change moved), unchanged (nothing any rule, set or endpoint reads changed: the last one kept)",
        generation: Gauge "ruleset_generation" = "Generation of the ruleset in force (1 at start, +1 per applied reload)",
        policies: Gauge "policies" = "Policies in the ruleset in force",
        rules: Gauge "rules" = "Compiled rule instances in the ruleset in force",
        enforced_endpoints: Gauge "enforced_endpoints" = "Endpoints this node enforces policy for in the ruleset in force (the Node and its local Pods and ExternalEntities)",
    }
}

/// How a reload ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReloadResult {
    Applied,
    Rejected,
    Failed,
}

impl AgentCounters {
    /// `ruleset` was put in force as `generation`.
    pub fn ruleset_applied(&self, generation: u64, ruleset: &Ruleset) {
        self.generation.store(generation, Ordering::Relaxed);
        let count = |n: usize| n as u64;
        self.policies
            .store(count(ruleset.policies().len()), Ordering::Relaxed);
        self.rules
            .store(count(ruleset.rule_count()), Ordering::Relaxed);
        self.enforced_endpoints
            .store(count(ruleset.endpoints().len()), Ordering::Relaxed);
    }

    /// A reload (not the start) ended with `result`.
    pub fn reload(&self, result: ReloadResult) {
        let counter = match result {
            ReloadResult::Applied => &self.reloads_applied,
            ReloadResult::Rejected => &self.reloads_rejected,
            ReloadResult::Failed => &self.reloads_failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.last_reload_success.store(
            u64::from(result == ReloadResult::Applied),
            Ordering::Relaxed,
        );
    }

    /// A kernel write failed, at the step `error` names.
    pub fn apply_failed(&self, error: &ApplyError) {
        let counter = match error {
            ApplyError::Read(_) => &self.apply_failed_read,
            ApplyError::Write { step, .. } => match step {
                Step::PrepareSets => &self.apply_failed_ipset_prepare,
                Step::Table(Family::V4) => &self.apply_failed_iptables,
                Step::Table(Family::V6) => &self.apply_failed_ip6tables,
                Step::Bridge => &self.apply_failed_ebtables,
                Step::DestroySets => &self.apply_failed_ipset_cleanup,
            },
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The counter sets of the agent's subsystems, each registered with the
/// metrics at the start whatever the mode, so every series is exported
/// (at zero) from the first scrape.
pub struct Sets {
    pub agent: Arc<AgentCounters>,
    pub kube: Arc<KubeCounters>,
    pub docker: Arc<DockerCounters>,
    pub audit: Arc<AuditCounters>,
    pub observe: Arc<ObserveCounters>,
}

impl Sets {
    pub fn registered(metrics: &Metrics) -> Sets {
        let sets = Sets {
            agent: Arc::default(),
            kube: Arc::default(),
            docker: Arc::default(),
            audit: Arc::default(),
            observe: Arc::default(),
        };
        let registry = metrics.counters();
        registry.register_set(sets.agent.clone());
        registry.register_set(sets.kube.clone());
        registry.register_set(sets.docker.clone());
        registry.register_set(sets.audit.clone());
        registry.register_set(sets.observe.clone());
        sets
    }
}
