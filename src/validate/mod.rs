//! Admission validation: the checks Antrea's admission webhook (and the
//! Kubernetes API server, for NetworkPolicy) apply before accepting an
//! object, run over a whole [`Snapshot`] so that cross-object rules — Tier
//! and group references, Tier priorities, duplicate objects — are checked
//! as well. Pure: decoded objects in, [`Problem`]s out; it never reads files
//! or the clock, and never rewrites an object.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ipnet::IpNet;

use crate::model::{
    AntreaGroup, AntreaPolicy, AppliedTo, Direction, IpBlock, K8sNetworkPolicy, K8sPeer, K8sPort,
    NamespacedName, Object, ObjectRef, Peer, PolicyPort, PortValue, Rule, RuleAction, Snapshot,
    Tier, BASELINE_TIER, STATIC_TIERS,
};

#[cfg(test)]
mod tests;

/// One reason an object (or a document that should have been one) is
/// rejected. Displays as `PATH: Kind namespace/name: field: reason`; the
/// object and field parts are left out when unknown (a YAML syntax error
/// has no object).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub origin: PathBuf,
    pub object: ObjectRef,
    /// Field path inside the object, e.g. `spec.ingress[1].from[0].ipBlock.except[0]`;
    /// for YAML syntax errors, the position (`line 3, column 7`).
    pub field: String,
    pub reason: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.origin.display())?;
        if self.object.kind.is_some() || !self.object.name.is_empty() {
            write!(f, "{}: ", self.object)?;
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.reason)
    }
}

impl std::error::Error for Problem {}

/// Custom Tiers must have a priority below this (250 and above are reserved
/// for `application` and `baseline`).
pub const CUSTOM_TIER_PRIORITY_LIMIT: i32 = 250;

/// Antrea supports at most this many Tiers, the six static ones included.
pub const MAX_TIERS: usize = 20;

/// Policy priorities must lie in this inclusive range.
pub const POLICY_PRIORITY_RANGE: (f64, f64) = (1.0, 10000.0);

/// Checks every object of `snapshot`, alone and against the others. The
/// result is empty when the snapshot would be admitted as a whole.
pub fn validate(snapshot: &Snapshot) -> Vec<Problem> {
    let index = Index::build(snapshot);
    let mut problems = Vec::new();
    let mut seen: HashMap<ObjectRef, &Path> = HashMap::new();
    for sourced in &snapshot.objects {
        let object = &sourced.object;
        let mut report = Report {
            origin: &sourced.origin,
            object: object.object_ref(),
            problems: &mut problems,
        };
        let name = &object.metadata().name;
        if name.is_empty() {
            report.add("metadata.name", "must not be empty");
        } else if let Some(first) = seen.get(&report.object) {
            let reason = format!("duplicate object: already defined in {}", first.display());
            report.add("metadata.name", reason);
        } else {
            seen.insert(report.object.clone(), &sourced.origin);
        }
        match object {
            Object::Tier(tier) => check_tier(&mut report, &index, tier),
            Object::ClusterNetworkPolicy(policy) => {
                check_policy(&mut report, &index, policy, Scope::Cluster)
            }
            Object::AntreaNetworkPolicy(policy) => {
                let namespace = report.object.namespace.clone().unwrap_or_default();
                check_policy(&mut report, &index, policy, Scope::Namespace(&namespace))
            }
            Object::ClusterGroup(group) => check_group(&mut report, &index, group, Scope::Cluster),
            Object::Group(group) => {
                let namespace = report.object.namespace.clone().unwrap_or_default();
                check_group(&mut report, &index, group, Scope::Namespace(&namespace))
            }
            Object::K8sNetworkPolicy(policy) => check_k8s_policy(&mut report, policy),
            Object::Node(_)
            | Object::Namespace(_)
            | Object::Pod(_)
            | Object::Service(_)
            | Object::ServiceAccount(_) => {}
        }
    }
    problems
}

/// Collects problems for one object.
struct Report<'a> {
    origin: &'a Path,
    object: ObjectRef,
    problems: &'a mut Vec<Problem>,
}

impl Report<'_> {
    fn add(&mut self, field: impl Into<String>, reason: impl Into<String>) {
        self.problems.push(Problem {
            origin: self.origin.to_path_buf(),
            object: self.object.clone(),
            field: field.into(),
            reason: reason.into(),
        });
    }
}

/// Cluster-scoped (ACNP, ClusterGroup) or in one Namespace (ANNP, Group).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope<'a> {
    Cluster,
    Namespace(&'a str),
}

impl Scope<'_> {
    /// What a `group:` reference names in this scope.
    fn group_kind(self) -> &'static str {
        match self {
            Scope::Cluster => "ClusterGroup",
            Scope::Namespace(_) => "Group",
        }
    }
}

