//! Effective priority: the order in which the compiler adds policies, which
//! is the order the classifier evaluates their rules in. Non-baseline Antrea
//! policies by Tier priority, then policy priority (ACNP and ANNP
//! interleaved), with the Admin tier of `v1alpha2` ClusterNetworkPolicies
//! at Tier priority 220; then AdminNetworkPolicies; then Kubernetes
//! NetworkPolicies; then Antrea's baseline Tier; then the
//! network-policy-api Baseline tier. Policies that share a Tier and a
//! priority are evaluated together, their rules by index ([`interleave`]):
//! Antrea's order is (Tier priority, policy priority, rule index) for every
//! kind it translates. Each rule gets its rank here. Decides order only,
//! never what matches.

use std::collections::HashMap;
use std::sync::Arc;

use crate::model::{
    effective_tier, AntreaPolicy, Direction, K8sNetworkPolicy, NpKind, NpPolicy, NpTier, Object,
    Snapshot, BASELINE_TIER, STATIC_TIERS,
};
use crate::ruleset::{PolicyKind, PolicyRef};

use super::Compiler;

/// Tier priority by Tier name, looked up once for each Antrea policy of
/// every assembly (a fast hash: SipHash of the name was most of the cost).
pub(super) type TierPriorities = HashMap<String, i32, foldhash::fast::RandomState>;

/// Tier priority of a static or custom Tier.
pub(super) fn tier_priorities(snapshot: &Snapshot) -> TierPriorities {
    let mut tiers: TierPriorities = STATIC_TIERS
        .iter()
        .map(|(n, p)| (n.to_string(), *p))
        .collect();
    for object in snapshot.iter() {
        if let Object::Tier(tier) = object {
            tiers
                .entry(tier.metadata.name.clone())
                .or_insert(tier.spec.priority);
        }
    }
    tiers
}

/// Orders policies: Tier priority, then policy priority, then kind and name
/// (the tie-break within [`interleave`]: rules of one index of policies
/// that share Tier and priority are in no order Antrea defines). Borrows
/// everything from the snapshot: ordering 500 policies allocates nothing
/// per policy.
pub(super) struct OrderedPolicy<'a> {
    pub(super) tier: &'a str,
    pub(super) tier_priority: i32,
    pub(super) policy: &'a AntreaPolicy,
    /// The object the policy is, as the snapshot shares it (the key of
    /// [`super::antrea::Placements`]).
    pub(super) object: &'a Arc<Object>,
    pub(super) kind: PolicyKind,
    /// An AntreaNetworkPolicy's Namespace (`default` when it names none).
    pub(super) namespace: Option<&'a str>,
}

impl OrderedPolicy<'_> {
    /// The name the ruleset gives the policy.
    pub(super) fn reference(&self) -> PolicyRef {
        PolicyRef {
            kind: self.kind,
            namespace: self.namespace.map(str::to_string),
            name: self.policy.metadata.name.clone(),
        }
    }

    /// The order of [`PolicyRef`] (kind, Namespace, name), unallocated.
    fn tie_break(&self) -> (PolicyKind, Option<&str>, &str) {
        (self.kind, self.namespace, &self.policy.metadata.name)
    }
}

/// Antrea policies of known Tiers in effective-priority order, split into
/// those of the regular Tiers and those of the baseline Tier.
pub(super) fn antrea_policies<'a>(
    snapshot: &'a Snapshot,
    tiers: &TierPriorities,
) -> (Vec<OrderedPolicy<'a>>, Vec<OrderedPolicy<'a>>) {
    let mut antrea: Vec<OrderedPolicy> = Vec::new();
    for sourced in &snapshot.objects {
        let object = &sourced.object;
        let (policy, kind) = match &**object {
            Object::ClusterNetworkPolicy(p) => (p, PolicyKind::AntreaClusterNetworkPolicy),
            Object::AntreaNetworkPolicy(p) => (p, PolicyKind::AntreaNetworkPolicy),
            _ => continue,
        };
        let tier = effective_tier(policy.spec.tier.as_deref());
        let Some(&tier_priority) = tiers.get(tier) else {
            continue; // unknown Tier: rejected by validation
        };
        let namespace = (kind == PolicyKind::AntreaNetworkPolicy)
            .then(|| policy.metadata.namespace.as_deref().unwrap_or("default"));
        antrea.push(OrderedPolicy {
            tier,
            tier_priority,
            policy,
            object,
            kind,
            namespace,
        });
    }
    // The baseline Tier's policies last, then split off (no copy of the
    // others). Unstable: no two policies share a tie-break (kind,
    // Namespace, name).
    let baseline = |p: &OrderedPolicy| p.tier == BASELINE_TIER;
    antrea.sort_unstable_by(|a, b| {
        baseline(a)
            .cmp(&baseline(b))
            .then(a.tier_priority.cmp(&b.tier_priority))
            .then(a.policy.spec.priority.total_cmp(&b.policy.spec.priority))
            .then_with(|| a.tie_break().cmp(&b.tie_break()))
    });
    let regular = antrea.partition_point(|p| !baseline(p));
    let baseline = antrea.split_off(regular);
    (antrea, baseline)
}

