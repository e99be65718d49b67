//! ClusterGroups and Groups: one way of selecting members (Pod, Node or
//! ExternalEntity selectors, a Service, ipBlocks or child groups), valid
//! selectors and ipBlocks (not multicast and unicast together), and child
//! groups that are listed once, are not the group itself and nest one level
//! deep. A child group not defined (yet) is only a warning, as Antrea admits
//! it. Never resolves members: that is the compiler's job.

use std::collections::HashSet;

use crate::model::{AntreaGroup, GroupSpec};

use super::labels::check_selector;
use super::rule::{check_ip_block, is_multicast};
use super::{check_group_ref, check_namespaced_name, Index, Report, Scope};

pub(super) fn check_group(
    report: &mut Report<'_>,
    index: &Index<'_>,
    group: &AntreaGroup,
    scope: Scope,
) {
    let spec = &group.spec;
    let kind = scope.group_kind();
    if spec.ip_block.is_some() && !spec.ip_blocks.is_empty() {
        report.add("spec.ipBlock", "cannot be set together with ipBlocks");
    }
    check_member_fields(report, spec, scope);
    for (field, selector) in [
        ("podSelector", &spec.pod_selector),
        ("namespaceSelector", &spec.namespace_selector),
        ("nodeSelector", &spec.node_selector),
        ("externalEntitySelector", &spec.external_entity_selector),
    ] {
        if let Some(selector) = selector {
            check_selector(report, &format!("spec.{field}"), selector);
        }
    }
    if let Some(block) = &spec.ip_block {
        check_ip_block(report, "spec.ipBlock", block);
    }
    for (i, block) in spec.ip_blocks.iter().enumerate() {
        check_ip_block(report, &format!("spec.ipBlocks[{i}]"), block);
    }
    check_ip_blocks_cast(report, group);
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

/// The webhook's rule: one way of selecting members, except that
/// `namespaceSelector` goes with `podSelector` or `externalEntitySelector`.
/// Only a ClusterGroup selects Nodes (a Group's schema has no `nodeSelector`).
fn check_member_fields(report: &mut Report<'_>, spec: &GroupSpec, scope: Scope) {
    let group_selects_nodes = matches!(scope, Scope::Cluster);
    if spec.node_selector.is_some() && !group_selects_nodes {
        report.add(
            "spec.nodeSelector",
            "a Group cannot select Nodes (only a ClusterGroup can)",
        );
    }
    let set: Vec<&str> = [
        (spec.pod_selector.is_some(), "podSelector"),
        (spec.namespace_selector.is_some(), "namespaceSelector"),
        (
            spec.node_selector.is_some() && group_selects_nodes,
            "nodeSelector",
        ),
        (
            spec.external_entity_selector.is_some(),
            "externalEntitySelector",
        ),
        (spec.service_reference.is_some(), "serviceReference"),
        (
            spec.ip_block.is_some() || !spec.ip_blocks.is_empty(),
            if spec.ip_block.is_some() {
                "ipBlock"
            } else {
                "ipBlocks"
            },
        ),
        (!spec.child_groups.is_empty(), "childGroups"),
    ]
    .into_iter()
    .filter_map(|(is_set, name)| is_set.then_some(name))
    .collect();
    let allowed_pair = matches!(
        set.as_slice(),
        ["podSelector", "namespaceSelector"] | ["namespaceSelector", "externalEntitySelector"]
    );
    if set.len() > 1 && !allowed_pair {
        let fields = if group_selects_nodes {
            "podSelector, nodeSelector, externalEntitySelector, serviceReference, ipBlock, ipBlocks or childGroups"
        } else {
            "podSelector, externalEntitySelector, serviceReference, ipBlocks or childGroups"
        };
        report.add(
            "spec",
            format!(
                "at most one of {fields} can be set (namespaceSelector only with podSelector or externalEntitySelector), found {}",
                set.join(" and ")
            ),
        );
    }
}

/// A group's ipBlocks are all multicast or all unicast, as Antrea requires.
fn check_ip_blocks_cast(report: &mut Report<'_>, group: &AntreaGroup) {
    let multicast = group
        .spec
        .ip_blocks
        .iter()
        .position(|b| is_multicast(&b.cidr));
    let unicast = group
        .spec
        .ip_blocks
        .iter()
        .position(|b| !is_multicast(&b.cidr));
    if let (Some(m), Some(u)) = (multicast, unicast) {
        report.add(
            "spec.ipBlocks",
            format!(
                "multicast and unicast addresses cannot be mixed (ipBlocks[{m}] is multicast, ipBlocks[{u}] is unicast)"
            ),
        );
    }
}