/// Lookups across the snapshot: Tiers and groups by name.
struct Index<'a> {
    /// Tier name → priority, static tiers included.
    tiers: HashMap<&'a str, i32>,
    /// Custom tiers in snapshot order (names may repeat).
    custom_tiers: Vec<&'a Tier>,
    cluster_groups: HashMap<&'a str, &'a AntreaGroup>,
    groups: HashMap<(&'a str, &'a str), &'a AntreaGroup>,
}

impl<'a> Index<'a> {
    fn build(snapshot: &'a Snapshot) -> Index<'a> {
        let mut index = Index {
            tiers: STATIC_TIERS.iter().copied().collect(),
            custom_tiers: Vec::new(),
            cluster_groups: HashMap::new(),
            groups: HashMap::new(),
        };
        for object in snapshot.iter() {
            match object {
                Object::Tier(tier) if !is_static_redeclaration(tier) => {
                    index.custom_tiers.push(tier);
                    index
                        .tiers
                        .entry(&tier.metadata.name)
                        .or_insert(tier.spec.priority);
                }
                Object::ClusterGroup(group) => {
                    index
                        .cluster_groups
                        .entry(&group.metadata.name)
                        .or_insert(group);
                }
                Object::Group(group) => {
                    let namespace = group.metadata.namespace.as_deref().unwrap_or("default");
                    index
                        .groups
                        .entry((namespace, &group.metadata.name))
                        .or_insert(group);
                }
                _ => {}
            }
        }
        index
    }

    fn group(&self, scope: Scope<'_>, name: &str) -> Option<&'a AntreaGroup> {
        match scope {
            Scope::Cluster => self.cluster_groups.get(name).copied(),
            Scope::Namespace(ns) => self.groups.get(&(ns, name)).copied(),
        }
    }
}

/// A Tier object that restates a static Tier exactly (as `kubectl get tiers
/// -o yaml` prints them) is not a custom Tier and is accepted as is.
fn is_static_redeclaration(tier: &Tier) -> bool {
    STATIC_TIERS
        .iter()
        .any(|&(name, priority)| tier.metadata.name == name && tier.spec.priority == priority)
}

fn static_tier_names() -> String {
    STATIC_TIERS
        .iter()
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

// ------------------------------------------------------------------- tiers

fn check_tier(report: &mut Report<'_>, index: &Index<'_>, tier: &Tier) {
    if is_static_redeclaration(tier) {
        return;
    }
    let name = tier.metadata.name.as_str();
    let priority = tier.spec.priority;
    if STATIC_TIERS.iter().any(|&(n, _)| n == name) {
        report.add(
            "metadata.name",
            format!("`{name}` is a static Tier; a custom Tier cannot reuse its name"),
        );
    }
    if !(0..CUSTOM_TIER_PRIORITY_LIMIT).contains(&priority) {
        report.add(
            "spec.priority",
            format!(
                "custom Tier priority must be between 0 and {} (250 and above are reserved), got {priority}",
                CUSTOM_TIER_PRIORITY_LIMIT - 1
            ),
        );
    }
    // The first Tier (static ones first, then in snapshot order) to use a
    // priority owns it; later ones are reported.
    let position = index
        .custom_tiers
        .iter()
        .position(|t| std::ptr::eq(*t, tier))
        .unwrap_or(0);
    let earlier = STATIC_TIERS
        .iter()
        .copied()
        .chain(
            index.custom_tiers[..position]
                .iter()
                .map(|t| (t.metadata.name.as_str(), t.spec.priority)),
        )
        .find(|&(n, p)| p == priority && n != name);
    if let Some((other, _)) =
        earlier.filter(|_| (0..CUSTOM_TIER_PRIORITY_LIMIT).contains(&priority))
    {
        report.add(
            "spec.priority",
            format!("priority {priority} is already used by Tier {other}"),
        );
    }
    let custom_allowed = MAX_TIERS - STATIC_TIERS.len();
    if position >= custom_allowed {
        report.add(
            "metadata.name",
            format!(
                "at most {MAX_TIERS} Tiers are supported ({} static and {custom_allowed} custom)",
                STATIC_TIERS.len()
            ),
        );
    }
}

// ---------------------------------------------------------------- policies

fn check_policy(report: &mut Report<'_>, index: &Index<'_>, policy: &AntreaPolicy, scope: Scope) {
    let spec = &policy.spec;
    if let Some(tier) = spec.tier.as_deref() {
        if !index.tiers.contains_key(tier) {
            report.add(
                "spec.tier",
                format!(
                    "Tier `{tier}` does not exist (static Tiers: {})",
                    static_tier_names()
                ),
            );
        }
    }
    let (low, high) = POLICY_PRIORITY_RANGE;
    if !(spec.priority >= low && spec.priority <= high) {
        report.add(
            "spec.priority",
            format!("must be between 1.0 and 10000.0, got {}", spec.priority),
        );
    }

    let rules: Vec<(Direction, String, &Rule)> =
        rules_with_paths(&policy.spec.ingress, Direction::Ingress)
            .chain(rules_with_paths(&policy.spec.egress, Direction::Egress))
            .collect();

    // appliedTo at policy level xor on every rule.
    let with_rule_applied_to = rules
        .iter()
        .filter(|(_, _, r)| !r.applied_to.is_empty())
        .count();
    if !spec.applied_to.is_empty() {
        for (_, path, rule) in &rules {
            if !rule.applied_to.is_empty() {
                report.add(
                    format!("{path}.appliedTo"),
                    "cannot be set on a rule when spec.appliedTo is set",
                );
            }
        }
    } else if with_rule_applied_to == 0 {
        report.add(
            "spec.appliedTo",
            "must be set, either here or on every rule",
        );
    } else {
        for (_, path, rule) in &rules {
            if rule.applied_to.is_empty() {
                report.add(
                    format!("{path}.appliedTo"),
                    "must be set on every rule when spec.appliedTo is not set",
                );
            }
        }
    }

    check_applied_to_list(report, index, scope, "spec.appliedTo", &spec.applied_to);
    let policy_on_service = spec.applied_to.iter().any(|a| a.service.is_some());

    let in_baseline = spec.tier.as_deref() == Some(BASELINE_TIER);
    for (direction, path, rule) in &rules {
        check_rule(report, index, scope, *direction, path, rule, in_baseline);
        check_applied_to_list(
            report,
            index,
            scope,
            &format!("{path}.appliedTo"),
            &rule.applied_to,
        );
        if scope == Scope::Cluster {
            let rule_on_service = rule.applied_to.iter().any(|a| a.service.is_some());
            check_node_port_rule(
                report,
                *direction,
                path,
                rule,
                policy_on_service,
                rule_on_service,
            );
        }
    }

    check_group_selector_mix(report, scope, spec.applied_to.as_slice(), &rules);
    check_rule_names(report, &rules);
}

fn rules_with_paths(
    rules: &[Rule],
    direction: Direction,
) -> impl Iterator<Item = (Direction, String, &Rule)> {
    let key = match direction {
        Direction::Ingress => "spec.ingress",
        Direction::Egress => "spec.egress",
    };
    rules
        .iter()
        .enumerate()
        .map(move |(i, rule)| (direction, format!("{key}[{i}]"), rule))
}

/// Every appliedTo entry of one list (policy- or rule-level).
fn check_applied_to_list(
    report: &mut Report<'_>,
    index: &Index<'_>,
    scope: Scope,
    path: &str,
    entries: &[AppliedTo],
) {
    for (i, entry) in entries.iter().enumerate() {
        check_applied_to(report, index, scope, &format!("{path}[{i}]"), entry);
    }
    if scope == Scope::Cluster && entries.len() > 1 && entries.iter().any(|e| e.service.is_some()) {
        report.add(
            path,
            "cannot apply to a NodePort Service and to other entities at the same time",
        );
    }
}

fn check_applied_to(
    report: &mut Report<'_>,
    index: &Index<'_>,
    scope: Scope,
    path: &str,
    entry: &AppliedTo,
) {
    let fields = applied_to_fields(entry);
    if fields.is_empty() {
        let allowed = match scope {
            Scope::Cluster => {
                "podSelector, namespaceSelector, nodeSelector, group, serviceAccount or service"
            }
            Scope::Namespace(_) => "podSelector, group or serviceAccount",
        };
        report.add(path, format!("empty entry: set one of {allowed}"));
        return;
    }
    if let Scope::Namespace(_) = scope {
        for (field, set) in [
            ("namespaceSelector", entry.namespace_selector.is_some()),
            ("nodeSelector", entry.node_selector.is_some()),
            ("service", entry.service.is_some()),
        ] {
            if set {
                report.add(
                    format!("{path}.{field}"),
                    "not allowed in the appliedTo of an Antrea NetworkPolicy",
                );
            }
        }
    }
    for field in ["group", "serviceAccount", "nodeSelector", "service"] {
        if fields.contains(&field) && fields.len() > 1 {
            report.add(
                format!("{path}.{field}"),
                format!(
                    "cannot be set with other fields in the same appliedTo entry (also set: {})",
                    others(&fields, field)
                ),
            );
            break;
        }
    }
    if let Some(group) = entry.group.as_deref() {
        if let Some(found) = check_group_ref(report, index, scope, &format!("{path}.group"), group)
        {
            if let Scope::Namespace(_) = scope {
                if found.spec.namespace_selector.is_some() {
                    report.add(
                        format!("{path}.group"),
                        format!(
                            "Group `{group}` selects by namespaceSelector and cannot be used in the appliedTo of an Antrea NetworkPolicy"
                        ),
                    );
                }
            }
        }
    }
    if let Some(sa) = &entry.service_account {
        check_namespaced_name(report, scope, &format!("{path}.serviceAccount"), sa);
    }
    if let Some(service) = &entry.service {
        check_namespaced_name(report, scope, &format!("{path}.service"), service);
    }
}

fn applied_to_fields(entry: &AppliedTo) -> Vec<&'static str> {
    [
        ("podSelector", entry.pod_selector.is_some()),
        ("namespaceSelector", entry.namespace_selector.is_some()),
        ("nodeSelector", entry.node_selector.is_some()),
        ("group", entry.group.is_some()),
        ("serviceAccount", entry.service_account.is_some()),
        ("service", entry.service.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, set)| set.then_some(name))
    .collect()
}

fn peer_fields(peer: &Peer) -> Vec<&'static str> {
    [
        ("podSelector", peer.pod_selector.is_some()),
        ("namespaceSelector", peer.namespace_selector.is_some()),
        ("namespaces", peer.namespaces.is_some()),
        ("nodeSelector", peer.node_selector.is_some()),
        ("group", peer.group.is_some()),
        ("serviceAccount", peer.service_account.is_some()),
        ("ipBlock", peer.ip_block.is_some()),
        ("fqdn", peer.fqdn.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, set)| set.then_some(name))
    .collect()
}

fn others(fields: &[&str], this: &str) -> String {
    fields
        .iter()
        .filter(|f| **f != this)
        .copied()
        .collect::<Vec<_>>()
        .join(", ")
}

/// A `{name, namespace}` reference: the name is required, and so is the
/// Namespace where the referring object is cluster-scoped.
fn check_namespaced_name(report: &mut Report<'_>, scope: Scope, path: &str, r: &NamespacedName) {
    if r.name.is_empty() {
        report.add(format!("{path}.name"), "must not be empty");
    }
    if scope == Scope::Cluster && r.namespace.is_empty() {
        report.add(
            format!("{path}.namespace"),
            "must be set in a cluster-scoped object",
        );
    }
}

/// Reports a `group:` reference that does not resolve; returns the group.
fn check_group_ref<'a>(
    report: &mut Report<'_>,
    index: &Index<'a>,
    scope: Scope,
    path: &str,
    name: &str,
) -> Option<&'a AntreaGroup> {
    if name.is_empty() {
        report.add(path, "must not be empty");
        return None;
    }
    let found = index.group(scope, name);
    if found.is_none() {
        let reason = match scope {
            Scope::Cluster => format!("ClusterGroup `{name}` does not exist"),
            Scope::Namespace(ns) => format!("Group `{name}` does not exist in Namespace {ns}"),
        };
        report.add(path, reason);
    }
    found
}

