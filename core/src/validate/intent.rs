//! What is valid but probably not what the author meant: Antrea admits it
//! and tollgate enforces it, but it selects nothing or lets everything
//! through, and nothing else would say so. `tollgate validate` prints these
//! as warnings, and the agent logs them on every reload and lists them in
//! its status:
//! - a policy source with no objects, or no policy: every connection is
//!   allowed;
//! - no inventory: no selector can be checked;
//! - a label key that no object of the selected kind carries (a typo in a
//!   peer selector or `appliedTo`: the selector selects nothing), with the
//!   nearest key that does exist;
//! - a policy whose `appliedTo` selects no endpoint of the inventory;
//! - rules of two policies at the same Tier, priority and rule index that
//!   apply to the same endpoints with different actions and can match the
//!   same traffic ([`Ruleset::ties`]): Antrea leaves their order undefined.
//!
//! Label keys and where a policy applies are judged only against what the
//! snapshot holds whole: with [`Inventory::Local`] (the local Node and its
//! Pods only) no Pod or Node label key is judged, nor where a policy
//! applies.
//!
//! Pure: the snapshot and the rulesets compiled from it in, [`Problem`]s
//! out; it never compiles a ruleset of its own nor refuses anything.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use crate::compile::LocalNode;
use crate::model::{Kind, Object, ObjectRef, Snapshot};
use crate::ruleset::{PolicyKind, PolicyRef, RuleRef, Ruleset, Tie};
use crate::suggest::did_you_mean;

use super::{Checker, Narrows, Problem, Site};

#[cfg(test)]
mod tests;

/// What the snapshot is.
#[derive(Clone, Copy, Debug)]
pub enum Whole<'a> {
    /// A policy source read whole, as the agent reads it (a policy
    /// directory, the Kubernetes API); `origin` names it in problems about
    /// the whole (no objects, no policies, no inventory).
    Source {
        origin: &'a Path,
        inventory: Inventory,
    },
    /// Files checked on their own (a policy file without its inventory is
    /// not warned about).
    Files,
}

/// Which Pods and Nodes a source's snapshot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inventory {
    /// Every one it knows of (a policy directory, Docker, Kubernetes in
    /// watch mode).
    Whole,
    /// Only the local Node and its Pods (Kubernetes in controller mode:
    /// the peers come as AddressGroups, without labels). A Pod or Node
    /// label key no object here carries may be carried elsewhere, and a
    /// policy applying to no endpoint here applies on other Nodes: neither
    /// is warned about.
    Local,
}

/// Most endpoints a tie names before "and N more".
const MAX_NAMED_ENDPOINTS: usize = 5;

/// The local Node name used when the inventory names none.
pub const DEFAULT_NODE: &str = "local-node";

/// The Nodes the inventory names (by a Node object, a Pod's `nodeName` or
/// an ExternalEntity's `externalNode`), each as a local Node to compile
/// for, or [`DEFAULT_NODE`] alone when it names none: offline, every Node
/// is checked.
pub fn inventory_nodes(snapshot: &Snapshot) -> Vec<LocalNode> {
    let mut names = BTreeSet::new();
    for object in snapshot.iter() {
        let name = match object {
            Object::Node(node) => Some(node.metadata.name.as_str()),
            Object::Pod(pod) => pod.spec.node_name.as_deref(),
            Object::ExternalEntity(ee) => ee.spec.external_node.as_deref(),
            _ => None,
        };
        names.extend(name.filter(|n| !n.is_empty()));
    }
    if names.is_empty() {
        names.insert(DEFAULT_NODE);
    }
    names
        .into_iter()
        .map(|name| LocalNode {
            name: name.to_string(),
            ..LocalNode::default()
        })
        .collect()
}

/// The warnings about `snapshot`, given the rulesets compiled from it for
/// some of its Nodes (offline: every Node of [`inventory_nodes`]; the
/// agent: its own). Checks that need the whole inventory compiled (a
/// policy that applies nowhere) run only when `compiled` covers it.
pub fn intent(
    snapshot: &Snapshot,
    whole: Whole<'_>,
    compiled: &[(&LocalNode, &Ruleset)],
) -> Vec<Problem> {
    let mut checker = Checker::new(true);
    let (_, sites) = checker.walk(snapshot, false);
    intent_of(snapshot, whole, compiled, &sites)
}

