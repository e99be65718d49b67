//! The network-policy-api kinds, as their CRDs' schemas and CEL rules
//! admit them: priority ranges, rule/peer/port counts, exactly one field
//! per subject, peer, port and protocol, the actions each kind has, the
//! BaselineAdminNetworkPolicy singleton name, port ranges, CIDRs,
//! `domainNames` (pattern, egress `Accept`/`Allow` rules only) and no named
//! ports towards networks, nodes or domain names. Never checks Antrea-only
//! rules, never evaluates a selector.

use crate::model::parse_cidr;
use crate::model::{
    AnpEgressRule, AnpIngressRule, AnpPort, CnpPort, CnpProtocol, Direction, NamespacedPeer,
    NpAction, NpClusterNetworkPolicy, NpKind, NpNamespaces, NpPeer, NpPolicy, NpPortMatch, NpRule,
    NpSubject, NpTier, PortProtocol, BANP_NAME, CNP_ADMIN_TIER_PRIORITY,
};

use super::labels::{check_selector, qualified_name_problem};
use super::{Index, Report};

/// The longest rule name.
const MAX_RULE_NAME: usize = 100;
/// The longest `networks` entry.
const MAX_CIDR: usize = 43;
/// Most `networks` / `domainNames` entries in one peer.
const MAX_PEER_LIST: usize = 25;

/// The CEL message of the named-port rule, as the CRDs spell it.
pub(crate) const NAMED_PORT_PEERS: &str = "networks/nodes/domainNames peer cannot be set with namedPorts since there are no namedPorts for networks/nodes/domainNames";
/// The same rule of the BaselineAdminNetworkPolicy, which has no domainNames.
pub(crate) const BANP_NAMED_PORT_PEERS: &str =
    "networks/nodes peer cannot be set with namedPorts since there are no namedPorts for networks/nodes";
/// The CEL message of the BaselineAdminNetworkPolicy name rule.
pub(crate) const BANP_SINGLETON: &str = "Only one baseline admin network policy with metadata.name=\"default\" can be created in the cluster";
/// The CEL message of the port range rule.
pub(crate) const RANGE_ORDER: &str = "Start port must be less than End port";
/// The CEL message of the CIDR rule.
pub(crate) const INVALID_CIDR: &str = "Invalid CIDR format provided";

/// What differs between the kinds' schemas.
struct Limits {
    /// Most rules per direction, peers per rule and ports per rule.
    max_items: usize,
    actions: &'static [NpAction],
    /// The field holding a rule's ports.
    ports_field: &'static str,
    domain_names: bool,
    /// Whether the first `v1alpha1` Namespace peer shape is read.
    namespaced_peers: bool,
}

fn limits(kind: NpKind) -> Limits {
    match kind {
        NpKind::AdminNetworkPolicy => Limits {
            max_items: 100,
            actions: &[NpAction::Allow, NpAction::Deny, NpAction::Pass],
            ports_field: "ports",
            domain_names: true,
            namespaced_peers: true,
        },
        NpKind::BaselineAdminNetworkPolicy => Limits {
            max_items: 100,
            actions: &[NpAction::Allow, NpAction::Deny],
            ports_field: "ports",
            domain_names: false,
            namespaced_peers: true,
        },
        NpKind::ClusterNetworkPolicy => Limits {
            max_items: 25,
            actions: &[NpAction::Accept, NpAction::Deny, NpAction::Pass],
            ports_field: "protocols",
            domain_names: true,
            namespaced_peers: false,
        },
    }
}

