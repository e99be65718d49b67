//! The Kubernetes source in controller mode (`kubernetes.peers:
//! controller`) against the fake API server, the test playing both the
//! `tollgate controller` (it applies AddressGroup slices as
//! `core/src/selection/group.rs` says) and the agent's compiler glue
//! (`src/agent/compiler.rs`: the snapshot and the slices held into
//! `Incremental::controller`, the needed keys back to the source): the
//! agent lists only its own Pods, subscribes to exactly the keys its rules
//! use, a new slice or a member change of a subscribed group changes the
//! ruleset (also after a 410 Gone and its relist), a group of another key
//! never reaches it, a status write of a
//! remote Pod sends it nothing, other Nodes come only as Node groups, a missing group keeps the last ruleset
//! and says it waits, an unreadable slice is skipped alone, and the controller's Lease reads stale when absent
//! or not renewed within its duration, fresh when renewed; a Namespace none
//! of its Pods lives in waits for the next change or the bound, and its
//! namespaced policies are left out until a local Pod lives there.
#![allow(clippy::disallowed_methods)] // the test waits on the clock for the watcher.

#[path = "support/nodes.rs"]
mod nodes;
#[path = "support/poll.rs"]
mod poll;
use nodes::node;
use poll::poll_until;

use std::collections::BTreeSet;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tollgate::compile::{Incremental, LocalNode};
use tollgate::fqdn::NoFqdn;
use tollgate::model::LabelSelector;
use tollgate::packet::flow::{Flow, Transport, Verdict};
use tollgate::ruleset::Ruleset;
use tollgate::selection::group::{self, canonical, key, slice_name, AddressGroupSpec, GroupMember};
use tollgate::selection::{NamespaceScope, Selection};
use tollgate::source::kube::{Connection, KubeCounters, KubeSource, Latest, PeerGroups};
use tollgate::telemetry::Metrics;

use tollgate_fake_api::{collection, FakeApi};

const NODE: &str = "node-a";

fn pod(name: &str, node: &str, app: &str, ip: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "shop", "labels": {"app": app}},
           "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx"}]},
           "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}})
}

