//! ClusterGroups and Groups: one way of selecting members (selectors, a
//! Service, ipBlocks or child groups), valid selectors and ipBlocks (not
//! multicast and unicast together), and child groups that are listed once,
//! are not the group itself and nest one level deep. A child group not
//! defined (yet) is only a warning, as Antrea admits it. Never resolves
//! members: that is the compiler's job.

use std::collections::HashSet;

use crate::model::AntreaGroup;

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
    for (field, selector) in [
        ("podSelector", &spec.pod_selector),
        ("namespaceSelector", &spec.namespace_selector),
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