/// Checks one AdminNetworkPolicy, BaselineAdminNetworkPolicy or
/// ClusterNetworkPolicy (its view, plus the version-specific port fields).
pub(super) fn check_np_policy(
    report: &mut Report<'_>,
    policy: &NpPolicy<'_>,
    v1alpha1_ports: &[(Direction, usize, &[AnpPort])],
    v1alpha2_ports: &[(Direction, usize, &[CnpProtocol])],
) {
    let limits = limits(policy.kind);
    if policy.kind == NpKind::BaselineAdminNetworkPolicy && policy.name != BANP_NAME {
        report.add("metadata.name", BANP_SINGLETON);
    }
    if let Some(priority) = policy.priority {
        if !(0..=1000).contains(&priority) {
            report.add(
                "spec.priority",
                format!("must be between 0 and 1000, got {priority}"),
            );
        }
    }
    check_subject(report, policy.subject);
    for direction in [Direction::Ingress, Direction::Egress] {
        let field = direction_field(direction);
        let rules = policy.rules(direction);
        if rules.len() > limits.max_items {
            report.add(
                format!("spec.{field}"),
                format!(
                    "must have at most {} rules, got {}",
                    limits.max_items,
                    rules.len()
                ),
            );
        }
        for (i, rule) in rules.iter().enumerate() {
            check_rule(
                report,
                policy.kind,
                &limits,
                direction,
                &format!("spec.{field}[{i}]"),
                rule,
            );
        }
    }
    for &(direction, i, ports) in v1alpha1_ports {
        let path = format!("spec.{}[{i}].ports", direction_field(direction));
        for (j, port) in ports.iter().enumerate() {
            check_anp_port(report, &format!("{path}[{j}]"), port);
        }
    }
    for &(direction, i, protocols) in v1alpha2_ports {
        let path = format!("spec.{}[{i}].protocols", direction_field(direction));
        for (j, protocol) in protocols.iter().enumerate() {
            check_cnp_protocol(report, &format!("{path}[{j}]"), protocol);
        }
    }
}

/// Antrea reserves Tier priority 220 for the Admin tier of
/// ClusterNetworkPolicies and refuses them while a custom Tier has it;
/// tollgate admits both, evaluates that Tier first, and warns.
pub(super) fn check_admin_tier_priority(
    report: &mut Report<'_>,
    index: &Index<'_>,
    policy: &NpClusterNetworkPolicy,
) {
    if policy.spec.tier != NpTier::Admin {
        return;
    }
    if let Some(tier) = index
        .custom_tiers
        .iter()
        .find(|t| t.spec.priority == CNP_ADMIN_TIER_PRIORITY)
    {
        report.warn(
            "spec.tier",
            format!(
                "Tier `{}` has priority {CNP_ADMIN_TIER_PRIORITY}, the Admin tier's: it is evaluated first (Antrea refuses ClusterNetworkPolicies while such a Tier exists)",
                tier.metadata.name
            ),
        );
    }
}

/// The `ports` of each `v1alpha1` rule that has them, by direction and index.
pub(super) fn anp_ports<'a>(
    ingress: &'a [AnpIngressRule],
    egress: &'a [AnpEgressRule],
) -> Vec<(Direction, usize, &'a [AnpPort])> {
    let ingress = ingress.iter().map(|r| (Direction::Ingress, &r.ports));
    let egress = egress.iter().map(|r| (Direction::Egress, &r.ports));
    with_index(ingress.chain(egress))
}

/// The `protocols` of each `v1alpha2` rule that has them.
pub(super) fn cnp_protocols(
    policy: &NpClusterNetworkPolicy,
) -> Vec<(Direction, usize, &[CnpProtocol])> {
    let spec = &policy.spec;
    let ingress = spec
        .ingress
        .iter()
        .map(|r| (Direction::Ingress, &r.protocols));
    let egress = spec
        .egress
        .iter()
        .map(|r| (Direction::Egress, &r.protocols));
    with_index(ingress.chain(egress))
}

/// Numbers rules within their direction and keeps those with a list.
fn with_index<'a, T: 'a>(
    rules: impl Iterator<Item = (Direction, &'a Option<Vec<T>>)>,
) -> Vec<(Direction, usize, &'a [T])> {
    let mut counts = [0usize; 2];
    let mut out = Vec::new();
    for (direction, list) in rules {
        let slot = usize::from(direction == Direction::Egress);
        if let Some(list) = list {
            out.push((direction, counts[slot], list.as_slice()));
        }
        counts[slot] += 1;
    }
    out
}

fn direction_field(direction: Direction) -> &'static str {
    match direction {
        Direction::Ingress => "ingress",
        Direction::Egress => "egress",
    }
}

