use std::net::IpAddr;
use std::sync::Arc;

use super::*;
use crate::compile::LocalNode;
use crate::model::Snapshot;

fn parse(yaml: &str) -> Snapshot {
    let (objects, problems) = crate::decode::parse_documents("test.yaml".as_ref(), yaml);
    assert!(problems.is_empty(), "{problems:?}");
    Snapshot { objects }
}

fn pod(name: &str, ns: &str, app: &str, ip: &str) -> PodEntry {
    PodEntry {
        namespace: ns.into(),
        name: name.into(),
        labels: Labels::from_iter([("app".into(), app.into())]),
        ips: vec![ip.parse().unwrap()],
        service_account: "default".into(),
        node_name: Some("n2".into()),
        named_ports: Vec::new(),
        host_ports: Vec::new(),
    }
}

fn set(ips: &[&str]) -> AddressSet {
    ips.iter().map(|ip| ip.parse::<IpAddr>().unwrap()).collect()
}

fn apply_pod(selections: &mut Selections, entry: PodEntry) {
    selections.apply(Delta::Pod {
        namespace: entry.namespace.clone(),
        name: entry.name.clone(),
        pod: Some(entry),
    });
}

fn by_app(app: &str) -> Selection {
    Selection::Pods {
        namespaces: NamespaceScope::All,
        pods: Some(LabelSelector {
            match_labels: [("app".to_string(), app.to_string())].into_iter().collect(),
            match_expressions: Vec::new(),
        }),
    }
}

#[test]
fn a_label_change_moves_a_pod_between_sets_and_a_rewrite_changes_nothing() {
    let mut selections = Selections::new(&Snapshot::default(), &LocalNode::default());
    apply_pod(&mut selections, pod("p", "a", "web", "10.0.0.1"));
    apply_pod(&mut selections, pod("q", "a", "db", "fd00::2"));
    let (web, db) = (by_app("web"), by_app("db"));
    let web_set = selections.addresses(&web);
    assert_eq!(*web_set, set(&["10.0.0.1"]));
    assert_eq!(*selections.addresses(&db), set(&["fd00::2"]));
    // The same Pod written again: no set moves, nothing to take.
    apply_pod(&mut selections, pod("p", "a", "web", "10.0.0.1"));
    assert!(!selections.has_changes());
    assert!(Arc::ptr_eq(&web_set, &selections.addresses(&web)));
    // Relabelled: out of one set, into the other; the old Arc keeps what
    // a ruleset was compiled with.
    apply_pod(&mut selections, pod("p", "a", "db", "10.0.0.1"));
    let changed: Vec<Selection> = selections
        .take_changed()
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_eq!(changed.len(), 2, "{changed:?}");
    assert!(selections.addresses(&web).is_empty());
    assert_eq!(*selections.addresses(&db), set(&["10.0.0.1", "fd00::2"]));
    assert_eq!(*web_set, set(&["10.0.0.1"]));
}

/// Slots of stopped selections are reused, lowest first, and a reused
/// slot answers for its new selection only.
///
/// Mutation (tried, fails): `stop` not freeing the slot (the vector only
/// grows: the second check's ids).
#[test]
fn a_stopped_selections_slot_is_reused_for_the_next_one_started() {
    let mut selections = Selections::new(&Snapshot::default(), &LocalNode::default());
    for (i, app) in ["a", "b", "c", "d"].into_iter().enumerate() {
        apply_pod(
            &mut selections,
            pod(app, "x", app, &format!("10.0.0.{}", i + 1)),
        );
    }
    for app in ["a", "b", "c"] {
        selections.addresses(&by_app(app));
    }
    assert_eq!(selections.slot(&by_app("c")), (Some(2), 3));
    selections.stop(&by_app("a"));
    selections.stop(&by_app("c"));
    assert_eq!(*selections.addresses(&by_app("d")), set(&["10.0.0.4"]));
    assert_eq!(selections.slot(&by_app("d")), (Some(0), 3));
    assert_eq!(*selections.addresses(&by_app("c")), set(&["10.0.0.3"]));
    assert_eq!(selections.slot(&by_app("c")), (Some(2), 3));
    assert_eq!(*selections.addresses(&by_app("a")), set(&["10.0.0.1"]));
    assert_eq!(selections.slot(&by_app("a")), (Some(3), 4));
    assert_eq!(*selections.addresses(&by_app("b")), set(&["10.0.0.2"]));
}

#[test]
fn two_pods_sharing_an_address_keep_it_until_both_leave() {
    let mut selections = Selections::new(&Snapshot::default(), &LocalNode::default());
    apply_pod(&mut selections, pod("p", "a", "web", "10.0.0.1"));
    apply_pod(&mut selections, pod("q", "b", "web", "10.0.0.1"));
    let web = by_app("web");
    assert_eq!(*selections.addresses(&web), set(&["10.0.0.1"]));
    selections.apply(Delta::Pod {
        namespace: "a".into(),
        name: "p".into(),
        pod: None,
    });
    assert_eq!(*selections.addresses(&web), set(&["10.0.0.1"]));
    apply_pod(&mut selections, pod("q", "b", "db", "10.0.0.1"));
    assert!(selections.addresses(&web).is_empty());
}

#[test]
fn a_namespace_label_change_moves_its_pods_in_namespace_selector_sets() {
    let snapshot = parse(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: a, labels: {env: prod}}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: a, labels: {app: web}}\n\
         spec: {nodeName: n2}\nstatus: {podIP: 10.0.0.1}\n",
    );
    let mut selections = Selections::new(&snapshot, &LocalNode::default());
    let prod = Selection::Pods {
        namespaces: NamespaceScope::Selector(LabelSelector {
            match_labels: [("env".to_string(), "prod".to_string())]
                .into_iter()
                .collect(),
            match_expressions: Vec::new(),
        }),
        pods: None,
    };
    assert_eq!(*selections.addresses(&prod), set(&["10.0.0.1"]));
    selections.apply(Delta::Namespace {
        name: "a".into(),
        labels: Some(Labels::from_iter([("env".into(), "dev".into())])),
    });
    assert!(selections.addresses(&prod).is_empty());
    // Deleted, the Namespace still exists for its Pod, with its name
    // label alone.
    selections.apply(Delta::Namespace {
        name: "a".into(),
        labels: None,
    });
    assert_eq!(selections.namespace_labels("a"), Some(&name_label("a")));
}
