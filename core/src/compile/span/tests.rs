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

/// Namespaced policies whose appliedTo reaches beyond their Namespace:
/// through a ServiceAccount of another Namespace, a Group's Service of
/// another Namespace, a child Group that selects Namespaces, a rule's own
/// appliedTo; and a Kubernetes NetworkPolicy.
const NAMESPACED: &str = "apiVersion: v1
kind: Namespace
metadata: {name: a}
---
apiVersion: v1
kind: Namespace
metadata: {name: b}
---
apiVersion: v1
kind: Namespace
metadata: {name: c}
---
apiVersion: v1
kind: Namespace
metadata: {name: d}
---
apiVersion: v1
kind: Node
metadata: {name: n1}
---
apiVersion: v1
kind: Node
metadata: {name: n2}
---
apiVersion: v1
kind: Node
metadata: {name: n3}
---
apiVersion: v1
kind: Service
metadata: {name: xsvc, namespace: d}
spec:
  selector: {app: x}
  ports: [{port: 80}]
---
apiVersion: crd.antrea.io/v1beta1
kind: NetworkPolicy
metadata: {name: own, namespace: a}
spec:
  priority: 1
  appliedTo: [{podSelector: {matchLabels: {app: web}}}]
  ingress:
  - action: Drop
    from: [{ipBlock: {cidr: 10.9.1.0/24}}]
---
apiVersion: crd.antrea.io/v1beta1
kind: NetworkPolicy
metadata: {name: by-account, namespace: a}
spec:
  priority: 1
  appliedTo: [{serviceAccount: {name: robot, namespace: c}}]
  ingress:
  - action: Drop
    from: [{ipBlock: {cidr: 10.9.2.0/24}}]
---
apiVersion: crd.antrea.io/v1alpha3
kind: Group
metadata: {name: to-x, namespace: b}
spec:
  serviceReference: {name: xsvc, namespace: d}
---
apiVersion: crd.antrea.io/v1beta1
kind: NetworkPolicy
metadata: {name: by-service, namespace: b}
spec:
  priority: 2
  appliedTo: [{group: to-x}]
  ingress:
  - action: Drop
    from: [{ipBlock: {cidr: 10.9.3.0/24}}]
---
apiVersion: crd.antrea.io/v1alpha3
kind: Group
metadata: {name: kid, namespace: c}
spec:
  namespaceSelector: {}
  podSelector: {matchLabels: {app: db}}
---
apiVersion: crd.antrea.io/v1alpha3
kind: Group
metadata: {name: parent, namespace: c}
spec:
  childGroups: [kid]
---
apiVersion: crd.antrea.io/v1beta1
kind: NetworkPolicy
metadata: {name: by-child, namespace: c}
spec:
  priority: 3
  appliedTo: [{group: parent}]
  ingress:
  - action: Drop
    from: [{ipBlock: {cidr: 10.9.4.0/24}}]
---
apiVersion: crd.antrea.io/v1beta1
kind: NetworkPolicy
metadata: {name: by-rule, namespace: d}
spec:
  priority: 1
  ingress:
  - action: Drop
    appliedTo: [{serviceAccount: {name: default, namespace: b}}]
    from: [{ipBlock: {cidr: 10.9.5.0/24}}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: k8s, namespace: b}
spec:
  podSelector: {}
  ingress:
  - from: [{ipBlock: {cidr: 10.9.6.0/24}}]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: everywhere}
spec:
  priority: 1
  appliedTo: [{podSelector: {}}]
  ingress:
  - action: Drop
    from: [{ipBlock: {cidr: 10.9.7.0/24}}]
---
";

/// How `ruleset` decides a connection to every local Pod from a source in
/// each policy's block (10.9.1.1 .. 10.9.7.1) and one in none: the
/// verdict and the deciding rule, without its rank (which counts the rules
/// of every policy held).
fn decisions(ruleset: &crate::ruleset::Ruleset, world: &Snapshot) -> Vec<String> {
    use crate::fqdn::NoFqdn;
    use crate::packet::{Flow, Transport};
    let mut out = Vec::new();
    for object in world.iter() {
        let Object::Pod(pod) = object else { continue };
        let Some(dst) = pod.status.pod_ip else {
            continue;
        };
        if ruleset.endpoint_of(dst).is_none() {
            continue;
        }
        for block in 1..=8 {
            let flow = Flow {
                src: format!("10.9.{block}.1").parse().unwrap(),
                dst,
                transport: Transport::Tcp {
                    src_port: 40000,
                    dst_port: 80,
                },
                local: None,
            };
            let decision = ruleset.classify(&flow, &NoFqdn);
            let rule = decision
                .deciding()
                .rule()
                .map(|r| format!("{:?} {:?} {}", r.policy, r.direction, r.index));
            let rule = rule.unwrap_or_default();
            out.push(format!("{dst} {block} {:?} {rule}", decision.verdict));
        }
    }
    out
}