fn check_subject(report: &mut Report<'_>, subject: &NpSubject) {
    match (&subject.namespaces, &subject.pods) {
        (Some(namespaces), None) => check_selector(report, "spec.subject.namespaces", namespaces),
        (None, Some(pods)) => {
            check_selector(
                report,
                "spec.subject.pods.namespaceSelector",
                &pods.namespace_selector,
            );
            check_selector(report, "spec.subject.pods.podSelector", &pods.pod_selector);
        }
        _ => report.add(
            "spec.subject",
            "exactly one of namespaces or pods must be set",
        ),
    }
}

fn check_rule(
    report: &mut Report<'_>,
    kind: NpKind,
    limits: &Limits,
    direction: Direction,
    path: &str,
    rule: &NpRule<'_>,
) {
    if let Some(name) = rule.name {
        if name.chars().count() > MAX_RULE_NAME {
            report.add(
                format!("{path}.name"),
                format!("must be at most {MAX_RULE_NAME} characters"),
            );
        }
    }
    if !limits.actions.contains(&rule.action) {
        let allowed: Vec<&str> = limits.actions.iter().map(|a| a.as_str()).collect();
        report.add(
            format!("{path}.action"),
            format!(
                "`{}` is not an action of {}: use one of {}",
                rule.action.as_str(),
                kind_name(kind),
                allowed.join(", ")
            ),
        );
    }
    let peers_field = match direction {
        Direction::Ingress => "from",
        Direction::Egress => "to",
    };
    if rule.peers.is_empty() {
        report.add(format!("{path}.{peers_field}"), "must have at least 1 peer");
    } else if rule.peers.len() > limits.max_items {
        report.add(
            format!("{path}.{peers_field}"),
            format!(
                "must have at most {} peers, got {}",
                limits.max_items,
                rule.peers.len()
            ),
        );
    }
    if let Some(ports) = &rule.ports {
        let field = format!("{path}.{}", limits.ports_field);
        if ports.is_empty() {
            report.add(field, "must have at least 1 item when set");
        } else if ports.len() > limits.max_items {
            report.add(
                field,
                format!(
                    "must have at most {} items, got {}",
                    limits.max_items,
                    ports.len()
                ),
            );
        }
    }
    for (j, peer) in rule.peers.iter().enumerate() {
        let ppath = format!("{path}.{peers_field}[{j}]");
        check_peer(report, limits, direction, &ppath, peer);
        if peer.domain_names.is_some()
            && direction == Direction::Egress
            && limits.domain_names
            && !matches!(rule.action, NpAction::Allow | NpAction::Accept)
        {
            report.add(
                format!("{ppath}.domainNames"),
                format!(
                    "is only allowed in {} rules",
                    if kind == NpKind::ClusterNetworkPolicy {
                        "Accept"
                    } else {
                        "Allow"
                    }
                ),
            );
        }
    }
    let named = rule
        .ports
        .iter()
        .flatten()
        .any(|p| matches!(p, NpPortMatch::Named(_)));
    let addressed = rule
        .peers
        .iter()
        .any(|p| p.networks.is_some() || p.nodes.is_some() || p.domain_names.is_some());
    if direction == Direction::Egress && named && addressed {
        report.add(
            path,
            if kind == NpKind::BaselineAdminNetworkPolicy {
                BANP_NAMED_PORT_PEERS
            } else {
                NAMED_PORT_PEERS
            },
        );
    }
}

fn kind_name(kind: NpKind) -> &'static str {
    match kind {
        NpKind::AdminNetworkPolicy => "AdminNetworkPolicy",
        NpKind::BaselineAdminNetworkPolicy => "BaselineAdminNetworkPolicy",
        NpKind::ClusterNetworkPolicy => "ClusterNetworkPolicy",
    }
}

