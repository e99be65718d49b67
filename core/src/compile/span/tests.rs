//! The span against the agents: for a world of three Nodes and policies of
//! every kind whose peers depend on the context, the Pod selections the
//! controller computes are exactly those the agents of all Nodes use.

use std::collections::BTreeSet;

use super::*;
use crate::selection::{NamespaceScope, Selections};

fn parse(yaml: &str) -> Snapshot {
    let (objects, problems) = crate::decode::parse_documents("test.yaml".as_ref(), yaml);
    assert!(problems.is_empty(), "{problems:?}");
    Snapshot { objects }
}

fn pod(name: &str, ns: &str, app: &str, node: &str, ip: u8, account: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {{app: {app}}}\nspec:\n  nodeName: {node}\n  serviceAccountName: {account}\n  containers:\n  - name: main\nstatus:\n  podIP: 10.0.0.{ip}\n---\n"
    )
}

const WORLD: &str = "apiVersion: v1
kind: Namespace
metadata: {name: x, labels: {org: a, env: prod}}
---
apiVersion: v1
kind: Namespace
metadata: {name: y, labels: {org: a}}
---
apiVersion: v1
kind: Namespace
metadata: {name: z, labels: {org: b}}
---
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {role: web}}
---
apiVersion: v1
kind: Node
metadata: {name: n2, labels: {role: db}}
---
apiVersion: v1
kind: Node
metadata: {name: n3}
---
apiVersion: v1
kind: Service
metadata: {name: websvc, namespace: z}
spec:
  selector: {app: web}
  ports: [{port: 80}]
---
";

const POLICIES: &str = "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: self}
spec:
  priority: 1
  appliedTo: [{podSelector: {matchLabels: {app: web}}}]
  ingress:
  - action: Allow
    from: [{namespaces: {match: Self}, podSelector: {matchLabels: {app: api}}}]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: same}
spec:
  priority: 2
  appliedTo: [{namespaceSelector: {}}]
  ingress:
  - action: Allow
    from: [{namespaces: {sameLabels: [org]}}]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: backends}
spec:
  serviceReference: {name: websvc, namespace: z}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: to-backends}
spec:
  priority: 3
  appliedTo: [{podSelector: {matchLabels: {app: db}}}]
  egress:
  - action: Allow
    to: [{group: backends}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: k8s, namespace: y}
spec:
  podSelector: {}
  ingress:
  - from:
    - namespaceSelector: {matchLabels: {env: prod}}
      podSelector: {matchLabels: {app: web}}
---
apiVersion: policy.networking.k8s.io/v1alpha1
kind: AdminNetworkPolicy
metadata: {name: tenants}
spec:
  priority: 1
  subject:
    namespaces: {matchLabels: {org: b}}
  ingress:
  - action: Allow
    from:
    - namespaces: {sameLabels: [org]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: nodes}
spec:
  priority: 4
  appliedTo: [{nodeSelector: {matchLabels: {role: web}}}]
  ingress:
  - action: Allow
    from: [{serviceAccount: {name: robot, namespace: z}}]
  egress:
  - action: Allow
    to: [{nodeSelector: {matchLabels: {role: db}}}]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: to-nodes}
spec:
  priority: 6
  appliedTo: [{podSelector: {matchLabels: {app: api}}}]
  egress:
  - action: Allow
    to: [{nodeSelector: {matchExpressions: [{key: role, operator: Exists}]}}]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: nobody}
spec:
  priority: 5
  appliedTo: [{podSelector: {matchLabels: {app: ghost}}}]
  ingress:
  - action: Allow
    from: [{podSelector: {matchLabels: {app: spirit}}}]
---
";

fn world() -> Snapshot {
    let pods = [
        pod("w", "x", "web", "n1", 1, "default"),
        pod("d", "y", "db", "n2", 2, "default"),
        pod("w", "z", "web", "n3", 3, "default"),
        pod("a", "z", "api", "n3", 4, "robot"),
    ]
    .concat();
    parse(&format!("{WORLD}{POLICIES}{pods}"))
}