/// Allows ingress to `web` from `db` Pods in `shop` only.
fn policy() -> Value {
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
           "metadata": {"name": "web"},
           "spec": {"priority": 5, "tier": "application",
                    "appliedTo": [{"podSelector": {"matchLabels": {"app": "web"}}}],
                    "ingress": [{"action": "Allow", "from": [{"podSelector": {"matchLabels": {"app": "db"}},
                                                              "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "shop"}}}]},
                                {"action": "Drop"}]}})
}

/// The selection of the policy's peer, as the agent normalises it.
fn db() -> Selection {
    let selector = |k: &str, v: &str| LabelSelector {
        match_labels: [(k.to_string(), v.to_string())].into_iter().collect(),
        match_expressions: Vec::new(),
    };
    Selection::Pods {
        namespaces: NamespaceScope::Selector(selector("kubernetes.io/metadata.name", "shop")),
        pods: Some(selector("app", "db")),
    }
}

/// An AddressGroup slice as the controller publishes it.
fn slice(selection: &Selection, number: u32, ips: &[&str]) -> Value {
    let k = key(selection);
    let spec = AddressGroupSpec {
        selection: canonical(selection),
        slice: number,
        slices: Vec::new(),
        members: ips
            .iter()
            .map(|ip| GroupMember {
                ips: [ip.parse().expect("an address")].into(),
                named_ports: Box::default(),
            })
            .collect(),
    };
    group::object(&slice_name(&k, number), &k, &spec)
}

fn local() -> LocalNode {
    LocalNode {
        name: NODE.into(),
        labels: Default::default(),
        addresses: vec![],
    }
}

fn verdict(ruleset: &Ruleset, src: &str) -> Verdict {
    verdict_to(ruleset, src, "10.1.0.1")
}

/// How `ruleset` decides TCP from `src` to port 80 of `dst`.
fn verdict_to(ruleset: &Ruleset, src: &str, dst: &str) -> Verdict {
    let flow = Flow {
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
        transport: Transport::Tcp {
            src_port: 40000,
            dst_port: 80,
        },
        local: None,
    };
    ruleset.classify(&flow, &NoFqdn).verdict
}

fn metric(metrics: &Metrics, name: &str) -> u64 {
    let text = metrics.render();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

/// The agent's side: the source, and the compiler glue of
/// `src/agent/compiler.rs`.
struct Agent {
    api: FakeApi,
    metrics: Arc<Metrics>,
    latest: Latest,
    peers: PeerGroups,
    compiler: Option<Incremental>,
    _notified: mpsc::Receiver<()>,
    source: Option<KubeSource>,
}

impl Agent {
    fn start(api: FakeApi) -> Agent {
        let config = kube::Config::new(api.url().parse().unwrap());
        let (tx, notified) = mpsc::channel();
        let metrics = Arc::new(Metrics::new());
        let counters = Arc::new(KubeCounters::default());
        metrics.counters().register_set(counters.clone());
        let peers = PeerGroups::new(NODE.into(), Arc::clone(&counters));
        let source = KubeSource::spawn(
            Connection::Config(Box::new(config)),
            Some(NODE.into()),
            Some(peers.clone()),
            counters,
            move || {
                let _ = tx.send(());
            },
        )
        .expect("kubernetes source starts");
        Agent {
            api,
            metrics,
            latest: source.latest(),
            peers,
            compiler: None,
            _notified: notified,
            source: Some(source),
        }
    }

    /// One reload: the latest snapshot and the slices held compiled; the
    /// keys needed and the count waited for handed back to the source.
    /// `None` while a group is waited for.
    fn compile(&mut self) -> Option<Arc<Ruleset>> {
        let snapshot = self.latest.get()?.snapshot.clone();
        let compiler = self
            .compiler
            .get_or_insert_with(|| Incremental::controller(&snapshot, &local()));
        compiler.update(&snapshot, &local());
        compiler.set_groups(self.peers.held().values());
        let built = compiler.ruleset();
        let waiting = compiler.waiting();
        self.peers
            .compiled(compiler.needed().into_keys().collect(), waiting.len());
        built
    }

    /// Compiles until `ok` holds of the newest ruleset (at most 20 s).
    fn wait_for(
        &mut self,
        what: &str,
        mut ok: impl FnMut(Option<&Ruleset>, &Agent) -> bool,
    ) -> Option<Arc<Ruleset>> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut newest: Option<Arc<Ruleset>> = None;
        loop {
            if let Some(built) = self.compile() {
                newest = Some(built);
            }
            if ok(newest.as_deref(), self) {
                return newest;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; requests: {:#?}",
                self.api.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Events the API server sent so far on the watches of `kind`.
    fn events(&self, api_version: &str, kind: &str) -> u64 {
        let path = collection(api_version, kind);
        self.api
            .watches()
            .iter()
            .filter(|w| w.path == path)
            .map(|w| w.events)
            .sum()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.source.take();
    }
}

fn setup(api: &FakeApi) {
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}));
    api.apply(
        json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "Tier",
                     "metadata": {"name": "application"}, "spec": {"priority": 250}}),
    );
    api.apply(pod("web", NODE, "web", "10.1.0.1"));
    api.apply(pod("db-remote", "node-b", "db", "10.2.0.2"));
    api.apply(policy());
}

