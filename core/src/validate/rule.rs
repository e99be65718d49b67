//! One rule of an Antrea-native policy: action, direction-specific fields,
//! `from`/`to` peers, `ports` (also used by Kubernetes NetworkPolicies),
//! ICMP and IGMP `protocols`, and `l7Protocols`. Also the field checks that
//! groups and Kubernetes NetworkPolicies share: ipBlock `except` and ports.
//! One rule at a time: comparing rules with each other is `policy.rs`'s.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::model::{Direction, IpBlock, Peer, PolicyPort, PortValue, Rule, RuleAction};

use super::labels::{check_selector, label_value_problem, qualified_name_problem};
use super::{check_group_ref, check_namespaced_name, Index, Report, Scope};

pub(super) fn check_rule(
    report: &mut Report<'_>,
    index: &Index<'_>,
    scope: Scope,
    direction: Direction,
    path: &str,
    rule: &Rule,
    in_baseline: bool,
) {
    let action = rule.action;
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
    if !rule.to_services.is_empty()
        && (!rule.to.is_empty() || !rule.ports.is_empty() || !rule.protocols.is_empty())
    {
        report.add(
            format!("{path}.toServices"),
            "cannot be used with `to`, `ports` or `protocols` in the same rule",
        );
    }
    for (i, service) in rule.to_services.iter().enumerate() {
        let at = format!("{path}.toServices[{i}]");
        if service.name.is_empty() {
            report.add(format!("{at}.name"), "must not be empty");
        }
        // Antrea's ClusterNetworkPolicy CRD requires it; a namespaced
        // policy's reference defaults to the policy's Namespace.
        if scope == Scope::Cluster && service.namespace.is_empty() {
            report.add(
                format!("{at}.namespace"),
                "must not be empty in a cluster-scoped policy",
            );
        }
        match service.scope.as_deref() {
            None | Some("Cluster") => {}
            Some("ClusterSet") => report.warn(
                format!("{at}.scope"),
                "a ClusterSet Service is imported by Antrea Multicluster, which tollgate does not read: this reference selects nothing",
            ),
            // The ClusterNetworkPolicy CRD's enum.
            Some(other) if scope == Scope::Cluster => report.add(
                format!("{at}.scope"),
                format!("must be Cluster or ClusterSet, got `{other}`"),
            ),
            Some(other) => report.warn(
                format!("{at}.scope"),
                format!("`{other}` is neither Cluster nor ClusterSet: read as Cluster, as Antrea's controller reads it"),
            ),
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
    if let Some(label) = &rule.log_label {
        // Antrea's schema: the shape of a label value.
        if let Some(reason) = label_value_problem(label) {
            report.add(
                format!("{path}.logLabel"),
                format!("invalid log label `{label}`: {reason}"),
            );
        }
    }

    if direction == Direction::Egress {
        check_multicast_peers(report, path, rule);
    }
}

/// Whether an ipBlock is a multicast address, read as Antrea reads it: the
/// address as written in `cidr`.
pub(super) fn is_multicast(net: &IpNet) -> bool {
    net.addr().is_multicast()
}

/// Multicast ipBlocks in the `to` of an egress rule: not with unicast
/// ipBlocks, not with selectors in the same peer, and not with Pass or
/// Reject.
fn check_multicast_peers(report: &mut Report<'_>, path: &str, rule: &Rule) {
    let mut first_multicast: Option<usize> = None;
    let mut first_unicast: Option<usize> = None;
    for (i, peer) in rule.to.iter().enumerate() {
        let Some(block) = &peer.ip_block else {
            continue;
        };
        if !is_multicast(&block.cidr) {
            first_unicast.get_or_insert(i);
            continue;
        }
        first_multicast.get_or_insert(i);
        let selectors = peer.pod_selector.is_some()
            || peer.namespace_selector.is_some()
            || peer.namespaces.is_some()
            || peer.service_account.is_some()
            || peer.node_selector.is_some();
        if selectors {
            report.add(
                format!("{path}.to[{i}].ipBlock"),
                "a multicast address cannot be set with selectors in the same peer",
            );
        }
    }
    let Some(multicast) = first_multicast else {
        return;
    };
    if matches!(rule.action, RuleAction::Pass | RuleAction::Reject) {
        report.add(
            format!("{path}.action"),
            format!(
                "{:?} is not supported for multicast traffic ({path}.to[{multicast}].ipBlock is a multicast address)",
                rule.action
            ),
        );
    }
    if let Some(unicast) = first_unicast {
        report.add(
            format!("{path}.to"),
            format!(
                "multicast and unicast addresses cannot be mixed in one rule (to[{multicast}] is multicast, to[{unicast}] is unicast)"
            ),
        );
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
            "empty peer: set one of podSelector, namespaceSelector, namespaces, nodeSelector, externalEntitySelector, group, serviceAccount, ipBlock or fqdn",
        );
        return;
    }
    let mut exclusive = false;
    for field in ["group", "serviceAccount", "nodeSelector"] {
        if fields.contains(&field) && fields.len() > 1 {
            report.add(
                format!("{path}.{field}"),
                format!(
                    "cannot be set with other fields in the same peer (also set: {})",
                    others(&fields, field)
                ),
            );
            exclusive = true;
            break;
        }
    }
    if !exclusive && fields.len() > 1 {
        // Antrea admits ipBlock or fqdn with other fields and keeps only the
        // first of ipBlock > fqdn > selectors; the compiler does the same.
        if let Some(kept) = ["ipBlock", "fqdn"].into_iter().find(|f| fields.contains(f)) {
            report.warn(
                format!("{path}.{kept}"),
                format!(
                    "only {kept} is used in this peer, as in Antrea; ignored: {}",
                    others(&fields, kept)
                ),
            );
        }
    }
    for (field, selector) in [
        ("podSelector", peer.pod_selector.as_ref()),
        ("namespaceSelector", peer.namespace_selector.as_ref()),
        ("nodeSelector", peer.node_selector.as_deref()),
    ] {
        if let Some(selector) = selector {
            check_selector(report, &format!("{path}.{field}"), selector);
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
            if let Some(reason) = qualified_name_problem(key) {
                report.add(
                    format!("{path}.namespaces.sameLabels[{i}]"),
                    format!("invalid label key `{key}`: {reason}"),
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
        if fqdn.is_empty() {
            report.add(format!("{path}.fqdn"), "must not be empty");
        } else if !fqdn
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '*'))
        {
            report.add(
                format!("{path}.fqdn"),
                format!("invalid characters in `{fqdn}`: only letters, digits, '-', '.' and '*' are allowed"),
            );
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

pub(super) fn peer_fields(peer: &Peer) -> Vec<&'static str> {
    [
        ("podSelector", peer.pod_selector.is_some()),
        ("namespaceSelector", peer.namespace_selector.is_some()),
        ("namespaces", peer.namespaces.is_some()),
        ("nodeSelector", peer.node_selector.is_some()),
        (
            "externalEntitySelector",
            peer.external_entity_selector.is_some(),
        ),
        ("group", peer.group.is_some()),
        ("serviceAccount", peer.service_account.is_some()),
        ("ipBlock", peer.ip_block.is_some()),
        ("fqdn", peer.fqdn.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, set)| set.then_some(name))
    .collect()
}

pub(super) fn others(fields: &[&str], this: &str) -> String {
    fields
        .iter()
        .filter(|f| **f != this)
        .copied()
        .collect::<Vec<_>>()
        .join(", ")
}

/// `except` entries must lie strictly inside `cidr`, in the same family.
pub(super) fn check_ip_block(report: &mut Report<'_>, path: &str, block: &IpBlock) {
    check_cidr_except(report, path, &block.cidr, &block.except);
}

pub(super) fn check_cidr_except(
    report: &mut Report<'_>,
    path: &str,
    cidr: &IpNet,
    except: &[IpNet],
) {
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
    check_source_ports(report, path, port.source_port, port.source_end_port);
}

/// `sourcePort`..`sourceEndPort`: the webhook's rules (`sourceEndPort` needs
/// `sourcePort` and is not lower) plus the port range `port` has.
fn check_source_ports(
    report: &mut Report<'_>,
    path: &str,
    source_port: Option<i32>,
    source_end_port: Option<i32>,
) {
    let in_range = |field: &str, n: i32, report: &mut Report<'_>| {
        let ok = (1..=65535).contains(&n);
        if !ok {
            report.add(
                format!("{path}.{field}"),
                format!("must be between 1 and 65535, got {n}"),
            );
        }
        ok
    };
    let start = source_port.filter(|&n| in_range("sourcePort", n, report));
    let Some(end) = source_end_port else {
        return;
    };
    let field = format!("{path}.sourceEndPort");
    if source_port.is_none() {
        report.add(field, "requires sourcePort");
    } else if in_range("sourceEndPort", end, report) {
        if let Some(start) = start.filter(|&start| end < start) {
            report.add(
                field,
                format!("must not be lower than sourcePort {start}, got {end}"),
            );
        }
    }
}

/// `port` (number or name) and `endPort`, the same for Antrea and K8s.
pub(super) fn check_port(
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
                }
                Direction::Egress => {
                    if let Some(t) = igmp.igmp_type.filter(|t| !IGMP_REPORTS.contains(t)) {
                        report.add(
                            format!("{ppath}.igmp.igmpType"),
                            format!("egress rules only support IGMP membership reports (0x12, 0x16, 0x22), got {t:#x}"),
                        );
                    }
                }
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
    if has_igmp {
        let action = rule.action;
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
            if port.protocol() != crate::model::PortProtocol::Tcp {
                report.add(
                    format!("{path}.ports[{i}].protocol"),
                    "HTTP rules can only use TCP ports",
                );
            }
        }
    }
}