fn check_peer(
    report: &mut Report<'_>,
    limits: &Limits,
    direction: Direction,
    path: &str,
    peer: &NpPeer,
) {
    let fields = peer.fields();
    let admitted: &[&str] = match direction {
        Direction::Ingress => &["namespaces", "pods"],
        Direction::Egress if limits.domain_names => {
            &["namespaces", "pods", "nodes", "networks", "domainNames"]
        }
        Direction::Egress => &["namespaces", "pods", "nodes", "networks"],
    };
    if fields.len() != 1 {
        report.add(
            path,
            format!(
                "exactly one of {} must be set, got {}",
                admitted.join(", "),
                if fields.is_empty() {
                    "none".to_string()
                } else {
                    fields.join(", ")
                }
            ),
        );
    }
    for field in &fields {
        if !admitted.contains(field) {
            report.add(
                format!("{path}.{field}"),
                format!(
                    "is not a {} peer here: use one of {}",
                    direction.as_str().to_ascii_lowercase(),
                    admitted.join(", ")
                ),
            );
        }
    }
    match &peer.namespaces {
        Some(NpNamespaces::Selector(selector)) => {
            check_selector(report, &format!("{path}.namespaces"), selector)
        }
        Some(NpNamespaces::Peer(namespaced)) => {
            check_namespaced_peer(report, limits, &format!("{path}.namespaces"), namespaced)
        }
        None => {}
    }
    if let Some(pods) = &peer.pods {
        match (&pods.namespace_selector, &pods.namespaces) {
            (Some(selector), None) => {
                check_selector(report, &format!("{path}.pods.namespaceSelector"), selector)
            }
            (None, Some(namespaced)) => check_namespaced_peer(
                report,
                limits,
                &format!("{path}.pods.namespaces"),
                namespaced,
            ),
            _ => report.add(
                format!("{path}.pods"),
                "exactly one of namespaceSelector or namespaces must be set",
            ),
        }
        check_selector(
            report,
            &format!("{path}.pods.podSelector"),
            &pods.pod_selector,
        );
    }
    if let Some(selector) = &peer.nodes {
        check_selector(report, &format!("{path}.nodes"), selector);
    }
    if let Some(networks) = &peer.networks {
        check_list_len(report, &format!("{path}.networks"), networks.len());
        for (k, cidr) in networks.iter().enumerate() {
            let field = format!("{path}.networks[{k}]");
            if cidr.len() > MAX_CIDR {
                report.add(field, format!("must be at most {MAX_CIDR} characters"));
            } else if parse_cidr(cidr).is_none() {
                report.add(field, format!("{INVALID_CIDR}: `{cidr}`"));
            }
        }
    }
    if let Some(names) = &peer.domain_names {
        check_list_len(report, &format!("{path}.domainNames"), names.len());
        for (k, name) in names.iter().enumerate() {
            if !is_domain_name(name) {
                report.add(
                    format!("{path}.domainNames[{k}]"),
                    format!(
                        "`{name}` is not a domain name: letters, digits, '-' and '_' in dot-separated labels, optionally starting with `*.`"
                    ),
                );
            }
        }
    }
}

/// The first `v1alpha1` Namespace peer shape: only in AdminNetworkPolicy
/// and BaselineAdminNetworkPolicy, exactly one field, label keys as
/// selectors spell them.
fn check_namespaced_peer(
    report: &mut Report<'_>,
    limits: &Limits,
    path: &str,
    peer: &NamespacedPeer,
) {
    if !limits.namespaced_peers {
        report.add(
            path,
            "namespaceSelector, sameLabels and notSameLabels are the v1alpha1 peer shape: in v1alpha2 write a label selector",
        );
        return;
    }
    if peer.matching().is_none() {
        report.add(
            path,
            "exactly one of namespaceSelector, sameLabels or notSameLabels must be set",
        );
    }
    if let Some(selector) = &peer.namespace_selector {
        check_selector(report, &format!("{path}.namespaceSelector"), selector);
    }
    for (field, keys) in [
        ("sameLabels", &peer.same_labels),
        ("notSameLabels", &peer.not_same_labels),
    ] {
        let Some(keys) = keys else {
            continue;
        };
        if keys.is_empty() {
            report.add(format!("{path}.{field}"), "must have at least 1 item");
        }
        for (k, key) in keys.iter().enumerate() {
            if let Some(reason) = qualified_name_problem(key) {
                report.add(
                    format!("{path}.{field}[{k}]"),
                    format!("invalid label key `{key}`: {reason}"),
                );
            }
        }
    }
}

