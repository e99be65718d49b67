use std::path::Path;

use super::*;
use crate::model::Kind;

const TIER: &str = "apiVersion: crd.antrea.io/v1beta1
kind: Tier
metadata:
  name: mytier
spec:
  priority: 10
";

const POD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: shop
status:
  podIP: 10.0.0.5
";

#[test]
fn objects_per_file_are_bounded_lists_included() {
    let two = format!("{TIER}---\n{POD}");
    let (objects, problems) = parse_documents_within(Path::new("two.yaml"), &two, 2);
    assert_eq!((objects.len(), problems.len()), (2, 0));
    let three = format!("{two}---\n{TIER}");
    let (objects, problems) = parse_documents_within(Path::new("t.yaml"), &three, 2);
    assert!(objects.is_empty());
    assert!(problems[0].reason.contains("documents"), "{}", problems[0]);
    let list = "apiVersion: v1\nkind: List\nitems:\n".to_string()
        + &"- {apiVersion: v1, kind: Namespace, metadata: {name: n}}\n".repeat(3);
    let (objects, problems) = parse_documents_within(Path::new("l.yaml"), &list, 2);
    assert!(objects.is_empty());
    assert_eq!(
        problems[0].to_string(),
        "l.yaml: more than 2 objects in one file (the limit is policyFiles.maxObjectsPerFile)"
    );
}

#[test]
fn alias_bombs_and_deep_nesting_stop_at_the_budget() {
    // Nine levels of ten aliases: a billion leaves if expanded.
    let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for level in 1..10 {
        let refs = vec![format!("*a{}", level - 1); 10].join(", ");
        bomb += &format!("a{level}: &a{level} [{refs}]\n");
    }
    let (objects, problems) = parse_documents(Path::new("bomb.yaml"), &bomb);
    assert!(objects.is_empty());
    // Stopped by the node budget, not by finishing the expansion (which a
    // wall-clock bound would only have guessed at).
    assert!(
        problems[0]
            .reason
            .starts_with("YAML syntax: budget breached: Nodes"),
        "{}",
        problems[0]
    );
    let deep = "[".repeat(10_000) + &"]".repeat(10_000);
    let (_, problems) = parse_documents(Path::new("deep.yaml"), &deep);
    assert!(
        problems[0].reason.starts_with("YAML syntax: "),
        "{}",
        problems[0]
    );
}

#[test]
fn multi_document_files_skip_empty_documents() {
    let text = format!("---\n# only a comment\n---\n{TIER}---\n---\n{POD}...\n");
    let (objects, problems) = parse_documents(Path::new("m.yaml"), &text);
    assert!(problems.is_empty(), "{problems:?}");
    let kinds: Vec<Kind> = objects.iter().map(|s| s.object.kind()).collect();
    assert_eq!(kinds, [Kind::Tier, Kind::Pod]);
}

#[test]
fn a_v1_list_contributes_its_items() {
    let text = "apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Namespace, metadata: {name: one}}
- {apiVersion: v1, kind: Namespace, metadata: {name: two}}
";
    let (objects, problems) = parse_documents(Path::new("l.yaml"), text);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(objects.len(), 2);
}

#[test]
fn unknown_kind_is_a_problem_naming_the_object() {
    let text = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: shop}\n";
    let (objects, problems) = parse_documents(Path::new("k.yaml"), text);
    assert!(objects.is_empty());
    assert_eq!(
        problems[0].to_string(),
        "k.yaml: document shop/web: kind: apps/v1 Deployment is not a kind tollgate reads"
    );
}

#[test]
fn a_misspelt_kind_or_an_unknown_version_says_what_is_read() {
    let problem = |text: &str| parse_documents(Path::new("k.yaml"), text).1[0].to_string();
    assert_eq!(
        problem("apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolcy\nmetadata: {name: p}\n"),
        "k.yaml: document p: kind: crd.antrea.io/v1beta1 ClusterNetworkPolcy is not a kind tollgate reads: did you mean ClusterNetworkPolicy?"
    );
    assert_eq!(
        problem("apiVersion: crd.antrea.io/v1beta3\nkind: Tier\nmetadata: {name: t}\n"),
        "k.yaml: document t: kind: crd.antrea.io/v1beta3 Tier is not a kind tollgate reads: tollgate reads Tier as crd.antrea.io/v1beta1, crd.antrea.io/v1alpha1"
    );
}

