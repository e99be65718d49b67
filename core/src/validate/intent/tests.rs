//! Each warning with a case that raises it and one that does not, from
//! YAML through the real decoder and compiler.

use std::path::Path;

use super::*;
use crate::compile::compile;
use crate::decode::parse_documents;

const INVENTORY: &str = "apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {env: prod}}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {app: web}}
spec: {nodeName: n1}
status: {podIP: 10.0.0.2}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: shop, labels: {app: client, role: dev}}
spec: {nodeName: n1}
status: {podIP: 10.0.0.3}
---
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {kubernetes.io/os: linux}}
";

fn snapshot(yaml: &str) -> Snapshot {
    let (objects, problems) = parse_documents(Path::new("t.yaml"), yaml);
    assert!(problems.is_empty(), "decoding failed: {problems:#?}");
    Snapshot { objects }
}

/// The warnings of `yaml` read whole from `dir`, every Node compiled;
/// [`review`] (the agent's one walk) finds the same and [`check`]'s.
fn warnings(yaml: &str) -> Vec<String> {
    let snapshot = snapshot(yaml);
    let nodes = inventory_nodes(&snapshot);
    let rulesets: Vec<Ruleset> = nodes.iter().map(|n| compile(&snapshot, n)).collect();
    let compiled: Vec<(&LocalNode, &Ruleset)> = nodes.iter().zip(&rulesets).collect();
    let whole = Whole::Source {
        origin: Path::new("dir"),
        inventory: Inventory::Whole,
    };
    let found = intent(&snapshot, whole, &compiled);
    let mut checker = Checker::new(true);
    let (admitted, reviewed) = review(&mut checker, &snapshot, whole, &compiled);
    assert_eq!(reviewed, found);
    assert_eq!(admitted, crate::validate::check(&snapshot).warnings);
    // Again with what the checker kept.
    let again = review(&mut checker, &snapshot, whole, &compiled);
    assert_eq!(again, (admitted, reviewed));
    found.iter().map(ToString::to_string).collect()
}

/// An ACNP in Tier `application` at `priority`, applied to `app: web`,
/// with one ingress rule `action` from `peer` (a podSelector's labels).
fn acnp(name: &str, priority: u32, action: &str, peer: &str) -> String {
    format!(
        "---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: {name}}}
spec:
  priority: {priority}
  tier: application
  appliedTo: [{{podSelector: {{matchLabels: {{app: web}}}}}}]
  ingress:
  - name: {name}-rule
    action: {action}
    from: [{{podSelector: {{matchLabels: {peer}}}}}]
"
    )
}

#[test]
fn an_empty_source_and_one_without_policies_allow_everything() {
    assert_eq!(
        warnings(""),
        ["dir: no objects found: no policy applies, every connection is allowed"]
    );
    assert_eq!(
        warnings(INVENTORY),
        ["dir: no policies: every connection is allowed"]
    );
    let files = intent(&snapshot(""), Whole::Files, &[]);
    assert!(files.is_empty(), "a file alone is not a source: {files:?}");
}

#[test]
fn a_label_key_typo_in_a_peer_names_the_field_and_the_nearest_key() {
    let yaml = format!("{INVENTORY}{}", acnp("p", 5, "Allow", "{apps: client}"));
    assert_eq!(
        warnings(&yaml),
        ["t.yaml: ClusterNetworkPolicy p: spec.ingress[0].from[0].podSelector.matchLabels.apps: label key `apps` is on no Pod of the inventory: the selector selects no Pod (did you mean `app`?)"]
    );
    let right = format!("{INVENTORY}{}", acnp("p", 5, "Allow", "{app: client}"));
    assert_eq!(warnings(&right), Vec::<String>::new());
}

#[test]
fn a_label_key_typo_in_applied_to_also_says_the_policy_applies_nowhere() {
    let yaml = format!("{INVENTORY}{}", acnp("p", 5, "Allow", "{app: client}"))
        .replace("matchLabels: {app: web}", "matchLabels: {ap: web}");
    assert_eq!(
        warnings(&yaml),
        [
            "t.yaml: ClusterNetworkPolicy p: spec.appliedTo[0].podSelector.matchLabels.ap: label key `ap` is on no Pod of the inventory: the selector selects no Pod (did you mean `app`?)",
            "t.yaml: ClusterNetworkPolicy p: spec: selects no endpoint of the inventory (appliedTo or podSelector matches no Pod, Node or ExternalEntity)",
        ]
    );
}

#[test]
fn keys_are_checked_against_the_kind_the_selector_selects() {
    let namespaces = format!(
        "{INVENTORY}{}",
        acnp("p", 5, "Allow", "{app: client}").replace(
            "from: [{podSelector: {matchLabels: {app: client}}}]",
            "from: [{namespaceSelector: {matchLabels: {enviroment: prod}}}, {namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: shop}}}]"
        )
    );
    assert_eq!(
        warnings(&namespaces),
        ["t.yaml: ClusterNetworkPolicy p: spec.ingress[0].from[0].namespaceSelector.matchLabels.enviroment: label key `enviroment` is on no Namespace of the inventory: the selector selects no Namespace"]
    );
    // NotIn and DoesNotExist on a key nobody carries select everything.
    let negative = format!("{INVENTORY}{}", acnp("p", 5, "Allow", "{app: client}")).replace(
        "from: [{podSelector: {matchLabels: {app: client}}}]",
        "from: [{podSelector: {matchExpressions: [{key: tier, operator: DoesNotExist}, {key: zone, operator: Exists}]}}]",
    );
    assert_eq!(
        warnings(&negative),
        ["t.yaml: ClusterNetworkPolicy p: spec.ingress[0].from[0].podSelector.matchExpressions[1].key: label key `zone` is on no Pod of the inventory: the selector selects no Pod"]
    );
}