/// Kubernetes NetworkPolicies by Namespace and name. They only allow, so
/// their order decides only which allowing rule a decision names.
pub(super) fn k8s_policies(snapshot: &Snapshot) -> Vec<&K8sNetworkPolicy> {
    let mut k8s: Vec<&K8sNetworkPolicy> = snapshot
        .iter()
        .filter_map(|o| match o {
            Object::K8sNetworkPolicy(p) => Some(&**p),
            _ => None,
        })
        .collect();
    k8s.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    k8s
}

/// The network-policy-api policies in effective-priority order, by
/// priority, then name, in three groups: Admin-tier ClusterNetworkPolicies
/// (evaluated as an Antrea Tier of priority [`crate::model::CNP_ADMIN_TIER_PRIORITY`]),
/// AdminNetworkPolicies (after every non-baseline Antrea Tier, as Antrea
/// orders `v1alpha1`), and the Baseline tier (Baseline-tier
/// ClusterNetworkPolicies, then the BaselineAdminNetworkPolicy, which has no
/// priority).
pub(super) struct NpPolicies<'a> {
    pub(super) cnp_admin: Vec<NpPolicy<'a>>,
    pub(super) anp: Vec<NpPolicy<'a>>,
    pub(super) baseline: Vec<NpPolicy<'a>>,
}

pub(super) fn np_policies(snapshot: &Snapshot) -> NpPolicies<'_> {
    let mut policies: Vec<NpPolicy> = snapshot.iter().filter_map(Object::np_policy).collect();
    policies.sort_by(|a, b| {
        (a.priority.is_none(), a.priority, a.kind, a.name).cmp(&(
            b.priority.is_none(),
            b.priority,
            b.kind,
            b.name,
        ))
    });
    let mut groups = NpPolicies {
        cnp_admin: Vec::new(),
        anp: Vec::new(),
        baseline: Vec::new(),
    };
    for policy in policies {
        match (policy.tier, policy.kind) {
            (NpTier::Baseline, _) => groups.baseline.push(policy),
            (NpTier::Admin, NpKind::ClusterNetworkPolicy) => groups.cnp_admin.push(policy),
            (NpTier::Admin, _) => groups.anp.push(policy),
        }
    }
    groups
}

/// Runs of `sorted` policies that share Tier priority and policy priority:
/// each run is evaluated as one ([`interleave`]).
pub(super) fn same_priority<'s, 'a>(
    sorted: &'s [&'s OrderedPolicy<'a>],
) -> impl Iterator<Item = &'s [&'s OrderedPolicy<'a>]> {
    sorted.chunk_by(|a, b| {
        a.tier_priority == b.tier_priority
            && a.policy
                .spec
                .priority
                .total_cmp(&b.policy.spec.priority)
                .is_eq()
    })
}

/// Runs of `sorted` network-policy-api policies of one group
/// ([`NpPolicies`]) that share a priority (the BaselineAdminNetworkPolicy,
/// which has none, is alone).
pub(super) fn same_np_priority<'s, 'a>(
    sorted: &'s [NpPolicy<'a>],
) -> impl Iterator<Item = &'s [NpPolicy<'a>]> {
    sorted.chunk_by(|a, b| a.kind == b.kind && a.priority == b.priority)
}

/// The rules of policies that share Tier and priority, in evaluation
/// order, given each policy's `[ingress, egress]` rule counts in the
/// policies' order: by rule index, then by policy (the kind-and-name
/// tie-break), each index's ingress rule before its egress rule (the two
/// directions never meet: they are separate lists). Antrea gives a rule
/// the priority (Tier priority, policy priority, rule index), so rule 0 of
/// every such policy comes before any rule 1 (`testACNPRulePriority`).
/// Yields (policy position, direction, rule index).
pub(super) fn interleave(rule_counts: &[[usize; 2]]) -> Vec<(usize, Direction, usize)> {
    let longest = rule_counts
        .iter()
        .flat_map(|counts| counts.iter().copied())
        .max()
        .unwrap_or(0);
    let mut order = Vec::new();
    for index in 0..longest {
        for (policy, counts) in rule_counts.iter().enumerate() {
            for (direction, &count) in [Direction::Ingress, Direction::Egress]
                .into_iter()
                .zip(counts)
            {
                if index < count {
                    order.push((policy, direction, index));
                }
            }
        }
    }
    order
}

impl Compiler<'_> {
    /// The next rank in evaluation order: policies are compiled in that
    /// order, rules in their order within the policy.
    pub(super) fn next_rank(&mut self) -> u32 {
        self.ranked += 1;
        self.ranked
    }
}