/// The whole path of controller mode against the API server.
///
/// Mutations: `source::kube::peers::follow` watching every AddressGroup
/// (`watcher::Config::default()` without `.labels(&selector)`): no watch
/// of exactly the needed key, and the other key's group would come
/// (tried: fails); the Pod watch without its field selector (`pods`
/// always `None` in `KubeSource::spawn`): the remote Pod is listed and its
/// status write sent (tried: fails).
#[test]
fn controller_mode_hears_its_own_pods_and_exactly_the_groups_its_rules_use() {
    let api = FakeApi::start("127.0.0.1:0");
    setup(&api);
    let mut agent = Agent::start(api);
    let db_key = key(&db());

    // Its own Pods only, listed with the field selector.
    poll_until(
        "the first snapshot",
        || agent.latest.get().is_some(),
        || format!("{:#?}", agent.api.log()),
    );
    let pods: Vec<String> = agent
        .latest
        .get()
        .unwrap()
        .snapshot
        .iter()
        .filter(|o| o.kind() == tollgate::model::Kind::Pod)
        .map(|o| o.metadata().name.clone())
        .collect();
    assert_eq!(pods, ["web"], "only this Node's Pods");
    let pods_path = collection("v1", "Pod");
    assert!(
        agent
            .api
            .log()
            .iter()
            .any(|r| r.starts_with(&format!("GET {pods_path}?"))
                && r.contains("fieldSelector=spec.nodeName%3Dnode-a")),
        "{:#?}",
        agent.api.log()
    );

    // Nothing published: no ruleset, one group waited for, subscribed.
    assert!(agent.compile().is_none());
    assert_eq!(agent.peers.waiting(), 1);
    assert_eq!(
        metric(&agent.metrics, "tollgate_controller_groups_waiting"),
        1
    );
    let groups_path = collection(group::API_VERSION, group::KIND);
    let wanted = format!("{} in ({db_key})", group::SELECTION_LABEL);
    poll_until(
        "the AddressGroup watch",
        || {
            agent
                .api
                .watches()
                .iter()
                .any(|w| w.path == groups_path && w.labels == wanted)
        },
        || format!("{:#?}", agent.api.watches()),
    );
    assert!(agent
        .api
        .watches()
        .iter()
        .filter(|w| w.path == groups_path)
        .all(|w| w.labels == wanted));

    // The controller publishes: slice 0, and a group of another key.
    let other = Selection::ServiceAccount {
        namespace: "shop".into(),
        name: "other".into(),
    };
    agent.api.apply(slice(&other, 0, &["10.2.0.9"]));
    agent.api.apply(slice(&db(), 0, &["10.2.0.2"]));
    let first = agent
        .wait_for("the first ruleset", |r, _| r.is_some())
        .unwrap();
    assert_eq!(
        verdict(&first, "10.2.0.2"),
        Verdict::Allow,
        "the remote db Pod, from its group"
    );
    assert_eq!(
        verdict(&first, "10.2.0.3"),
        Verdict::Drop,
        "positive control of the Drop"
    );
    assert_eq!(agent.peers.waiting(), 0);
    assert_eq!(
        metric(&agent.metrics, "tollgate_controller_groups_waiting"),
        0
    );

    // A new slice and a member change reach the ruleset.
    agent.api.apply(slice(&db(), 1, &["10.2.0.3"]));
    agent.wait_for("slice 1", |r, _| {
        r.is_some_and(|r| verdict(r, "10.2.0.3") == Verdict::Allow)
    });
    agent.api.apply(slice(&db(), 0, &["10.2.0.4"]));
    let changed = agent
        .wait_for("a member change", |r, _| {
            r.is_some_and(|r| verdict(r, "10.2.0.2") == Verdict::Drop)
        })
        .unwrap();
    assert_eq!(verdict(&changed, "10.2.0.4"), Verdict::Allow);
    assert_eq!(verdict(&changed, "10.2.0.3"), Verdict::Allow);

    // The other key's group never came.
    let other_name = slice_name(&key(&other), 0);
    assert!(
        !agent.peers.held().contains_key(&other_name),
        "{:?}",
        agent.peers.held().keys().collect::<Vec<_>>()
    );
    let sent: u64 = agent
        .api
        .watches()
        .iter()
        .filter(|w| w.path == groups_path)
        .map(|w| w.events)
        .sum();
    assert_eq!(
        sent,
        3,
        "three writes of subscribed slices: {:#?}",
        agent.api.watches()
    );

    // History compacted: the group watch gets 410 Gone and lists again;
    // the slices held stay, and a later change still arrives.
    let lists = agent.api.lists(&groups_path);
    let pods_path = collection("v1", "Pod");
    let pod_watches = || {
        agent
            .api
            .watches()
            .iter()
            .filter(|w| w.path == pods_path)
            .count()
    };
    let before = pod_watches();
    agent.api.compact();
    // (The Pod watch is back before Pods are written again below.)
    poll_until(
        "the Pod watch again",
        || pod_watches() > before,
        String::new,
    );
    agent.api.apply(slice(&db(), 1, &["10.2.0.5"]));
    agent.wait_for("a change after the relist", |r, a| {
        a.api.lists(&groups_path) > lists
            && r.is_some_and(|r| {
                verdict(r, "10.2.0.5") == Verdict::Allow && verdict(r, "10.2.0.3") == Verdict::Drop
            })
    });

    // A status write of a remote Pod sends this agent nothing; a local
    // one does (the positive control).
    let pod_events = || agent.events("v1", "Pod");
    let before = pod_events();
    let mut remote = pod("db-remote", "node-b", "db", "10.2.0.2");
    remote["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
    agent.api.apply(remote);
    let mut web = pod("web", NODE, "web", "10.1.0.1");
    web["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
    agent.api.apply(web);
    poll_until(
        "the local Pod's write",
        || pod_events() == before + 1,
        || format!("{:#?}", agent.api.watches()),
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        pod_events(),
        before + 1,
        "the remote Pod's write was not sent"
    );

    // Slice 0 deleted: the last ruleset stays, one group waited for.
    agent.api.delete(&slice(&db(), 0, &[]));
    agent.wait_for("waiting again", |_, a| a.peers.waiting() == 1);
    assert!(
        agent.compile().is_none(),
        "no ruleset while a group is missing"
    );
    assert_eq!(
        metric(&agent.metrics, "tollgate_controller_groups_waiting"),
        1
    );

    // No Lease: the controller reads stale.
    assert!(agent.peers.stale());
    assert_eq!(metric(&agent.metrics, "tollgate_controller_stale"), 1);
}

/// Other Nodes reach an agent in controller mode only as the members of
/// the Node groups its rules use: it lists and watches its own Node
/// alone, waits for the group of a `nodeSelector` peer, and a remote
/// Node's status report sends it nothing.
///
/// Mutations: the Node watch without its field selector (`Kind::Node`'s
/// arm removed from `watch_all`): the remote Node is listed and its
/// reports sent (tried: fails); `Selections::needed` leaving Node
/// selections out: the Node group is never subscribed to and no ruleset
/// comes (tried: fails).
#[test]
fn controller_mode_hears_its_own_node_and_the_others_as_a_node_group() {
    let api = FakeApi::start("127.0.0.1:0");
    setup(&api);
    api.apply(node(NODE, "web", "10.3.0.1"));
    api.apply(node("node-b", "db", "10.3.0.2"));
    let mut from_nodes = policy();
    from_nodes["spec"]["ingress"][0]["from"] =
        json!([{"nodeSelector": {"matchLabels": {"role": "db"}}}]);
    api.apply(from_nodes);
    let mut agent = Agent::start(api);
    poll_until(
        "the first snapshot with its Node",
        || {
            agent.latest.get().is_some_and(|l| {
                l.snapshot
                    .iter()
                    .any(|o| o.kind() == tollgate::model::Kind::Node)
            })
        },
        || format!("{:#?}", agent.api.log()),
    );
    let nodes: Vec<String> = agent
        .latest
        .get()
        .unwrap()
        .snapshot
        .iter()
        .filter(|o| o.kind() == tollgate::model::Kind::Node)
        .map(|o| o.metadata().name.clone())
        .collect();
    assert_eq!(nodes, [NODE], "only this Node");
    let nodes_path = collection("v1", "Node");
    assert!(
        agent
            .api
            .log()
            .iter()
            .any(|r| r.starts_with(&format!("GET {nodes_path}?"))
                && r.contains("fieldSelector=metadata.name%3Dnode-a")),
        "{:#?}",
        agent.api.log()
    );

    // The Node group is waited for, then read.
    let role_db = Selection::Nodes(LabelSelector {
        match_labels: [("role".to_string(), "db".to_string())]
            .into_iter()
            .collect(),
        match_expressions: Vec::new(),
    });
    assert!(agent.compile().is_none());
    assert_eq!(agent.peers.waiting(), 1);
    agent.api.apply(slice(&role_db, 0, &["10.3.0.2"]));
    let ruleset = agent
        .wait_for("the ruleset with the Node group", |r, _| r.is_some())
        .unwrap();
    assert_eq!(verdict(&ruleset, "10.3.0.2"), Verdict::Allow, "node-b");
    assert_eq!(verdict(&ruleset, "10.3.0.3"), Verdict::Drop, "control");

    // node-b reports its status: nothing sent; this Node's report is
    // (the positive control).
    let node_events = || agent.events("v1", "Node");
    let before = node_events();
    let mut report = node("node-b", "db", "10.3.0.2");
    report["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
    agent.api.apply(report);
    let mut own = node(NODE, "web", "10.3.0.1");
    own["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
    agent.api.apply(own);
    poll_until(
        "this Node's report",
        || node_events() == before + 1,
        || format!("{:#?}", agent.api.watches()),
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(node_events(), before + 1, "node-b's report was not sent");
}

/// The keys follow the policies: a policy that stops using a selection and
/// starts another restarts the watch with the new set only.
///
/// Mutation: `peers::follow` deaf to a change of the keys (its
/// `needed.changed()` branch disabled): the watch of the new key never
/// starts (tried: fails).
#[test]
fn the_group_watch_follows_the_keys_the_rules_need() {
    let api = FakeApi::start("127.0.0.1:0");
    setup(&api);
    let mut agent = Agent::start(api);
    poll_until(
        "the first snapshot",
        || agent.latest.get().is_some(),
        String::new,
    );
    agent.api.apply(slice(&db(), 0, &["10.2.0.2"]));
    agent.wait_for("the first ruleset", |r, _| r.is_some());
    // The policy's peer becomes a ServiceAccount.
    let mut next = policy();
    next["spec"]["ingress"][0]["from"] =
        json!([{"serviceAccount": {"name": "api", "namespace": "shop"}}]);
    agent.api.apply(next);
    let account = Selection::ServiceAccount {
        namespace: "shop".into(),
        name: "api".into(),
    };
    let wanted = format!("{} in ({})", group::SELECTION_LABEL, key(&account));
    let groups_path = collection(group::API_VERSION, group::KIND);
    agent.wait_for("the new key's watch", |_, a| {
        a.api
            .watches()
            .iter()
            .any(|w| w.path == groups_path && w.labels == wanted)
    });
    let keys: BTreeSet<String> = agent
        .api
        .watches()
        .iter()
        .filter(|w| w.path == groups_path)
        .map(|w| w.labels.clone())
        .collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    agent.api.apply(slice(&account, 0, &["10.2.0.7"]));
    let ruleset = agent
        .wait_for("the new group's ruleset", |r, _| {
            r.is_some_and(|r| verdict(r, "10.2.0.7") == Verdict::Allow)
        })
        .unwrap();
    assert_eq!(verdict(&ruleset, "10.2.0.2"), Verdict::Drop);
}

/// A slice that cannot be read (an address that is not one) is skipped
/// on its own: the slices listed with it are held, its group waits (never
/// read as empty or as the slices received), no request fails, and the
/// slice written again readable completes the group on the same watch.
///
/// Mutation: `peers::Received` decoding the spec directly
/// (`AddressGroupSpec::deserialize`, an error fails the whole list): the
/// list fails and is retried, a watch error is counted and no ruleset is
/// built (tried: fails).
#[test]
fn an_unreadable_slice_is_skipped_alone_and_its_group_waits_for_it() {
    let api = FakeApi::start("127.0.0.1:0");
    setup(&api);
    let mut first = slice(&db(), 0, &["10.2.0.2"]);
    first["spec"]["slices"] = json!([1]);
    api.apply(first);
    let mut unreadable = slice(&db(), 1, &["10.2.0.3"]);
    unreadable["spec"]["members"][0]["ips"][0] = json!("not-an-address");
    api.apply(unreadable);
    let mut agent = Agent::start(api);
    agent.wait_for("slice 0 held, the group waiting", |r, a| {
        assert!(r.is_none(), "a ruleset built without slice 1");
        a.peers.held().len() == 1 && a.peers.waiting() == 1
    });
    assert_eq!(
        metric(&agent.metrics, "tollgate_kubernetes_watch_errors_total"),
        0
    );
    agent.api.apply(slice(&db(), 1, &["10.2.0.3"]));
    let ruleset = agent
        .wait_for("the group complete", |r, _| r.is_some())
        .unwrap();
    assert_eq!(verdict(&ruleset, "10.2.0.2"), Verdict::Allow);
    assert_eq!(verdict(&ruleset, "10.2.0.3"), Verdict::Allow);
    assert_eq!(verdict(&ruleset, "10.2.0.9"), Verdict::Drop);
    assert_eq!(
        metric(&agent.metrics, "tollgate_kubernetes_watch_errors_total"),
        0
    );
}

/// The positive control of `tollgate_controller_stale`: a Lease renewed
/// within its duration reads fresh; one renewed longer ago reads stale.
///
/// Mutation: `lease_stale` comparing against the renewal alone (without
/// the duration added): the fresh Lease reads stale (tried: fails).
#[test]
fn a_renewed_controller_lease_reads_fresh_and_an_old_one_stale() {
    for (age, stale) in [(0, false), (60, true)] {
        let api = FakeApi::start("127.0.0.1:0");
        setup(&api);
        let renewed =
            k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(age);
        api.apply(
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                         "metadata": {"name": "tollgate-controller", "namespace": "kube-system"},
                         "spec": {"holderIdentity": "controller-0", "leaseDurationSeconds": 15,
                                  "renewTime": renewed.to_string()}}),
        );
        let agent = Agent::start(api);
        let lease =
            "GET /apis/coordination.k8s.io/v1/namespaces/kube-system/leases/tollgate-controller";
        poll_until(
            "the Lease read",
            || agent.api.log().iter().any(|r| r == lease),
            || format!("{:#?}", agent.api.log()),
        );
        // Stale until a read says otherwise: the fresh case waits for it.
        poll_until(
            "its verdict",
            || {
                agent.peers.stale() == stale
                    && metric(&agent.metrics, "tollgate_controller_stale") == u64::from(stale)
            },
            || format!("{age} s old: {}", agent.metrics.render()),
        );
    }
}

/// The `team` label of Namespace `name` in the latest snapshot.
fn team(agent: &Agent, name: &str) -> Option<String> {
    let admitted = agent.latest.get()?;
    let team = admitted.snapshot.iter().find_map(|o| match o {
        tollgate::model::Object::Namespace(ns) if ns.metadata.name == name => {
            ns.metadata.labels.get("team").cloned()
        }
        _ => None,
    });
    team
}

fn namespace(name: &str, team: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
           "metadata": {"name": name, "labels": {"team": team}}})
}

/// A Namespace none of the agent's Pods lives in is read by no decision
/// of an agent in controller mode: its changes wait for the next change
/// that cannot (a policy edit carries them at once), or
/// `DEFERRED_AT_MOST`; a change of the Namespace of a local Pod goes out
/// at once (the positive control).
///
/// Mutation: `span_to_local_endpoints` not called in `watch_all`
/// (tried: the first deferred change comes at once and the test fails);
/// `Due::Later` taken as `Due::Not` (tried: the change alone never comes,
/// the test times out).
#[test]
fn controller_mode_defers_a_namespace_none_of_its_pods_lives_in() {
    let api = FakeApi::start("127.0.0.1:0");
    setup(&api);
    let agent = Agent::start(api);
    poll_until(
        "the first snapshot",
        || agent.latest.get().is_some(),
        || format!("{:#?}", agent.api.log()),
    );
    let log = || format!("{:#?}", agent.api.log());

    // Deferred alone: within the bound, not at once.
    let started = Instant::now();
    agent.api.apply(namespace("quiet", "a"));
    poll_until(
        "the deferred Namespace",
        || team(&agent, "quiet").as_deref() == Some("a"),
        log,
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(5),
        "a Namespace without a local Pod went out after {waited:?}, at once"
    );

    // Carried by a change that cannot wait.
    let started = Instant::now();
    agent.api.apply(namespace("quiet", "b"));
    let mut edited = policy();
    edited["spec"]["priority"] = json!(6);
    agent.api.apply(edited);
    poll_until(
        "the policy edit",
        || team(&agent, "quiet").as_deref() == Some("b"),
        log,
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the policy edit did not carry the deferred change"
    );

    // The Namespace of a local Pod: at once.
    let started = Instant::now();
    agent.api.apply(namespace("shop", "c"));
    poll_until(
        "the local Pod's Namespace",
        || team(&agent, "shop").as_deref() == Some("c"),
        log,
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the local Pod's Namespace was deferred"
    );
}

/// An Antrea NetworkPolicy of Namespace `namespace` dropping ingress from
/// 10.9.0.0/16 to every Pod of it.
fn namespaced_drop(name: &str, namespace: &str) -> Value {
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "NetworkPolicy",
           "metadata": {"name": name, "namespace": namespace},
           "spec": {"priority": 1, "tier": "application",
                    "appliedTo": [{"podSelector": {}}],
                    "ingress": [{"action": "Drop", "from": [{"ipBlock": {"cidr": "10.9.0.0/16"}}]}]}})
}

