//! The publisher against the API server it writes to (a map of slices):
//! placement, the writes a change makes, adoption, and a property test of
//! random Pod and Namespace churn.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::model::{LabelSelector, PortProtocol};
use crate::selection::{Labels, NamespaceScope};

fn pod(ns: &str, name: &str, app: &str, ip: Option<u32>) -> PodEntry {
    PodEntry {
        namespace: ns.into(),
        name: name.into(),
        labels: Labels::from_iter([("app".into(), app.into())]),
        ips: ip
            .map(|i| vec![std::net::Ipv4Addr::from(0x0a00_0000 + i).into()])
            .unwrap_or_default(),
        service_account: "default".into(),
        node_name: Some("n1".into()),
        named_ports: Vec::new(),
        host_ports: Vec::new(),
    }
}

fn put(publisher: &mut Publisher, entry: PodEntry) {
    publisher.apply(Delta::Pod {
        namespace: entry.namespace.clone(),
        name: entry.name.clone(),
        pod: Some(entry),
    });
}

fn remove(publisher: &mut Publisher, ns: &str, name: &str) {
    publisher.apply(Delta::Pod {
        namespace: ns.into(),
        name: name.into(),
        pod: None,
    });
}

fn app(scope: NamespaceScope, value: &str) -> Selection {
    Selection::Pods {
        namespaces: scope,
        pods: Some(LabelSelector {
            match_labels: [("app".to_string(), value.to_string())]
                .into_iter()
                .collect(),
            match_expressions: Vec::new(),
        }),
    }
}

/// The API server: slices by name.
#[derive(Default)]
struct Server(BTreeMap<String, AddressGroupSpec>);

impl Server {
    /// Makes `writes`, checking that they come in phase order and that at
    /// the end of each phase (the controller makes a phase's writes at
    /// once, in any order) every slice 0 held lists only slices held: a
    /// reader never waits on a slice the controller has not written yet
    /// nor holds a group that lacks one.
    fn take(&mut self, writes: &[Write]) {
        assert!(
            writes.windows(2).all(|w| w[0].phase() <= w[1].phase()),
            "{writes:?}"
        );
        for (at, write) in writes.iter().enumerate() {
            match write {
                Write::Create { name, spec, .. } => {
                    assert!(
                        self.0.insert(name.clone(), spec.clone()).is_none(),
                        "{name} exists"
                    );
                }
                Write::Update { name, spec, .. } => {
                    assert!(
                        self.0.insert(name.clone(), spec.clone()).is_some(),
                        "{name} absent"
                    );
                }
                Write::Delete { name } => {
                    assert!(self.0.remove(name).is_some(), "{name} absent");
                }
            }
            if writes
                .get(at + 1)
                .is_none_or(|next| next.phase() != write.phase())
            {
                for (name, spec) in &self.0 {
                    let key = name.rsplit_once('-').unwrap().0;
                    for n in &spec.slices {
                        let listed = slice_name(key, *n);
                        assert!(self.0.contains_key(&listed), "{name} lists {listed}");
                    }
                }
            }
        }
    }

    /// Every member published for `key`, sorted.
    fn members(&self, key: &str) -> Vec<GroupMember> {
        let mut all: Vec<GroupMember> = self
            .0
            .iter()
            .filter(|(n, _)| n.starts_with(&format!("{key}-")))
            .flat_map(|(_, s)| s.members.iter().cloned())
            .collect();
        all.sort();
        all
    }
}