fn check_rule(
    report: &mut Report<'_>,
    index: &Index<'_>,
    scope: Scope,
    direction: Direction,
    path: &str,
    rule: &Rule,
    in_baseline: bool,
) {
    let action = rule.action.normalized();
    if in_baseline && action == RuleAction::Pass {
        report.add(
            format!("{path}.action"),
            "Pass is not allowed in the baseline Tier",
        );
    }
    match direction {
        Direction::Ingress => {
            if !rule.to.is_empty() {
                report.add(
                    format!("{path}.to"),
                    "ingress rules select peers with `from`, not `to`",
                );
            }
            if !rule.to_services.is_empty() {
                report.add(format!("{path}.toServices"), "only allowed in egress rules");
            }
        }
        Direction::Egress => {
            if !rule.from.is_empty() {
                report.add(
                    format!("{path}.from"),
                    "egress rules select peers with `to`, not `from`",
                );
            }
        }
    }
    if !rule.to_services.is_empty() && (!rule.to.is_empty() || !rule.ports.is_empty()) {
        report.add(
            format!("{path}.toServices"),
            "cannot be used with `to` or `ports` in the same rule",
        );
    }
    for (i, service) in rule.to_services.iter().enumerate() {
        if service.name.is_empty() {
            report.add(format!("{path}.toServices[{i}].name"), "must not be empty");
        }
    }

    for (i, peer) in rule.from.iter().enumerate() {
        check_peer(
            report,
            index,
            scope,
            &format!("{path}.from[{i}]"),
            peer,
            false,
        );
    }
    for (i, peer) in rule.to.iter().enumerate() {
        let in_egress_to = direction == Direction::Egress;
        check_peer(
            report,
            index,
            scope,
            &format!("{path}.to[{i}]"),
            peer,
            in_egress_to,
        );
    }
    for (i, port) in rule.ports.iter().enumerate() {
        check_antrea_port(report, &format!("{path}.ports[{i}]"), port);
    }
    check_protocols(report, direction, path, rule);
    check_l7(report, path, rule);

    if direction == Direction::Egress && matches!(action, RuleAction::Pass | RuleAction::Reject) {
        for (i, peer) in rule.to.iter().enumerate() {
            if peer
                .ip_block
                .as_ref()
                .is_some_and(|b| is_multicast(&b.cidr))
            {
                report.add(
                    format!("{path}.action"),
                    format!(
                        "{action:?} is not supported for multicast traffic ({path}.to[{i}].ipBlock is a multicast range)"
                    ),
                );
                break;
            }
        }
    }
}