/// The Pod and Node selections the agent of `node` uses.
fn agent(snapshot: &Snapshot, node: &str) -> BTreeSet<Selection> {
    let local = LocalNode {
        name: node.to_string(),
        ..LocalNode::default()
    };
    let mut selections = Selections::new(snapshot, &local);
    assemble(snapshot, LocalView::of(&selections), &mut selections);
    selections
        .selections()
        .filter(|s| !matches!(s, Selection::ExternalEntities { .. }))
        .cloned()
        .collect()
}

fn shapes(snapshot: &Snapshot) -> BTreeSet<PodShape> {
    snapshot
        .iter()
        .filter_map(|o| match o {
            Object::Pod(p) => Some(PodShape::of(&PodEntry::of(p))),
            _ => None,
        })
        .collect()
}

/// The Nodes labelled `key` (`= value`, or with any value).
fn nodes(key: &str, value: Option<&str>) -> Selection {
    use crate::model::{LabelSelector, LabelSelectorRequirement, SelectorOperator};
    Selection::Nodes(match value {
        Some(value) => LabelSelector {
            match_labels: [(key.to_string(), value.to_string())].into_iter().collect(),
            match_expressions: Vec::new(),
        },
        None => LabelSelector {
            match_labels: Default::default(),
            match_expressions: vec![LabelSelectorRequirement {
                key: key.to_string(),
                operator: SelectorOperator::Exists,
                values: Vec::new(),
            }],
        },
    })
}

fn app_in(namespaces: NamespaceScope, app: &str) -> Selection {
    Selection::Pods {
        namespaces,
        pods: Some(crate::model::LabelSelector {
            match_labels: [("app".to_string(), app.to_string())].into_iter().collect(),
            match_expressions: Vec::new(),
        }),
    }
}

/// Mutation: `nodes_matching` without `every_node` (the view's Node
/// matches no nodeSelector) loses the ServiceAccount selection of the
/// rule applied to the `role: web` Nodes, and the test fails.
#[test]
fn the_span_is_the_union_of_every_agents_selections() {
    let snapshot = world();
    let span = published_selections(&snapshot, &shapes(&snapshot));
    let mut agents = BTreeSet::new();
    for node in ["n1", "n2", "n3"] {
        agents.extend(agent(&snapshot, node));
    }
    assert_eq!(span, agents);
    // Self: one selection per Namespace of the Pods it applies to, and
    // none for a Namespace where it applies to no Pod.
    assert!(span.contains(&app_in(NamespaceScope::named("x"), "api")));
    assert!(span.contains(&app_in(NamespaceScope::named("z"), "api")));
    assert!(!span.contains(&app_in(NamespaceScope::named("y"), "api")));
    // The Service's backends, and the ServiceAccount of the Node rule.
    assert!(span.contains(&app_in(NamespaceScope::named("z"), "web")));
    assert!(span.contains(&Selection::ServiceAccount {
        namespace: "z".into(),
        name: "robot".into(),
    }));
    // Node peers: of a Pod rule, and of the rule applied to the `role:
    // web` Nodes.
    assert!(span.contains(&nodes("role", Some("db"))));
    assert!(span.contains(&nodes("role", None)));
    // A rule applied to no Pod needs nothing.
    assert!(!span.iter().any(|s| format!("{s:?}").contains("spirit")));
}

/// Mutation: `published_selections` putting every shape's Pod in one Namespace
/// loses the Self selection of Namespace z.
#[test]
fn a_new_namespace_of_applied_pods_adds_its_self_selection() {
    let snapshot = world();
    let mut shapes = shapes(&snapshot);
    shapes.retain(|s| s.namespace != "z");
    let span = published_selections(&snapshot, &shapes);
    assert!(!span.contains(&app_in(NamespaceScope::named("z"), "api")));
    shapes.insert(PodShape {
        namespace: "z".into(),
        labels: Labels::from_iter([("app".to_string(), "web".to_string())]),
        service_account: "default".into(),
    });
    let span = published_selections(&snapshot, &shapes);
    assert!(span.contains(&app_in(NamespaceScope::named("z"), "api")));
}