/// Mutation: `Group::set` treating an unchanged member as changed (no
/// `held == member` check) together with `same` answering false (either
/// alone is caught by the other) writes slice 0 again for the status
/// write.
#[test]
fn members_are_published_in_slice_0_and_a_status_write_writes_nothing() {
    let mut publisher = Publisher::new();
    let web = app(NamespaceScope::All, "web");
    let k = key(&web);
    put(&mut publisher, pod("a", "p", "web", Some(1)));
    put(&mut publisher, pod("a", "q", "db", Some(2)));
    publisher.set_selections([web.clone()]);
    let writes = publisher.writes();
    assert_eq!(
        writes,
        vec![Write::Create {
            name: slice_name(&k, 0),
            key: k.clone(),
            spec: AddressGroupSpec {
                selection: canonical(&web),
                slice: 0,
                slices: Vec::new(),
                members: vec![member_of(&pod("a", "p", "web", Some(1))).unwrap()],
            },
        }]
    );
    // The same Pod with a status change only (here: its node), and a Pod
    // without an address: nothing.
    let mut moved = pod("a", "p", "web", Some(1));
    moved.node_name = Some("n2".into());
    put(&mut publisher, moved);
    put(&mut publisher, pod("a", "r", "web", None));
    assert_eq!(publisher.writes(), vec![]);
    // Its address assigned: slice 0 again.
    put(&mut publisher, pod("a", "r", "web", Some(3)));
    let writes = publisher.writes();
    assert!(matches!(&writes[..], [Write::Update { name, .. }] if *name == slice_name(&k, 0)));
    // Every member gone: slice 0 stays, empty.
    remove(&mut publisher, "a", "p");
    remove(&mut publisher, "a", "r");
    let writes = publisher.writes();
    assert!(
        matches!(&writes[..], [Write::Update { spec, .. }] if spec.members.is_empty()),
        "{writes:?}"
    );
}

fn node(name: &str, role: &str, ip: Option<u32>) -> NodeEntry {
    NodeEntry {
        name: name.into(),
        labels: Labels::from_iter([("role".into(), role.into())]),
        ips: ip
            .map(|i| vec![std::net::Ipv4Addr::from(0x0a09_0000 + i).into()])
            .unwrap_or_default(),
        pod_cidrs: Vec::new(),
    }
}

fn put_node(publisher: &mut Publisher, entry: NodeEntry) {
    publisher.apply(Delta::Node {
        name: entry.name.clone(),
        node: Some(entry),
    });
}

/// A Node selection is published from the Nodes, as agents in controller
/// mode watch only their own: a Node joins and leaves with its labels, an
/// address change rewrites its slice, a Node without an address or a
/// write that changes neither (a status report) writes nothing, and Pods
/// are never members.
///
/// Mutation: `Publisher::apply` ignoring Node deltas (as before Node
/// selections were published) publishes slice 0 empty (tried: fails).
#[test]
fn a_node_selection_is_published_from_the_nodes() {
    let mut publisher = Publisher::new();
    let web = Selection::Nodes(LabelSelector {
        match_labels: [("role".to_string(), "web".to_string())]
            .into_iter()
            .collect(),
        match_expressions: Vec::new(),
    });
    let k = key(&web);
    let mut server = Server::default();
    put_node(&mut publisher, node("n1", "web", Some(1)));
    put_node(&mut publisher, node("n2", "db", Some(2)));
    put_node(&mut publisher, node("n3", "web", None));
    put(&mut publisher, pod("a", "p", "web", Some(9)));
    publisher.set_selections([web.clone()]);
    server.take(&publisher.writes());
    let ips = |server: &Server| -> Vec<u32> {
        server
            .members(&k)
            .iter()
            .flat_map(|m| m.ips.iter())
            .map(|ip| match ip {
                std::net::IpAddr::V4(v4) => u32::from(*v4) - 0x0a09_0000,
                std::net::IpAddr::V6(_) => unreachable!(),
            })
            .collect()
    };
    assert_eq!(ips(&server), vec![1]);
    // A status report (the same Node again): nothing.
    put_node(&mut publisher, node("n1", "web", Some(1)));
    assert_eq!(publisher.writes(), vec![]);
    // n2 labelled web, n3 given an address: both join.
    put_node(&mut publisher, node("n2", "web", Some(2)));
    put_node(&mut publisher, node("n3", "web", Some(3)));
    server.take(&publisher.writes());
    assert_eq!(ips(&server), vec![1, 2, 3]);
    // n1's address changes; n2 leaves by its label, n3 by deletion.
    put_node(&mut publisher, node("n1", "web", Some(4)));
    put_node(&mut publisher, node("n2", "db", Some(2)));
    publisher.apply(Delta::Node {
        name: "n3".into(),
        node: None,
    });
    server.take(&publisher.writes());
    assert_eq!(ips(&server), vec![4]);
}