fn is_multicast(net: &IpNet) -> bool {
    let net = net.trunc();
    match net {
        IpNet::V4(v4) => v4.prefix_len() >= 4 && v4.network().is_multicast(),
        IpNet::V6(v6) => v6.prefix_len() >= 8 && v6.network().is_multicast(),
    }
}

/// One `from` / `to` entry of an Antrea-native rule. `in_egress_to` is true
/// only for the `to` of an egress rule, the one place `fqdn` is allowed.
fn check_peer(
    report: &mut Report<'_>,
    index: &Index<'_>,
    scope: Scope,
    path: &str,
    peer: &Peer,
    in_egress_to: bool,
) {
    let fields = peer_fields(peer);
    if fields.is_empty() {
        report.add(
            path,
            "empty peer: set one of podSelector, namespaceSelector, namespaces, nodeSelector, group, serviceAccount, ipBlock or fqdn",
        );
        return;
    }
    for field in ["group", "serviceAccount", "nodeSelector", "ipBlock", "fqdn"] {
        if fields.contains(&field) && fields.len() > 1 {
            report.add(
                format!("{path}.{field}"),
                format!(
                    "cannot be set with other fields in the same peer (also set: {})",
                    others(&fields, field)
                ),
            );
            break;
        }
    }
    if let Some(namespaces) = &peer.namespaces {
        if let Scope::Namespace(_) = scope {
            report.add(
                format!("{path}.namespaces"),
                "not supported in an Antrea NetworkPolicy, which is scoped to one Namespace",
            );
        }
        if peer.namespace_selector.is_some() {
            report.add(
                format!("{path}.namespaces"),
                "cannot be set with namespaceSelector in the same peer",
            );
        }
        match (
            namespaces.match_.is_some(),
            namespaces.same_labels.is_empty(),
        ) {
            (true, false) => report.add(
                format!("{path}.namespaces"),
                "set only one of match or sameLabels",
            ),
            (false, true) => report.add(
                format!("{path}.namespaces"),
                "set one of match or sameLabels",
            ),
            _ => {}
        }
        for (i, key) in namespaces.same_labels.iter().enumerate() {
            if key.is_empty() {
                report.add(
                    format!("{path}.namespaces.sameLabels[{i}]"),
                    "must not be empty",
                );
            }
        }
    }
    if let Some(fqdn) = &peer.fqdn {
        if !in_egress_to {
            report.add(
                format!("{path}.fqdn"),
                "fqdn is only allowed in the `to` of egress rules",
            );
        }
        if fqdn.trim().is_empty() {
            report.add(format!("{path}.fqdn"), "must not be empty");
        } else if fqdn.chars().any(|c| c.is_whitespace()) {
            report.add(format!("{path}.fqdn"), "must not contain whitespace");
        }
    }
    if let Some(block) = &peer.ip_block {
        check_ip_block(report, &format!("{path}.ipBlock"), block);
    }
    if let Some(group) = peer.group.as_deref() {
        check_group_ref(report, index, scope, &format!("{path}.group"), group);
    }
    if let Some(sa) = &peer.service_account {
        check_namespaced_name(report, scope, &format!("{path}.serviceAccount"), sa);
    }
}