/// Whether the latest snapshot holds the Antrea NetworkPolicy `namespace/name`.
fn holds_policy(agent: &Agent, namespace: &str, name: &str) -> bool {
    agent.latest.get().is_some_and(|admitted| {
        admitted.snapshot.iter().any(|o| match o {
            tollgate::model::Object::AntreaNetworkPolicy(p) => {
                p.metadata.name == name && p.metadata.namespace.as_deref() == Some(namespace)
            }
            _ => false,
        })
    })
}

/// An agent in controller mode leaves out the namespaced policies of a
/// Namespace none of its endpoints lives in (each agent of a large
/// cluster would otherwise hold, validate and rank every policy of it),
/// and the first local Pod of that Namespace is enforced with them: the
/// first ruleset that has the Pod drops what its Namespace's policy drops
/// (never open); once the Pod is gone, the policy is left out again.
///
/// Mutations: `span_to_local_endpoints` not called in `watch_all` (tried:
/// the policy of `other` is admitted at once, the first assertion
/// fails); `Store::reaches` answering false (tried: no namespaced policy
/// is admitted, the test times out waiting for the policy of `shop`).
#[test]
fn controller_mode_admits_a_namespaced_policy_with_the_first_local_pod_of_its_namespace() {
    let api = FakeApi::start("127.0.0.1:0");
    setup(&api);
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}}));
    api.apply(slice(&db(), 0, &["10.2.0.2"]));
    let mut agent = Agent::start(api);
    agent.wait_for("the first ruleset", |r, _| r.is_some());
    // Left out: a later policy of `shop`, on the same watch, is admitted
    // while the one of `other` is not.
    agent.api.apply(namespaced_drop("deny", "other"));
    agent.api.apply(namespaced_drop("marker", "shop"));
    poll_until(
        "the policy of shop",
        || holds_policy(&agent, "shop", "marker"),
        || format!("{:#?}", agent.api.log()),
    );
    assert!(
        !holds_policy(&agent, "other", "deny"),
        "a policy of a Namespace without a local Pod was admitted"
    );

    // The first local Pod of `other`: its first ruleset enforces the
    // policy.
    let mut pod = pod("new", NODE, "api", "10.1.0.3");
    pod["metadata"]["namespace"] = json!("other");
    agent.api.apply(pod.clone());
    let ruleset = agent
        .wait_for("the new Pod", |r, _| {
            r.is_some_and(|r| r.endpoint_of("10.1.0.3".parse().unwrap()).is_some())
        })
        .expect("a ruleset");
    let from = |src: &str| verdict_to(&ruleset, src, "10.1.0.3");
    assert_eq!(
        from("10.9.0.1"),
        Verdict::Drop,
        "the new Pod's first ruleset"
    );
    assert_eq!(from("10.8.0.1"), Verdict::Allow, "the positive control");

    // Gone: the policy is left out again.
    agent.api.delete(&pod);
    poll_until(
        "the Pod's deletion",
        || !holds_policy(&agent, "other", "deny"),
        || format!("{:#?}", agent.api.log()),
    );
}