/// Mutation: `Group::room` choosing the last slice rather than the first
/// with room puts the returning Pod in slice 2, and the test fails.
#[test]
fn a_label_change_rewrites_the_one_slice_of_the_pod_and_members_stay_in_their_slice() {
    let mut publisher = Publisher::new();
    let web = app(NamespaceScope::All, "web");
    let k = key(&web);
    let mut server = Server::default();
    for i in 0..250 {
        put(
            &mut publisher,
            pod("a", &format!("p{i:03}"), "web", Some(i)),
        );
    }
    publisher.set_selections([web.clone()]);
    let writes = publisher.writes();
    // Slice 0, which lists the others, is written after them.
    let names: Vec<&str> = writes.iter().map(Write::name).collect();
    assert_eq!(names, [1, 2, 0].map(|n| slice_name(&k, n)), "{writes:?}");
    server.take(&writes);
    assert_eq!(server.0.len(), 3);
    assert_eq!(server.0[&slice_name(&k, 0)].slices, [1, 2]);
    assert!(server.0.values().all(|s| s.members.len() <= SLICE_MEMBERS));
    // p150 (slice 1) leaves: slice 1 alone is written.
    put(&mut publisher, pod("a", "p150", "db", Some(150)));
    let writes = publisher.writes();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(writes[0].name(), slice_name(&k, 1));
    server.take(&writes);
    // p150's address changes while out: nothing. A new member goes to the
    // first slice with room: slice 1.
    put(&mut publisher, pod("a", "p150", "db", Some(999)));
    assert_eq!(publisher.writes(), vec![]);
    put(&mut publisher, pod("a", "new", "web", Some(1000)));
    let writes = publisher.writes();
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].name(), slice_name(&k, 1));
    server.take(&writes);
    // An address change of a member of slice 2 rewrites slice 2 only.
    put(&mut publisher, pod("a", "p240", "web", Some(2000)));
    let writes = publisher.writes();
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].name(), slice_name(&k, 2));
    server.take(&writes);
    // Slice 2 emptied: slice 0 no longer lists it, then it is deleted.
    // The selection no longer used: every slice.
    for i in 200..250 {
        remove(&mut publisher, "a", &format!("p{i:03}"));
    }
    let writes = publisher.writes();
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert!(
        matches!(&writes[0], Write::Update { name, spec, .. }
            if *name == slice_name(&k, 0) && spec.slices == [1]),
        "{writes:?}"
    );
    assert_eq!(
        writes[1],
        Write::Delete {
            name: slice_name(&k, 2)
        }
    );
    server.take(&writes);
    publisher.set_selections([]);
    server.take(&publisher.writes());
    assert!(server.0.is_empty());
}

#[test]
fn named_ports_are_published_and_their_change_rewrites_the_slice() {
    let mut publisher = Publisher::new();
    let web = app(NamespaceScope::named("a"), "web");
    let mut p = pod("a", "p", "web", Some(1));
    publisher.set_selections([web]);
    put(&mut publisher, p.clone());
    let writes = publisher.writes();
    assert_eq!(writes.len(), 1);
    p.named_ports = vec![("http".into(), PortProtocol::Tcp, 8080)];
    put(&mut publisher, p);
    let writes = publisher.writes();
    let [Write::Update { spec, .. }] = &writes[..] else {
        panic!("{writes:?}");
    };
    assert_eq!(spec.members[0].named_ports[0].port, 8080);
}

/// Mutation: `Publisher::namespace_moved` returning at once leaves the
/// Pods of the relabelled Namespace out, and the test fails.
#[test]
fn a_namespace_label_change_moves_its_pods_in_and_out() {
    let mut publisher = Publisher::new();
    let prod = Selection::Pods {
        namespaces: NamespaceScope::Selector(LabelSelector {
            match_labels: [("env".to_string(), "prod".to_string())]
                .into_iter()
                .collect(),
            match_expressions: Vec::new(),
        }),
        pods: None,
    };
    let k = key(&prod);
    let mut server = Server::default();
    put(&mut publisher, pod("a", "p", "web", Some(1)));
    publisher.set_selections([prod]);
    server.take(&publisher.writes());
    assert!(server.members(&k).is_empty());
    let labels = |env: &str| {
        let mut labels = crate::selection::name_label("a");
        labels.insert("env".into(), env.into());
        labels
    };
    publisher.apply(Delta::Namespace {
        name: "a".into(),
        labels: Some(labels("prod")),
    });
    server.take(&publisher.writes());
    assert_eq!(server.members(&k).len(), 1);
    publisher.apply(Delta::Namespace {
        name: "a".into(),
        labels: Some(labels("dev")),
    });
    server.take(&publisher.writes());
    assert!(server.members(&k).is_empty());
}