/// `except` entries must lie strictly inside `cidr`, in the same family.
fn check_ip_block(report: &mut Report<'_>, path: &str, block: &IpBlock) {
    check_cidr_except(report, path, &block.cidr, &block.except);
}

fn check_cidr_except(report: &mut Report<'_>, path: &str, cidr: &IpNet, except: &[IpNet]) {
    let base = cidr.trunc();
    for (i, hole) in except.iter().enumerate() {
        let field = format!("{path}.except[{i}]");
        let same_family = matches!(
            (base, hole),
            (IpNet::V4(_), IpNet::V4(_)) | (IpNet::V6(_), IpNet::V6(_))
        );
        if !same_family {
            report.add(
                field,
                format!("{hole} is not in the address family of cidr {cidr}"),
            );
        } else if !(hole.prefix_len() > base.prefix_len() && base.contains(&hole.trunc())) {
            report.add(field, format!("{hole} is not strictly inside cidr {cidr}"));
        }
    }
}

fn check_antrea_port(report: &mut Report<'_>, path: &str, port: &PolicyPort) {
    check_port(report, path, port.port.as_ref(), port.end_port);
}

fn check_k8s_port(report: &mut Report<'_>, path: &str, port: &K8sPort) {
    check_port(report, path, port.port.as_ref(), port.end_port);
}

/// `port` (number or name) and `endPort`, the same for Antrea and K8s.
fn check_port(
    report: &mut Report<'_>,
    path: &str,
    port: Option<&PortValue>,
    end_port: Option<i32>,
) {
    let number = match port {
        Some(PortValue::Number(n)) => {
            if !(1..=65535).contains(n) {
                report.add(
                    format!("{path}.port"),
                    format!("must be between 1 and 65535, got {n}"),
                );
            }
            Some(*n)
        }
        Some(PortValue::Name(name)) => {
            if let Some(reason) = port_name_problem(name) {
                report.add(format!("{path}.port"), reason);
            }
            None
        }
        None => None,
    };
    let Some(end) = end_port else {
        return;
    };
    let field = format!("{path}.endPort");
    match (port, number) {
        (None, _) => report.add(field, "requires a numeric port"),
        (Some(PortValue::Name(_)), _) => report.add(field, "cannot be used with a named port"),
        (Some(PortValue::Number(_)), Some(start)) => {
            if !(1..=65535).contains(&end) {
                report.add(field, format!("must be between 1 and 65535, got {end}"));
            } else if end < start {
                report.add(
                    field,
                    format!("must not be lower than port {start}, got {end}"),
                );
            }
        }
        (Some(PortValue::Number(_)), None) => {}
    }
}