#[test]
fn a_syntax_error_shows_its_line_with_a_caret_under_the_column() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels: {app: web\n";
    let (_, problems) = parse_documents(Path::new("s.yaml"), text);
    assert_eq!(
        problems[0].to_string(),
        "s.yaml: line 5, column 11: YAML syntax: unclosed bracket '{'\n5 |   labels: {app: web\n  |           ^"
    );
}

#[test]
fn unknown_field_is_a_problem_with_its_path() {
    let text = "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: p}
spec:
  priority: 1
  appliedTo: [{podSelector: {}}]
  ingress:
  - action: Allow
  - action: Drop
    form: [{podSelector: {}}]
";
    let (objects, problems) = parse_documents(Path::new("u.yaml"), text);
    assert!(objects.is_empty());
    assert_eq!(problems.len(), 1);
    let p = &problems[0];
    assert_eq!(p.object.kind, Some(Kind::ClusterNetworkPolicy));
    assert_eq!(p.object.name, "p");
    assert_eq!(p.field, "spec.ingress[1].form");
    assert!(p.reason.contains("unknown field `form`"), "{p}");
}

#[test]
fn bad_value_names_the_field_and_unnamed_documents_get_their_position() {
    let text = format!("{TIER}---\napiVersion: v1\nkind: Namespace\nmetadata: {{labels: 3}}\n");
    let (objects, problems) = parse_documents(Path::new("v.yaml"), &text);
    assert_eq!(objects.len(), 1);
    assert_eq!(problems.len(), 1);
    let shown = problems[0].to_string();
    assert!(
        shown.starts_with("v.yaml: Namespace #2: metadata.labels: "),
        "{shown}"
    );
}

#[test]
fn yaml_1_1_booleans_stay_strings() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: y, namespace: no, labels: {on: off}}\n";
    let (objects, problems) = parse_documents(Path::new("b.yaml"), text);
    assert!(problems.is_empty(), "{problems:?}");
    let meta = objects[0].object.metadata();
    assert_eq!(
        (meta.name.as_str(), meta.namespace.as_deref()),
        ("y", Some("no"))
    );
    assert_eq!(meta.labels.get("on").map(String::as_str), Some("off"));
}

#[test]
fn duplicate_keys_are_syntax_errors() {
    let text = "apiVersion: v1\nkind: Pod\nkind: Node\nmetadata: {name: a}\n";
    let (objects, problems) = parse_documents(Path::new("d.yaml"), text);
    assert!(objects.is_empty());
    assert!(problems[0].reason.contains("duplicate"), "{}", problems[0]);
}

#[test]
fn missing_api_version_is_reported() {
    let (_, problems) = parse_documents(Path::new("x.yaml"), "kind: Pod\nmetadata: {name: a}\n");
    assert_eq!(problems[0].field, "apiVersion");
    assert_eq!(problems[0].reason, "missing or not a string");
}

#[test]
fn hex_igmp_type_parses_as_an_integer() {
    let text = "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: igmp}
spec:
  priority: 5
  appliedTo: [{podSelector: {}}]
  ingress:
  - action: Drop
    protocols:
    - igmp: {igmpType: 0x11, groupAddress: 224.0.0.1}
";
    let (objects, problems) = parse_documents(Path::new("h.yaml"), text);
    assert!(problems.is_empty(), "{problems:?}");
    let Object::ClusterNetworkPolicy(policy) = &*objects[0].object else {
        panic!("not an ACNP");
    };
    let igmp = policy.spec.ingress[0].protocols[0].igmp.as_ref().unwrap();
    assert_eq!(igmp.igmp_type, Some(0x11));
}