/// Leaving out the namespaced policies none of whose
/// [`applied_namespaces`] holds a Pod of the Node changes no decision on
/// the Node nor the rule that makes it; each Node leaves some out, and
/// each policy decides somewhere (the check is not vacuous). Mutations: `applied_namespaces` ignoring a ServiceAccount's
/// Namespace (n2 loses `by-rule`), a Group's Service (n3 loses
/// `by-service`), child Groups (n2 loses `by-child`), or the rules'
/// appliedTo (n2 loses `by-rule`): each fails.
#[test]
fn namespaced_policies_of_namespaces_without_local_pods_place_nothing() {
    let pods = [
        pod("w", "a", "web", "n1", 1, "default"),
        pod("db", "b", "db", "n2", 2, "default"),
        pod("api", "c", "api", "n3", 3, "robot"),
        pod("x", "d", "x", "n3", 4, "default"),
    ]
    .concat();
    let world = parse(&format!("{NAMESPACED}{pods}"));
    let group = |ns: &str, name: &str| {
        world.iter().find_map(|o| match o {
            Object::Group(g)
                if g.metadata.name == name && g.metadata.namespace.as_deref() == Some(ns) =>
            {
                Some(&**g)
            }
            _ => None,
        })
    };
    let mut deciding = BTreeSet::new();
    for node in ["n1", "n2", "n3"] {
        let local: BTreeSet<&str> = world
            .iter()
            .filter_map(|o| match o {
                Object::Pod(p) if p.spec.node_name.as_deref() == Some(node) => {
                    p.metadata.namespace.as_deref()
                }
                _ => None,
            })
            .collect();
        let spanned = Snapshot {
            objects: world
                .objects
                .iter()
                .filter(|s| {
                    applied_namespaces(&s.object, group)
                        .is_none_or(|reached| reached.iter().any(|ns| local.contains(ns)))
                })
                .cloned()
                .collect(),
        };
        assert!(
            spanned.objects.len() < world.objects.len(),
            "{node}: nothing left out"
        );
        let local_node = LocalNode {
            name: node.to_string(),
            ..LocalNode::default()
        };
        let whole = crate::compile::compile(&world, &local_node);
        let kept = crate::compile::compile(&spanned, &local_node);
        let decided = decisions(&whole, &world);
        assert_eq!(decisions(&kept, &world), decided, "{node}");
        assert_eq!(kept.endpoints(), whole.endpoints(), "{node}");
        deciding.extend(decided.into_iter().filter_map(|d| {
            let name = d.split("name: \"").nth(1)?;
            Some(name.split('"').next()?.to_string())
        }));
    }
    assert_eq!(
        deciding,
        [
            "by-account",
            "by-child",
            "by-rule",
            "by-service",
            "everywhere",
            "k8s",
            "own"
        ]
        .map(String::from)
        .into(),
        "every policy decides on some Node"
    );
    // What each policy reaches, as the assembly places it.
    let reached = |name: &str| {
        let object = world
            .iter()
            .find(|o| o.metadata().name == name)
            .expect("in the world");
        applied_namespaces(object, group).map(|r| r.into_iter().collect::<Vec<_>>())
    };
    assert_eq!(reached("own"), Some(vec!["a"]));
    assert_eq!(reached("by-account"), Some(vec!["a", "c"]));
    assert_eq!(reached("by-service"), Some(vec!["b", "d"]));
    assert_eq!(reached("by-child"), None);
    assert_eq!(reached("by-rule"), Some(vec!["b", "d"]));
    assert_eq!(reached("k8s"), Some(vec!["b"]));
    assert_eq!(reached("everywhere"), None);
}