/// A container port name as Kubernetes accepts it (IANA service name):
/// 1–15 characters, lower-case letters, digits and `-`, at least one letter,
/// no leading, trailing or doubled `-`.
fn port_name_problem(name: &str) -> Option<String> {
    let valid = !name.is_empty()
        && name.len() <= 15
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && name.chars().any(|c| c.is_ascii_lowercase())
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--");
    (!valid).then(|| {
        format!(
            "`{name}` is neither a number nor a valid port name (1-15 lower-case letters, digits and '-', with a letter)"
        )
    })
}

const IGMP_QUERY: i32 = 0x11;
const IGMP_REPORTS: [i32; 3] = [0x12, 0x16, 0x22];

fn check_protocols(report: &mut Report<'_>, direction: Direction, path: &str, rule: &Rule) {
    let mut has_icmp = false;
    let mut has_igmp = false;
    for (i, protocol) in rule.protocols.iter().enumerate() {
        let ppath = format!("{path}.protocols[{i}]");
        match (&protocol.icmp, &protocol.igmp) {
            (None, None) => {
                report.add(ppath.as_str(), "set one of icmp or igmp");
                continue;
            }
            (Some(_), Some(_)) => {
                report.add(ppath.as_str(), "set only one of icmp or igmp");
                continue;
            }
            _ => {}
        }
        if let Some(icmp) = &protocol.icmp {
            has_icmp = true;
            if let Some(t) = icmp.icmp_type {
                if !(0..=255).contains(&t) {
                    report.add(
                        format!("{ppath}.icmp.icmpType"),
                        format!("must be between 0 and 255, got {t}"),
                    );
                }
            }
            if let Some(c) = icmp.icmp_code {
                if icmp.icmp_type.is_none() {
                    report.add(format!("{ppath}.icmp.icmpCode"), "requires icmpType");
                } else if !(0..=255).contains(&c) {
                    report.add(
                        format!("{ppath}.icmp.icmpCode"),
                        format!("must be between 0 and 255, got {c}"),
                    );
                }
            }
        }
        if let Some(igmp) = &protocol.igmp {
            has_igmp = true;
            match direction {
                Direction::Ingress => {
                    if let Some(t) = igmp.igmp_type.filter(|t| *t != IGMP_QUERY) {
                        report.add(
                            format!("{ppath}.igmp.igmpType"),
                            format!("ingress rules only support the IGMP membership query (0x11), got {t:#x}"),
                        );
                    }
                    let all_hosts = IpAddr::from([224, 0, 0, 1]);
                    if let Some(addr) = igmp.group_address.filter(|a| *a != all_hosts) {
                        report.add(
                            format!("{ppath}.igmp.groupAddress"),
                            format!(
                                "IGMP queries in ingress rules can only use 224.0.0.1, got {addr}"
                            ),
                        );
                    }
                }
                Direction::Egress => {
                    if let Some(t) = igmp.igmp_type.filter(|t| !IGMP_REPORTS.contains(t)) {
                        report.add(
                            format!("{ppath}.igmp.igmpType"),
                            format!("egress rules only support IGMP membership reports (0x12, 0x16, 0x22), got {t:#x}"),
                        );
                    }
                    if let Some(addr) = igmp.group_address {
                        if !matches!(addr, IpAddr::V4(v4) if v4.is_multicast()) {
                            report.add(
                                format!("{ppath}.igmp.groupAddress"),
                                format!("must be an IPv4 multicast address, got {addr}"),
                            );
                        }
                    }
                }
            }
        }
    }
    if has_igmp {
        let mut with: Vec<&str> = Vec::new();
        if has_icmp {
            with.push("icmp");
        }
        for (field, set) in [
            ("from", !rule.from.is_empty()),
            ("to", !rule.to.is_empty()),
            ("ports", !rule.ports.is_empty()),
            ("toServices", !rule.to_services.is_empty()),
        ] {
            if set {
                with.push(field);
            }
        }
        if !with.is_empty() {
            report.add(
                format!("{path}.protocols"),
                format!("IGMP cannot be used with {}", with.join(", ")),
            );
        }
        let action = rule.action.normalized();
        if matches!(action, RuleAction::Pass | RuleAction::Reject) {
            report.add(
                format!("{path}.action"),
                format!("{action:?} is not supported for IGMP rules (use Allow or Drop)"),
            );
        }
    }
}