/// [`super::check`]'s warnings and [`intent`]'s about `snapshot`, from one
/// walk of it by `checker` (which collects the selectors, and keeps what
/// it found for the next snapshot): what an agent lists at each reload.
pub fn review(
    checker: &mut Checker,
    snapshot: &Snapshot,
    whole: Whole<'_>,
    compiled: &[(&LocalNode, &Ruleset)],
) -> (Vec<Problem>, Vec<Problem>) {
    let (findings, sites) = checker.walk(snapshot, false);
    let intent = intent_of(snapshot, whole, compiled, &sites);
    (findings.warnings, intent)
}

/// [`intent`], with the selectors of `snapshot`.
fn intent_of(
    snapshot: &Snapshot,
    whole: Whole<'_>,
    compiled: &[(&LocalNode, &Ruleset)],
    sites: &[Site<'_>],
) -> Vec<Problem> {
    let mut warnings = Vec::new();
    let inventory = snapshot
        .iter()
        .any(|o| matches!(o, Object::Pod(_) | Object::Namespace(_) | Object::Node(_)));
    let mut local = false;
    if let Whole::Source {
        origin,
        inventory: held,
    } = whole
    {
        local = held == Inventory::Local;
        let about = |reason: &str| Problem {
            origin: origin.to_path_buf(),
            object: ObjectRef::default(),
            field: String::new(),
            reason: reason.to_string(),
        };
        if snapshot.objects.is_empty() {
            return vec![about(
                "no objects found: no policy applies, every connection is allowed",
            )];
        }
        if !snapshot.iter().any(is_policy) {
            warnings.push(about("no policies: every connection is allowed"));
        }
        if !inventory {
            warnings.push(about(
                "no inventory (no Pod, Namespace or Node): appliedTo and peer selectors cannot be checked",
            ));
        }
    }
    if !inventory {
        return warnings;
    }
    let labels = InventoryLabels::new(snapshot, compiled, local);
    for site in sites {
        label_keys(&mut warnings, &labels, *site, local);
    }
    if !local && covers(snapshot, compiled) {
        applied_nowhere(&mut warnings, snapshot, compiled);
    }
    ties(&mut warnings, snapshot, compiled);
    warnings
}

fn is_policy(object: &Object) -> bool {
    matches!(
        object,
        Object::ClusterNetworkPolicy(_)
            | Object::AntreaNetworkPolicy(_)
            | Object::K8sNetworkPolicy(_)
            | Object::AdminNetworkPolicy(_)
            | Object::BaselineAdminNetworkPolicy(_)
            | Object::NpClusterNetworkPolicy(_)
    )
}

/// What a selector selects, from the last part of its field path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Selects {
    Pod,
    Namespace,
    Node,
    ExternalEntity,
}

impl Selects {
    fn of(path: &str) -> Option<Selects> {
        match path.rsplit('.').next()? {
            "podSelector" => Some(Selects::Pod),
            "namespaceSelector" | "namespaces" => Some(Selects::Namespace),
            "nodeSelector" | "nodes" => Some(Selects::Node),
            "externalEntitySelector" => Some(Selects::ExternalEntity),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Selects::Pod => "Pod",
            Selects::Namespace => "Namespace",
            Selects::Node => "Node",
            Selects::ExternalEntity => "ExternalEntity",
        }
    }
}

/// The label keys the inventory's objects carry, by kind, and how many
/// objects of each kind there are.
struct InventoryLabels<'a> {
    /// Borrowed from the snapshot: collecting 1,500 Namespaces' keys at
    /// each reload copied every key.
    keys: BTreeMap<Selects, BTreeSet<&'a str>>,
    counts: BTreeMap<Selects, usize>,
}