/// Mutation: `Publisher::place` ignoring what the API server holds (every
/// member put in the first slice with room) makes the new leader rewrite
/// slices whose members moved, and the test fails.
#[test]
fn a_new_leader_adopts_the_slices_and_rewrites_only_those_that_differ() {
    let web = app(NamespaceScope::All, "web");
    let db = app(NamespaceScope::All, "db");
    let (kw, kd) = (key(&web), key(&db));
    let mut first = Publisher::new();
    let mut server = Server::default();
    for i in 0..250 {
        put(&mut first, pod("a", &format!("p{i:03}"), "web", Some(i)));
    }
    first.set_selections([web.clone(), db.clone()]);
    server.take(&first.writes());
    // Churn that leaves holes: slice 0 loses members, later Pods join
    // slice 0 — placement no fresh count would reproduce.
    for i in 0..30 {
        remove(&mut first, "a", &format!("p{i:03}"));
    }
    for i in 0..20 {
        put(&mut first, pod("b", &format!("n{i}"), "web", Some(500 + i)));
    }
    server.take(&first.writes());
    // The next leader: the same Pods, the same selections.
    let everyone: Vec<PodEntry> = (30..250)
        .map(|i| pod("a", &format!("p{i:03}"), "web", Some(i)))
        .chain((0..20).map(|i| pod("b", &format!("n{i}"), "web", Some(500 + i))))
        .collect();
    let mut second = Publisher::new();
    for p in everyone.iter().rev() {
        put(&mut second, p.clone());
    }
    second.set_selections([web.clone(), db.clone()]);
    second.adopt(server.0.clone());
    assert_eq!(second.writes(), vec![]);
    // A member missing from slice 1 and a stray slice of no selection in
    // use: the member goes to the first slice with room (slice 0: one
    // update), the stray is deleted.
    let mut altered = server.0.clone();
    altered.get_mut(&slice_name(&kw, 1)).unwrap().members.pop();
    altered.insert("00000000000000000000-0".into(), AddressGroupSpec::default());
    let mut third = Publisher::new();
    for p in &everyone {
        put(&mut third, p.clone());
    }
    third.adopt(altered);
    third.set_selections([web, db]);
    let mut names: Vec<(bool, String)> = third
        .writes()
        .iter()
        .map(|w| (matches!(w, Write::Delete { .. }), w.name().to_string()))
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            (false, slice_name(&kw, 0)),
            (true, "00000000000000000000-0".to_string())
        ]
    );
    assert!(server.0.contains_key(&slice_name(&kd, 0)));
}

/// One change of the property test's world.
#[derive(Clone, Debug)]
enum Change {
    /// Pod index, Namespace, app, address (None: none yet).
    Put(usize, usize, usize, Option<u32>),
    Delete(usize),
    /// The same Pod written again (a status write).
    Rewrite(usize),
    /// Namespace, env label.
    Namespace(usize, bool),
    /// Take the writes and apply them to the server.
    Flush,
}

const NS: [&str; 2] = ["a", "b"];
const APPS: [&str; 2] = ["web", "db"];

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        8 => (0..400usize, 0..2usize, 0..2usize, proptest::option::weighted(0.9, 0..40u32))
            .prop_map(|(p, n, a, ip)| Change::Put(p, n, a, ip)),
        2 => (0..400usize).prop_map(Change::Delete),
        1 => (0..400usize).prop_map(Change::Rewrite),
        1 => (0..2usize, any::<bool>()).prop_map(|(n, e)| Change::Namespace(n, e)),
        1 => Just(Change::Flush),
    ]
}