fn check_l7(report: &mut Report<'_>, path: &str, rule: &Rule) {
    if rule.l7_protocols.is_empty() {
        return;
    }
    if rule.action != RuleAction::Allow {
        report.add(
            format!("{path}.l7Protocols"),
            format!("can only be used with action Allow, not {:?}", rule.action),
        );
    }
    if !rule.to_services.is_empty() {
        report.add(
            format!("{path}.l7Protocols"),
            "cannot be used with toServices",
        );
    }
    if !rule.protocols.is_empty() {
        report.add(
            format!("{path}.l7Protocols"),
            "cannot be used with protocols (ICMP/IGMP)",
        );
    }
    let mut has_http = false;
    for (i, l7) in rule.l7_protocols.iter().enumerate() {
        match (&l7.http, &l7.tls) {
            (None, None) => {
                report.add(format!("{path}.l7Protocols[{i}]"), "set one of http or tls")
            }
            (Some(_), Some(_)) => report.add(
                format!("{path}.l7Protocols[{i}]"),
                "set only one of http or tls",
            ),
            _ => {}
        }
        has_http |= l7.http.is_some();
    }
    if has_http {
        for (i, port) in rule.ports.iter().enumerate() {
            if port.protocol != crate::model::PortProtocol::Tcp {
                report.add(
                    format!("{path}.ports[{i}].protocol"),
                    "HTTP rules can only use TCP ports",
                );
            }
        }
    }
}

/// The NodePort Service restrictions of ACNP `appliedTo: service`.
fn check_node_port_rule(
    report: &mut Report<'_>,
    direction: Direction,
    path: &str,
    rule: &Rule,
    policy_on_service: bool,
    rule_on_service: bool,
) {
    if direction == Direction::Egress {
        if policy_on_service {
            report.add(
                path,
                "a policy applied to a NodePort Service (spec.appliedTo) can only have ingress rules",
            );
        }
        if rule_on_service {
            report.add(
                format!("{path}.appliedTo"),
                "only ingress rules can be applied to a NodePort Service",
            );
        }
        return;
    }
    if policy_on_service || rule_on_service {
        for (i, peer) in rule.from.iter().enumerate() {
            if peer.ip_block.is_none() || peer_fields(peer).len() > 1 {
                report.add(
                    format!("{path}.from[{i}]"),
                    "a rule applied to a NodePort Service can only use ipBlock in from",
                );
            }
        }
    }
}

/// A policy uses either group references or stand-alone selectors, in
/// appliedTo and in peers, never both.
fn check_group_selector_mix(
    report: &mut Report<'_>,
    scope: Scope,
    policy_applied_to: &[AppliedTo],
    rules: &[(Direction, String, &Rule)],
) {
    let mut first_group: Option<String> = None;
    let mut first_selector: Option<String> = None;
    let mut note = |path: String, group: bool, selector: Option<&str>| {
        if group && first_group.is_none() {
            first_group = Some(format!("{path}.group"));
        }
        if let Some(field) = selector {
            if first_selector.is_none() {
                first_selector = Some(format!("{path}.{field}"));
            }
        }
    };
    let applied_to_selector = |a: &AppliedTo| {
        applied_to_fields(a)
            .into_iter()
            .find(|f| STAND_ALONE_SELECTORS.contains(f))
    };
    let peer_selector = |p: &Peer| {
        peer_fields(p)
            .into_iter()
            .find(|f| STAND_ALONE_SELECTORS.contains(f))
    };
    for (i, a) in policy_applied_to.iter().enumerate() {
        note(
            format!("spec.appliedTo[{i}]"),
            a.group.is_some(),
            applied_to_selector(a),
        );
    }
    for (_, path, rule) in rules {
        for (i, a) in rule.applied_to.iter().enumerate() {
            note(
                format!("{path}.appliedTo[{i}]"),
                a.group.is_some(),
                applied_to_selector(a),
            );
        }
        for (i, p) in rule.from.iter().enumerate() {
            note(
                format!("{path}.from[{i}]"),
                p.group.is_some(),
                peer_selector(p),
            );
        }
        for (i, p) in rule.to.iter().enumerate() {
            note(
                format!("{path}.to[{i}]"),
                p.group.is_some(),
                peer_selector(p),
            );
        }
    }
    if let (Some(group), Some(selector)) = (first_group, first_selector) {
        report.add(
            group,
            format!(
                "{} references cannot be mixed with stand-alone selectors in one policy ({selector} is a stand-alone selector)",
                scope.group_kind()
            ),
        );
    }
}

/// Fields that select workloads directly, which a policy must not mix with
/// group references. `ipBlock`, `fqdn` and `service` are addresses, not
/// selectors.
const STAND_ALONE_SELECTORS: [&str; 5] = [
    "podSelector",
    "namespaceSelector",
    "nodeSelector",
    "namespaces",
    "serviceAccount",
];