impl<'a> InventoryLabels<'a> {
    /// With `local`, the label keys of Pods and Nodes, which are not
    /// judged, are not collected.
    fn new(
        snapshot: &'a Snapshot,
        compiled: &[(&'a LocalNode, &Ruleset)],
        local: bool,
    ) -> InventoryLabels<'a> {
        let mut labels = InventoryLabels {
            keys: BTreeMap::new(),
            counts: BTreeMap::new(),
        };
        let mut namespaces: BTreeSet<&str> = BTreeSet::new();
        for object in snapshot.iter() {
            let (selects, keys) = match object {
                Object::Pod(pod) => {
                    namespaces.insert(pod.namespace());
                    if local {
                        continue;
                    }
                    (Selects::Pod, &pod.metadata.labels)
                }
                Object::Node(_) if local => continue,
                Object::Namespace(ns) => {
                    namespaces.insert(&ns.metadata.name);
                    (Selects::Namespace, &ns.metadata.labels)
                }
                Object::Node(node) => (Selects::Node, &node.metadata.labels),
                Object::ExternalEntity(ee) => {
                    namespaces.insert(ee.namespace());
                    (Selects::ExternalEntity, &ee.metadata.labels)
                }
                _ => continue,
            };
            labels.add(selects, keys.keys().map(String::as_str));
        }
        // Namespaces a Pod lives in exist without an object, and every
        // Namespace carries its name as a label.
        let named = Selects::Namespace;
        *labels.counts.entry(named).or_default() = namespaces.len();
        if !namespaces.is_empty() {
            labels
                .keys
                .entry(named)
                .or_default()
                .insert("kubernetes.io/metadata.name");
        }
        // The local Nodes compiled for carry the labels configured too.
        for (node, _) in compiled {
            labels.add(Selects::Node, node.labels.keys().map(String::as_str));
        }
        labels
    }

    fn add(&mut self, selects: Selects, keys: impl Iterator<Item = &'a str>) {
        if selects != Selects::Namespace {
            *self.counts.entry(selects).or_default() += 1;
        }
        self.keys.entry(selects).or_default().extend(keys);
    }
}

/// A key of `site` that no object of the selected kind carries: the
/// selector selects nothing (`NotIn` and `DoesNotExist` on such a key
/// select everything, and are left alone).
/// With `local` (the snapshot holds only the local Node and its Pods),
/// Pod and Node selectors are not judged.
fn label_keys(
    warnings: &mut Vec<Problem>,
    labels: &InventoryLabels<'_>,
    (sourced, site): Site<'_>,
    local: bool,
) {
    let Some(selects) = Selects::of(&site.path) else {
        return;
    };
    if local && matches!(selects, Selects::Pod | Selects::Node) {
        return;
    }
    if labels.counts.get(&selects).copied().unwrap_or(0) == 0 {
        return;
    }
    let known = labels.keys.get(&selects);
    let carried = |key: &str| known.is_some_and(|k| k.contains(key));
    for (part, key) in site.keys.iter().filter(|(_, key)| !carried(key)) {
        let field = match part {
            Narrows::MatchLabels => format!("{}.matchLabels.{key}", site.path),
            Narrows::Expression(i) => format!("{}.matchExpressions[{i}].key", site.path),
        };
        let hint = did_you_mean(key, known.into_iter().flatten().copied());
        let kind = selects.name();
        warnings.push(Problem {
            origin: sourced.origin.to_path_buf(),
            object: sourced.object.object_ref(),
            field,
            reason: format!(
                "label key `{key}` is on no {kind} of the inventory: the selector selects no {kind}{hint}"
            ),
        });
    }
}

/// Whether `compiled` holds a ruleset for every Node an endpoint of the
/// inventory lives on (endpoints without a Node are local to any).
fn covers(snapshot: &Snapshot, compiled: &[(&LocalNode, &Ruleset)]) -> bool {
    let nodes: BTreeSet<&str> = compiled.iter().map(|(n, _)| n.name.as_str()).collect();
    let on =
        |name: Option<&String>| name.is_none_or(|n| n.is_empty() || nodes.contains(n.as_str()));
    !compiled.is_empty()
        && snapshot.iter().all(|object| match object {
            Object::Node(node) => nodes.contains(node.metadata.name.as_str()),
            Object::Pod(pod) => on(pod.spec.node_name.as_ref()),
            Object::ExternalEntity(ee) => on(ee.spec.external_node.as_ref()),
            _ => true,
        })
}

/// The policies that apply to no endpoint in any of the rulesets.
fn applied_nowhere(
    warnings: &mut Vec<Problem>,
    snapshot: &Snapshot,
    compiled: &[(&LocalNode, &Ruleset)],
) {
    let mut applied = BTreeSet::new();
    let mut listed = BTreeSet::new();
    for (_, ruleset) in compiled {
        for summary in ruleset.policies() {
            if !summary.applied_to.is_empty() {
                applied.insert(summary.policy.clone());
            }
            listed.insert(summary.policy.clone());
        }
    }
    for sourced in &snapshot.objects {
        let Some(policy) = policy_ref(&sourced.object) else {
            continue;
        };
        if !matches!(
            policy.kind,
            PolicyKind::AntreaClusterNetworkPolicy
                | PolicyKind::AntreaNetworkPolicy
                | PolicyKind::K8sNetworkPolicy
        ) {
            continue;
        }
        if listed.contains(&policy) && !applied.contains(&policy) {
            warnings.push(Problem {
                origin: sourced.origin.to_path_buf(),
                object: sourced.object.object_ref(),
                field: "spec".into(),
                reason: "selects no endpoint of the inventory (appliedTo or podSelector matches no Pod, Node or ExternalEntity)".into(),
            });
        }
    }
}

/// How the compiler names the policy `object` is, if it is one.
fn policy_ref(object: &Object) -> Option<PolicyRef> {
    let kind = match object {
        Object::ClusterNetworkPolicy(_) => PolicyKind::AntreaClusterNetworkPolicy,
        Object::AntreaNetworkPolicy(_) => PolicyKind::AntreaNetworkPolicy,
        Object::K8sNetworkPolicy(_) => PolicyKind::K8sNetworkPolicy,
        Object::AdminNetworkPolicy(_) => PolicyKind::AdminNetworkPolicy,
        Object::BaselineAdminNetworkPolicy(_) => PolicyKind::BaselineAdminNetworkPolicy,
        Object::NpClusterNetworkPolicy(_) => PolicyKind::ClusterNetworkPolicy,
        _ => return None,
    };
    let object = object.object_ref();
    let namespace = match object.kind {
        Some(Kind::AntreaNetworkPolicy | Kind::K8sNetworkPolicy) => object.namespace,
        _ => None,
    };
    Some(PolicyRef {
        kind,
        namespace,
        name: object.name,
    })
}

/// One warning per pair of tied rules, on the policy of the rule evaluated
/// second, with every endpoint of every ruleset they meet on.
fn ties(warnings: &mut Vec<Problem>, snapshot: &Snapshot, compiled: &[(&LocalNode, &Ruleset)]) {
    let mut merged: BTreeMap<String, (Tie, BTreeSet<String>)> = BTreeMap::new();
    for (_, ruleset) in compiled {
        for tie in ruleset.ties() {
            let key = format!("{} {}", rule_key(&tie.first), rule_key(&tie.second));
            let entry = merged
                .entry(key)
                .or_insert_with(|| (tie.clone(), BTreeSet::new()));
            entry
                .1
                .extend(tie.endpoints.iter().map(ToString::to_string));
        }
    }
    if merged.is_empty() {
        return;
    }
    let origins: HashMap<PolicyRef, (PathBuf, ObjectRef)> = snapshot
        .objects
        .iter()
        .filter_map(|s| {
            Some((
                policy_ref(&s.object)?,
                (s.origin.to_path_buf(), s.object.object_ref()),
            ))
        })
        .collect();
    for (tie, endpoints) in merged.into_values() {
        let Some((origin, object)) = origins.get(&tie.second.policy) else {
            continue;
        };
        let other = match origins.get(&tie.first.policy) {
            Some((file, _)) => format!("{} ({})", tie.first.policy, file.display()),
            None => tie.first.policy.to_string(),
        };
        let tier = tie.second.tier.as_deref().unwrap_or("-");
        let priority = tie
            .second
            .policy_priority
            .map_or_else(|| "-".to_string(), |p| p.to_string());
        let mut named: Vec<String> = endpoints
            .iter()
            .take(MAX_NAMED_ENDPOINTS)
            .cloned()
            .collect();
        if endpoints.len() > MAX_NAMED_ENDPOINTS {
            named.push(format!(
                "and {} more",
                endpoints.len() - MAX_NAMED_ENDPOINTS
            ));
        }
        warnings.push(Problem {
            origin: origin.clone(),
            object: object.clone(),
            field: rule_field(&tie.second),
            reason: format!(
                "same Tier `{tier}`, priority {priority} and rule index as {} of {other}, on {}: the rules can match the same traffic with different actions ({:?} and {:?}), in an order Antrea leaves undefined (tollgate evaluates {}'s first)",
                rule_label(&tie.first),
                named.join(", "),
                tie.second.action,
                tie.first.action,
                tie.first.policy.name,
            ),
        });
    }
}

/// A tied rule, for merging the ties of several rulesets.
fn rule_key(rule: &RuleRef) -> String {
    format!("{}#{}", rule.policy, rule_field(rule))
}

/// `spec.ingress[0]`.
fn rule_field(rule: &RuleRef) -> String {
    format!("spec.{}[{}]", direction(rule), rule.index)
}

/// `rule ingress[0] `name``, as a message names a rule of another policy.
fn rule_label(rule: &RuleRef) -> String {
    match &rule.name {
        Some(name) => format!("rule {}[{}] `{name}`", direction(rule), rule.index),
        None => format!("rule {}[{}]", direction(rule), rule.index),
    }
}

fn direction(rule: &RuleRef) -> &'static str {
    match rule.direction {
        crate::model::Direction::Ingress => "ingress",
        crate::model::Direction::Egress => "egress",
    }
}