fn check_list_len(report: &mut Report<'_>, path: &str, len: usize) {
    if len == 0 {
        report.add(path, "must have at least 1 item");
    } else if len > MAX_PEER_LIST {
        report.add(
            path,
            format!("must have at most {MAX_PEER_LIST} items, got {len}"),
        );
    }
}

/// The CRD's `DomainName` pattern:
/// `^(\*\.)?([a-zA-z0-9]([-a-zA-Z0-9_]*[a-zA-Z0-9])?\.)+[a-zA-z0-9]([-a-zA-Z0-9_]*[a-zA-Z0-9])?\.?$`
/// — at least two labels, an optional leading `*.` and an optional
/// trailing dot. (The schema's `A-z` range also admits `[\]^_` and a
/// backtick as first label characters; tollgate reads it as meant,
/// letters and digits.)
pub(crate) fn is_domain_name(name: &str) -> bool {
    let name = name.strip_prefix("*.").unwrap_or(name);
    let name = name.strip_suffix('.').unwrap_or(name);
    let labels: Vec<&str> = name.split('.').collect();
    labels.len() >= 2 && labels.iter().all(|l| is_label(l))
}

fn is_label(label: &str) -> bool {
    let bytes = label.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
}

fn check_port_number(report: &mut Report<'_>, path: &str, n: i32) {
    if !(1..=65535).contains(&n) {
        report.add(path, format!("must be between 1 and 65535, got {n}"));
    }
}

fn check_range(report: &mut Report<'_>, path: &str, start: i32, end: i32) {
    check_port_number(report, &format!("{path}.start"), start);
    check_port_number(report, &format!("{path}.end"), end);
    if start >= end {
        report.add(path, RANGE_ORDER);
    }
}

fn check_named_port(report: &mut Report<'_>, path: &str, name: &str) {
    if name.is_empty() {
        report.add(path, "must not be empty");
    }
}

fn check_anp_port(report: &mut Report<'_>, path: &str, port: &AnpPort) {
    let set = [
        port.port_number.is_some(),
        port.named_port.is_some(),
        port.port_range.is_some(),
    ]
    .iter()
    .filter(|s| **s)
    .count();
    if set != 1 {
        report.add(
            path,
            "exactly one of portNumber, namedPort or portRange must be set",
        );
    }
    if let Some(number) = &port.port_number {
        check_port_number(report, &format!("{path}.portNumber.port"), number.port);
    }
    if let Some(name) = &port.named_port {
        check_named_port(report, &format!("{path}.namedPort"), name);
    }
    if let Some(range) = &port.port_range {
        check_range(report, &format!("{path}.portRange"), range.start, range.end);
    }
}

fn check_cnp_protocol(report: &mut Report<'_>, path: &str, protocol: &CnpProtocol) {
    let transports = [
        ("tcp", PortProtocol::Tcp, &protocol.tcp),
        ("udp", PortProtocol::Udp, &protocol.udp),
        ("sctp", PortProtocol::Sctp, &protocol.sctp),
    ];
    let set = transports.iter().filter(|(_, _, p)| p.is_some()).count()
        + usize::from(protocol.destination_named_port.is_some());
    if set != 1 {
        report.add(
            path,
            "exactly one of tcp, udp, sctp or destinationNamedPort must be set",
        );
    }
    for (field, _, ports) in transports {
        let Some(ports) = ports else {
            continue;
        };
        let ppath = format!("{path}.{field}");
        match &ports.destination_port {
            None => report.add(ppath, "must set destinationPort"),
            Some(port) => check_cnp_port(report, &format!("{ppath}.destinationPort"), port),
        }
    }
    if let Some(name) = &protocol.destination_named_port {
        check_named_port(report, &format!("{path}.destinationNamedPort"), name);
    }
}

fn check_cnp_port(report: &mut Report<'_>, path: &str, port: &CnpPort) {
    match (&port.number, &port.range) {
        (Some(n), None) => check_port_number(report, &format!("{path}.number"), *n),
        (None, Some(range)) => {
            check_range(report, &format!("{path}.range"), range.start, range.end)
        }
        _ => report.add(path, "exactly one of number or range must be set"),
    }
}

#[cfg(test)]
mod tests;
