//! Kubernetes object metadata and label selectors, shared by every kind.

use std::collections::BTreeMap;

use litemap::LiteMap;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

/// Labels by key: an object's, a Namespace's with its name label. A
/// sorted vector, not a tree: objects carry two to five labels, and a
/// `BTreeMap` allocates a node of eleven pairs (~550 bytes) for one
/// (150,000 Pods' in the controller or a watch-mode agent).
pub type Labels = LiteMap<String, String>;

/// `metadata` of any object. Unknown keys are rejected so that a typo such as
/// `label:` cannot silently drop the labels a selector relies on; the
/// bookkeeping fields the API server adds are accepted and ignored.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ObjectMeta {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "LiteMap::is_empty")]
    pub labels: Labels,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    // The API server's bookkeeping: accepted (a manifest saved with
    // `kubectl get -o yaml` loads) and dropped as it is read, so no object
    // carries it (kept, it made ObjectMeta 384 bytes where it is 96, in
    // every object, and made every write of an object a change). Nothing
    // decides by it; the Kubernetes source reads uid, generation and
    // resourceVersion from the raw object for what it reports.
    #[serde(default, skip_serializing)]
    pub uid: IgnoredAny,
    #[serde(default, skip_serializing)]
    pub resource_version: IgnoredAny,
    #[serde(default, skip_serializing)]
    pub generation: IgnoredAny,
    #[serde(default, skip_serializing)]
    pub generate_name: IgnoredAny,
    #[serde(default, skip_serializing)]
    pub creation_timestamp: IgnoredAny,
    #[serde(default, skip_serializing)]
    pub deletion_timestamp: IgnoredAny,
    #[serde(default, skip_serializing)]
    pub deletion_grace_period_seconds: IgnoredAny,
    #[serde(default, skip_serializing)]
    pub managed_fields: IgnoredAny,
    #[serde(default, skip_serializing)]
    pub owner_references: IgnoredAny,
    #[serde(default, skip_serializing)]
    pub finalizers: IgnoredAny,
    #[serde(default, skip_serializing)]
    pub self_link: IgnoredAny,
}

/// The annotation that puts a policy of any kind in dry-run: with the value
/// `"true"` the policy is compiled and evaluated on every new connection it
/// would decide, and never enforced (see `ruleset`'s dry-run outcome).
/// Removing it (or any other value) enforces the policy.
pub const DRY_RUN_ANNOTATION: &str = "tollgate.io/dry-run";

impl ObjectMeta {
    /// Whether the object carries [`DRY_RUN_ANNOTATION`]` = "true"`.
    pub fn dry_run(&self) -> bool {
        self.annotations
            .get(DRY_RUN_ANNOTATION)
            .is_some_and(|v| v == "true")
    }
}

/// A Kubernetes label selector. An empty selector (`{}`) selects everything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelSelector {
    #[serde(default, skip_serializing_if = "LiteMap::is_empty")]
    pub match_labels: LiteMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelSelectorRequirement {
    pub key: String,
    pub operator: SelectorOperator,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl LabelSelector {
    /// Whether `labels` satisfy every `matchLabels` pair and every expression.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|e| e.matches(labels))
    }
}

impl LabelSelectorRequirement {
    pub fn matches(&self, labels: &Labels) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            SelectorOperator::In => value.is_some_and(|v| self.values.contains(v)),
            SelectorOperator::NotIn => !value.is_some_and(|v| self.values.contains(v)),
            SelectorOperator::Exists => value.is_some(),
            SelectorOperator::DoesNotExist => value.is_none(),
        }
    }
}

/// A `{name, namespace}` reference, as `serviceAccount`, `service` and
/// `serviceReference` use.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespacedName {
    pub name: String,
    #[serde(default)]
    pub namespace: String,
}

/// A `toServices` entry (Antrea's `PeerService`): a Service by name, in
/// `namespace` (a namespaced policy's own when empty), in this cluster or,
/// with `scope: ClusterSet`, one Antrea Multicluster imports. The scope is
/// a free string in the namespaced NetworkPolicy's CRD (Antrea's
/// controller reads anything but `ClusterSet` as the cluster), an enum in
/// the ClusterNetworkPolicy's (validate checks it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PeerService {
    pub name: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

impl PeerService {
    /// A Service Antrea Multicluster imports (`scope: ClusterSet`).
    pub fn cluster_set(&self) -> bool {
        self.scope.as_deref() == Some("ClusterSet")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, operator: SelectorOperator, values: &[&str]) -> LabelSelector {
        LabelSelector {
            match_labels: LiteMap::new(),
            match_expressions: vec![LabelSelectorRequirement {
                key: key.into(),
                operator,
                values: values.iter().map(|s| s.to_string()).collect(),
            }],
        }
    }

    #[test]
    fn empty_selector_selects_everything() {
        assert!(LabelSelector::default().matches(&labels(&[])));
        assert!(LabelSelector::default().matches(&labels(&[("a", "b")])));
    }

    #[test]
    fn match_labels_needs_every_pair() {
        let sel = LabelSelector {
            match_labels: labels(&[("app", "web"), ("tier", "fe")])
                .into_iter()
                .collect(),
            ..Default::default()
        };
        assert!(sel.matches(&labels(&[("app", "web"), ("tier", "fe"), ("x", "y")])));
        assert!(!sel.matches(&labels(&[("app", "web")])));
    }

    #[test]
    fn expression_operators() {
        let l = labels(&[("env", "prod")]);
        assert!(expr("env", SelectorOperator::In, &["prod", "dev"]).matches(&l));
        assert!(!expr("env", SelectorOperator::In, &["dev"]).matches(&l));
        assert!(!expr("env", SelectorOperator::NotIn, &["prod"]).matches(&l));
        assert!(expr("env", SelectorOperator::NotIn, &["dev"]).matches(&l));
        // NotIn also matches objects without the key, as in Kubernetes.
        assert!(expr("tier", SelectorOperator::NotIn, &["x"]).matches(&l));
        assert!(expr("env", SelectorOperator::Exists, &[]).matches(&l));
        assert!(!expr("tier", SelectorOperator::Exists, &[]).matches(&l));
        assert!(expr("tier", SelectorOperator::DoesNotExist, &[]).matches(&l));
        assert!(!expr("env", SelectorOperator::DoesNotExist, &[]).matches(&l));
    }
}