/// Rule names, given or generated, are unique within a policy.
fn check_rule_names(report: &mut Report<'_>, rules: &[(Direction, String, &Rule)]) {
    let mut seen: HashMap<String, (&str, bool)> = HashMap::new();
    for (direction, path, rule) in rules {
        let given = rule.name.as_deref().filter(|n| !n.is_empty());
        let name = rule.effective_name(*direction);
        if let Some(&(first, first_given)) = seen.get(&name) {
            let (field, reason) = match (given.is_some(), first_given) {
                (true, true) => (
                    format!("{path}.name"),
                    format!("`{name}` is already the name of {first}"),
                ),
                (true, false) => (
                    format!("{path}.name"),
                    format!("`{name}` is the generated name of {first}"),
                ),
                (false, true) => (
                    path.clone(),
                    format!("the generated name `{name}` is already the name of {first}"),
                ),
                (false, false) => (
                    path.clone(),
                    format!("duplicate rule: identical to {first} (both are named `{name}`)"),
                ),
            };
            report.add(field, reason);
        } else {
            seen.insert(name, (path.as_str(), given.is_some()));
        }
    }
}

// ------------------------------------------------------------------ groups

fn check_group(report: &mut Report<'_>, index: &Index<'_>, group: &AntreaGroup, scope: Scope) {
    let spec = &group.spec;
    let kind = scope.group_kind();
    if spec.ip_block.is_some() && !spec.ip_blocks.is_empty() {
        report.add("spec.ipBlock", "cannot be set together with ipBlocks");
    }
    let mut set: Vec<&str> = Vec::new();
    if spec.pod_selector.is_some() || spec.namespace_selector.is_some() {
        set.push("podSelector/namespaceSelector");
    }
    if spec.service_reference.is_some() {
        set.push("serviceReference");
    }
    if spec.ip_block.is_some() || !spec.ip_blocks.is_empty() {
        set.push("ipBlock(s)");
    }
    if !spec.child_groups.is_empty() {
        set.push("childGroups");
    }
    if set.len() > 1 {
        report.add(
            "spec",
            format!(
                "at most one of podSelector/namespaceSelector, serviceReference, ipBlock, ipBlocks or childGroups can be set, found {}",
                set.join(" and ")
            ),
        );
    }
    if let Some(block) = &spec.ip_block {
        check_ip_block(report, "spec.ipBlock", block);
    }
    for (i, block) in spec.ip_blocks.iter().enumerate() {
        check_ip_block(report, &format!("spec.ipBlocks[{i}]"), block);
    }
    if let Some(service) = &spec.service_reference {
        check_namespaced_name(report, scope, "spec.serviceReference", service);
    }
    let own_name = group.metadata.name.as_str();
    let mut listed = HashSet::new();
    for (i, child) in spec.child_groups.iter().enumerate() {
        let path = format!("spec.childGroups[{i}]");
        if !listed.insert(child.as_str()) {
            report.add(path, format!("`{child}` is listed twice"));
            continue;
        }
        if child == own_name {
            report.add(
                path,
                format!("a {kind} cannot list itself as a child group"),
            );
            continue;
        }
        if let Some(found) = check_group_ref(report, index, scope, &path, child) {
            if !found.spec.child_groups.is_empty() {
                report.add(
                    path,
                    format!(
                        "{kind} `{child}` has childGroups itself; only one level of nesting is supported"
                    ),
                );
            }
        }
    }
}

// ------------------------------------------------------ K8s NetworkPolicy

fn check_k8s_policy(report: &mut Report<'_>, policy: &K8sNetworkPolicy) {
    for (i, rule) in policy.spec.ingress.iter().enumerate() {
        let path = format!("spec.ingress[{i}]");
        for (j, peer) in rule.from.iter().enumerate() {
            check_k8s_peer(report, &format!("{path}.from[{j}]"), peer);
        }
        for (j, port) in rule.ports.iter().enumerate() {
            check_k8s_port(report, &format!("{path}.ports[{j}]"), port);
        }
    }
    for (i, rule) in policy.spec.egress.iter().enumerate() {
        let path = format!("spec.egress[{i}]");
        for (j, peer) in rule.to.iter().enumerate() {
            check_k8s_peer(report, &format!("{path}.to[{j}]"), peer);
        }
        for (j, port) in rule.ports.iter().enumerate() {
            check_k8s_port(report, &format!("{path}.ports[{j}]"), port);
        }
    }
}

fn check_k8s_peer(report: &mut Report<'_>, path: &str, peer: &K8sPeer) {
    let selectors = peer.pod_selector.is_some() || peer.namespace_selector.is_some();
    match &peer.ip_block {
        None if !selectors => report.add(
            path,
            "empty peer: set podSelector, namespaceSelector or ipBlock",
        ),
        Some(_) if selectors => report.add(
            format!("{path}.ipBlock"),
            "cannot be set with podSelector or namespaceSelector in the same peer",
        ),
        _ => {}
    }
    if let Some(block) = &peer.ip_block {
        check_cidr_except(
            report,
            &format!("{path}.ipBlock"),
            &block.cidr,
            &block.except,
        );
    }
}