#[test]
fn rules_at_one_rank_with_different_actions_on_shared_traffic_are_named() {
    let yaml = format!(
        "{INVENTORY}{}{}",
        acnp("allow-clients", 5, "Allow", "{app: client}"),
        acnp("drop-dev", 5, "Drop", "{role: dev}")
    );
    assert_eq!(
        warnings(&yaml),
        ["t.yaml: ClusterNetworkPolicy drop-dev: spec.ingress[0]: same Tier `application`, priority 5 and rule index as rule ingress[0] `allow-clients-rule` of AntreaClusterNetworkPolicy:allow-clients (t.yaml), on shop/web: the rules can match the same traffic with different actions (Drop and Allow), in an order Antrea leaves undefined (tollgate evaluates allow-clients's first)"]
    );
}

#[test]
fn rules_in_a_defined_order_or_agreeing_or_apart_are_no_tie() {
    let cases = [
        // Different priorities: ordered.
        (
            acnp("a", 5, "Allow", "{app: client}"),
            acnp("b", 6, "Drop", "{role: dev}"),
        ),
        // The same action: the verdict is the same in either order.
        (
            acnp("a", 5, "Drop", "{app: client}"),
            acnp("b", 5, "Drop", "{role: dev}"),
        ),
        // Peers that share no Pod.
        (
            acnp("a", 5, "Allow", "{app: client}"),
            acnp("b", 5, "Drop", "{app: web}"),
        ),
    ];
    for (a, b) in cases {
        let yaml = format!("{INVENTORY}{a}{b}");
        assert_eq!(warnings(&yaml), Vec::<String>::new(), "{a}{b}");
    }
}

#[test]
fn the_agent_checks_applied_nowhere_only_when_its_node_holds_every_endpoint() {
    let yaml = format!(
        "{INVENTORY}---
apiVersion: v1
kind: Pod
metadata: {{name: far, namespace: shop, labels: {{app: far}}}}
spec: {{nodeName: n2}}
status: {{podIP: 10.0.1.2}}
{}",
        acnp("p", 5, "Allow", "{app: client}")
            .replace("matchLabels: {app: web}", "matchLabels: {app: far}")
    );
    let snapshot = snapshot(&yaml);
    let local = LocalNode {
        name: "n1".into(),
        ..LocalNode::default()
    };
    let ruleset = compile(&snapshot, &local);
    let whole = Whole::Source {
        origin: Path::new("dir"),
        inventory: Inventory::Whole,
    };
    let found = intent(&snapshot, whole, &[(&local, &ruleset)]);
    assert!(found.is_empty(), "applies on n2: {found:?}");
}

/// In controller mode an agent's snapshot holds only its own Node's Pods
/// and its own Node: a label key no local Pod or Node carries may be on
/// Pods and Nodes elsewhere, and a policy applying to no local endpoint
/// applies on other Nodes. Neither is warned; a Namespace's label key
/// (every Namespace is held) still is, and so is a Pod's key with the
/// whole inventory. Mutation: the local inventory treated as whole →
/// the remote `tier` key and the remote policy are warned.
#[test]
fn an_inventory_of_the_local_node_only_judges_no_pod_or_node_label_key_and_no_applied_nowhere() {
    let remote = acnp("far", 5, "Allow", "{tier: db}")
        .replace("matchLabels: {app: web}", "matchLabels: {app: far}")
        .replace(
            "  ingress:",
            "  egress:\n  - name: to-zone\n    action: Allow\n    to: [{nodeSelector: {matchLabels: {zone: a}}}]\n  ingress:",
        );
    let namespace_typo = acnp("ns", 6, "Allow", "{app: client}").replace(
        "from: [{podSelector: {matchLabels: {app: client}}}]",
        "from: [{namespaceSelector: {matchLabels: {enviroment: prod}}}]",
    );
    let snapshot = snapshot(&format!("{INVENTORY}{remote}{namespace_typo}"));
    let local = LocalNode {
        name: "n1".into(),
        ..LocalNode::default()
    };
    let ruleset = compile(&snapshot, &local);
    let found = |inventory| -> Vec<String> {
        let whole = Whole::Source {
            origin: Path::new("kubernetes"),
            inventory,
        };
        intent(&snapshot, whole, &[(&local, &ruleset)])
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    assert_eq!(
        found(Inventory::Local),
        ["t.yaml: ClusterNetworkPolicy ns: spec.ingress[0].from[0].namespaceSelector.matchLabels.enviroment: label key `enviroment` is on no Namespace of the inventory: the selector selects no Namespace"]
    );
    let whole = found(Inventory::Whole);
    for expected in [
        "label key `tier` is on no Pod",
        "label key `zone` is on no Node",
        "ClusterNetworkPolicy far: spec: selects no endpoint",
        "label key `enviroment` is on no Namespace",
    ] {
        assert!(
            whole.iter().any(|w| w.contains(expected)),
            "{expected}: {whole:#?}"
        );
    }
}