fn world_selections() -> Vec<Selection> {
    let prod = NamespaceScope::Selector(LabelSelector {
        match_labels: [("env".to_string(), "prod".to_string())]
            .into_iter()
            .collect(),
        match_expressions: Vec::new(),
    });
    vec![
        // Every Pod: several slices.
        Selection::Pods {
            namespaces: NamespaceScope::All,
            pods: None,
        },
        app(NamespaceScope::All, "web"),
        app(NamespaceScope::named("a"), "db"),
        Selection::Pods {
            namespaces: prod,
            pods: None,
        },
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// After random Pod and Namespace churn, the union of each
    /// selection's published slices is its members, no slice holds more
    /// than 100, slice 0 exists, and a new leader adopting the slices
    /// writes nothing. Mutation: `Group::room` allowing 1,000 members a
    /// slice fails it.
    #[test]
    fn published_slices_are_the_members_after_any_churn(
        changes in proptest::collection::vec(change(), 1..1200),
    ) {
        let selections = world_selections();
        let mut publisher = Publisher::new();
        publisher.set_selections(selections.clone());
        let mut server = Server::default();
        let mut pods: BTreeMap<usize, PodEntry> = BTreeMap::new();
        let mut namespaces: BTreeMap<usize, bool> = BTreeMap::new();
        for change in changes {
            match change {
                Change::Put(i, n, a, ip) => {
                    // Addresses from a small pool: equal members happen.
                    let p = pod(NS[n], &format!("p{i}"), APPS[a], ip.map(|ip| ip + 1));
                    if let Some(old) = pods.get(&i) {
                        if old.namespace != p.namespace {
                            remove(&mut publisher, &old.namespace, &old.name);
                        }
                    }
                    put(&mut publisher, p.clone());
                    pods.insert(i, p);
                }
                Change::Delete(i) => {
                    if let Some(old) = pods.remove(&i) {
                        remove(&mut publisher, &old.namespace, &old.name);
                    }
                }
                Change::Rewrite(i) => {
                    if let Some(p) = pods.get(&i) {
                        put(&mut publisher, p.clone());
                    }
                }
                Change::Namespace(n, prod) => {
                    let mut labels = crate::selection::name_label(NS[n]);
                    labels.insert("env".into(), if prod { "prod" } else { "dev" }.into());
                    publisher.apply(Delta::Namespace { name: NS[n].into(), labels: Some(labels) });
                    namespaces.insert(n, prod);
                }
                Change::Flush => server.take(&publisher.writes()),
            }
        }
        server.take(&publisher.writes());
        for selection in &selections {
            let k = key(selection);
            let mut want: Vec<GroupMember> = pods
                .values()
                .filter(|p| {
                    let n = NS.iter().position(|n| *n == p.namespace).unwrap();
                    let mut labels = crate::selection::name_label(NS[n]);
                    if let Some(prod) = namespaces.get(&n) {
                        labels.insert("env".into(), if *prod { "prod" } else { "dev" }.into());
                    }
                    selection.matches_pod(p, Some(&labels))
                })
                .filter_map(member_of)
                .collect();
            want.sort();
            prop_assert_eq!(server.members(&k), want);
            prop_assert!(server.0.contains_key(&slice_name(&k, 0)));
        }
        prop_assert!(server.0.values().all(|s| s.members.len() <= SLICE_MEMBERS));
        prop_assert!(server.0.keys().all(|n| selections.iter().any(|s| n.starts_with(&key(s)))));
        // A new leader with the same inventory writes nothing.
        let mut next = Publisher::new();
        for (n, prod) in &namespaces {
            let mut labels = crate::selection::name_label(NS[*n]);
            labels.insert("env".into(), if *prod { "prod" } else { "dev" }.into());
            next.apply(Delta::Namespace { name: NS[*n].into(), labels: Some(labels) });
        }
        for p in pods.values() {
            put(&mut next, p.clone());
        }
        next.adopt(server.0.clone());
        next.set_selections(selections.clone());
        prop_assert_eq!(next.writes(), vec![]);
    }
}
