//! Antrea-native policies (ACNP and ANNP) as a whole: Tier and priority,
//! appliedTo at the policy level or on every rule, the appliedTo entries
//! themselves, NodePort Service restrictions, IGMP rules against the rest of
//! the policy, and unique rule names. Group references and stand-alone
//! selectors may be mixed, as Antrea admits them. Each rule's own fields are
//! `rule.rs`'s.

use std::collections::HashMap;

use crate::model::{effective_tier, AntreaPolicy, AppliedTo, Direction, Rule, BASELINE_TIER};

use super::labels::check_selector;
use super::rule::{check_rule, others, peer_fields};
use super::tier::static_tier_names;
use super::{check_group_ref, check_namespaced_name, Index, Report, Scope};

/// Policy priorities must lie in this inclusive range.
const POLICY_PRIORITY_RANGE: (f64, f64) = (1.0, 10000.0);

pub(super) fn check_policy(
    report: &mut Report<'_>,
    index: &Index<'_>,
    policy: &AntreaPolicy,
    scope: Scope,
) {
    let spec = &policy.spec;
    if let Some(tier) = spec.tier.as_deref().filter(|t| !t.is_empty()) {
        if !index.tiers.contains_key(effective_tier(Some(tier))) {
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

    check_applied_to_list(
        report,
        index,
        scope,
        "spec.appliedTo",
        &spec.applied_to,
        true,
    );
    let policy_on_service = spec.applied_to.iter().any(|a| a.service.is_some());

    let in_baseline = effective_tier(spec.tier.as_deref()) == BASELINE_TIER;
    for (direction, path, rule) in &rules {
        check_rule(report, index, scope, *direction, path, rule, in_baseline);
        check_applied_to_list(
            report,
            index,
            scope,
            &format!("{path}.appliedTo"),
            &rule.applied_to,
            false,
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

    check_igmp_rules(report, &rules);
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

/// Every appliedTo entry of one list (policy-level when `at_policy`, else
/// rule-level).
fn check_applied_to_list(
    report: &mut Report<'_>,
    index: &Index<'_>,
    scope: Scope,
    path: &str,
    entries: &[AppliedTo],
    at_policy: bool,
) {
    for (i, entry) in entries.iter().enumerate() {
        let entry_path = format!("{path}[{i}]");
        if !at_policy && entry.node_selector.is_some() {
            // Antrea's schema has no nodeSelector in a rule's appliedTo.
            report.add(
                format!("{entry_path}.nodeSelector"),
                "not allowed in a rule-level appliedTo (only in spec.appliedTo)",
            );
        }
        check_applied_to(report, index, scope, &entry_path, entry);
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
                "podSelector, namespaceSelector, nodeSelector, externalEntitySelector, group, serviceAccount or service"
            }
            Scope::Namespace(_) => "podSelector, externalEntitySelector, group or serviceAccount",
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
    for (field, selector) in [
        ("podSelector", entry.pod_selector.as_ref()),
        ("namespaceSelector", entry.namespace_selector.as_ref()),
        ("nodeSelector", entry.node_selector.as_deref()),
    ] {
        if let Some(selector) = selector {
            check_selector(report, &format!("{path}.{field}"), selector);
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
        (
            "externalEntitySelector",
            entry.external_entity_selector.is_some(),
        ),
        ("group", entry.group.is_some()),
        ("serviceAccount", entry.service_account.is_some()),
        ("service", entry.service.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, set)| set.then_some(name))
    .collect()
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

/// IGMP rules as Antrea's webhook checks them: it walks the rules (ingress
/// first) remembering whether any rule so far used IGMP or ICMP, and once
/// one used IGMP, a rule with `from`, `to`, `ports` or `toServices` (or any
/// ICMP so far) is refused, even when it is a later rule of its own.
fn check_igmp_rules(report: &mut Report<'_>, rules: &[(Direction, String, &Rule)]) {
    let mut first_igmp: Option<&str> = None;
    let mut first_icmp: Option<&str> = None;
    for (_, path, rule) in rules {
        // An entry setting both is refused on its own (rule.rs).
        for protocol in &rule.protocols {
            match (&protocol.icmp, &protocol.igmp) {
                (None, Some(_)) => {
                    first_igmp.get_or_insert(path);
                }
                (Some(_), None) => {
                    first_icmp.get_or_insert(path);
                }
                _ => {}
            }
        }
        let Some(igmp_at) = first_igmp else {
            continue;
        };
        let mut with: Vec<String> = Vec::new();
        if let Some(icmp_at) = first_icmp {
            with.push(if icmp_at == path.as_str() {
                "icmp".to_string()
            } else {
                format!("icmp (in {icmp_at})")
            });
        }
        for (field, set) in [
            ("from", !rule.from.is_empty()),
            ("to", !rule.to.is_empty()),
            ("ports", !rule.ports.is_empty()),
            ("toServices", !rule.to_services.is_empty()),
        ] {
            if set {
                with.push(field.to_string());
            }
        }
        if with.is_empty() {
            continue;
        }
        if igmp_at == path.as_str() {
            report.add(
                format!("{path}.protocols"),
                format!("IGMP cannot be used with {}", with.join(", ")),
            );
        } else {
            report.add(
                path.as_str(),
                format!(
                    "cannot use {} in a policy whose {igmp_at} uses IGMP (Antrea refuses the policy)",
                    with.join(", ")
                ),
            );
        }
        // Antrea stops at the first refusal; so does this check.
        return;
    }
}

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
