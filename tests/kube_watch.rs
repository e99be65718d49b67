//! The Kubernetes source against an in-process fake API server speaking
//! list and watch over HTTP: objects added, changed and deleted through
//! the server reach the compiled ruleset; an invalid CRD is skipped while
//! the rest applies; a 410 Gone makes the watcher relist; an optional kind
//! (ExternalEntity, the network-policy-api kinds) whose CRD is missing holds
//! nothing back and is picked up when the CRD appears; a policy that names
//! a group not created yet starts to enforce when the group arrives; a
//! skipped or partly enforced object gets one Kubernetes Event from the
//! node (counted again, never duplicated), and the Event API failing
//! holds nothing back; a failing watch reads as not synced until its kind
//! is listed again; a write that changes nothing tollgate keeps (a status
//! write, a Node's status report) publishes no snapshot; a collection of
//! several pages is read whole.
#![allow(clippy::disallowed_methods)] // the test waits on the clock for the watcher.

#[path = "support/poll.rs"]
mod poll;
use poll::poll_until;

use std::net::{IpAddr, SocketAddr};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use socket2::{Domain, Socket, Type};
use tollgate::compile::{compile, LocalNode};
use tollgate::fqdn::NoFqdn;
use tollgate::packet::flow::{Flow, Transport, Verdict};
use tollgate::ruleset::Ruleset;
use tollgate::source::kube::{
    Admitted, Connection, KubeCounters, KubeSource, Latest, Reason, SourceState,
};
use tollgate::telemetry::Metrics;

use tollgate_fake_api::{collection, FakeApi};

const NODE: &str = "node-a";

fn pod(name: &str, app: &str, ip: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "shop", "labels": {"app": app}},
           "spec": {"nodeName": NODE, "serviceAccountName": "web",
                    "containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}]}]},
           "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}})
}

fn tier(name: &str, priority: i64) -> Value {
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "Tier",
           "metadata": {"name": name}, "spec": {"priority": priority}})
}

fn acnp(name: &str, tier: &str, app: &str) -> Value {
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
           "metadata": {"name": name},
           "spec": {"priority": 5, "tier": tier,
                    "appliedTo": [{"podSelector": {"matchLabels": {"app": app}}}],
                    "ingress": [{"action": "Drop", "from": [{"ipBlock": {"cidr": "10.99.0.0/16"}}]}]}})
}

fn k8s_policy(name: &str, app: &str) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
           "metadata": {"name": name, "namespace": "shop"},
           "spec": {"podSelector": {"matchLabels": {"app": app}}, "policyTypes": ["Ingress"]}})
}

fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

fn local() -> LocalNode {
    LocalNode {
        name: NODE.into(),
        labels: Default::default(),
        addresses: vec![],
    }
}

struct Harness {
    api: FakeApi,
    metrics: Arc<Metrics>,
    latest: Latest,
    state: SourceState,
    // Dropped before the server so the watchers stop first.
    source: Option<KubeSource>,
    notified: mpsc::Receiver<()>,
}

impl Harness {
    fn start(api: FakeApi) -> Harness {
        let config = kube::Config::new(api.url().parse().unwrap());
        let (tx, notified) = mpsc::channel();
        let (metrics, counters) = registered();
        let source = KubeSource::spawn(
            Connection::Config(Box::new(config)),
            Some(NODE.into()),
            None,
            counters,
            move || {
                let _ = tx.send(());
            },
        )
        .expect("kubernetes source starts");
        Harness {
            metrics,
            api,
            latest: source.latest(),
            state: source.state(),
            source: Some(source),
            notified,
        }
    }

    /// Waits (at most 20 s) for a published snapshot that satisfies `ok`.
    fn wait_for(&self, what: &str, ok: impl Fn(&Admitted, &Ruleset) -> bool) -> Ruleset {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(admitted) = self.latest.get() {
                let ruleset = compile(&admitted.snapshot, &local());
                if ok(&admitted, &ruleset) {
                    return ruleset;
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "timed out waiting for {what}; requests: {:#?}",
                self.api.log()
            );
            let _ = self
                .notified
                .recv_timeout(left.min(Duration::from_millis(500)));
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.source.take();
    }
}

/// The value of a metric (its name with labels, if any).
/// Metrics with the source's counter set registered, as the agent has them.
fn registered() -> (Arc<Metrics>, Arc<KubeCounters>) {
    let metrics = Arc::new(Metrics::new());
    let counters = Arc::new(KubeCounters::default());
    metrics.counters().register_set(counters.clone());
    (metrics, counters)
}

fn metric(metrics: &Metrics, name: &str) -> u64 {
    let text = metrics.render();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

fn enforced(ruleset: &Ruleset) -> Vec<IpAddr> {
    ruleset.enforced().endpoints.clone()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn watched_objects_reach_the_ruleset_and_invalid_ones_are_skipped() {
    let api = FakeApi::start("127.0.0.1:0");
    // Present before the first list.
    api.apply(namespace("shop"));
    api.apply(pod("web-1", "web", "10.1.0.2"));
    api.apply(pod("db-1", "db", "10.1.0.3"));
    api.apply(tier("team", 10));
    let h = Harness::start(api);

    h.wait_for("initial snapshot", |a, r| {
        a.snapshot.objects.len() == 4 && enforced(r).is_empty()
    });

    // A policy added through the watch selects web-1.
    h.api.apply(acnp("deny-web", "team", "web"));
    h.wait_for("policy applied", |_, r| enforced(r) == [ip("10.1.0.2")]);

    // An invalid CRD (priority out of range for a custom Tier) is skipped,
    // with an error naming it, while the rest keeps working.
    h.api.apply(tier("bad", 400));
    h.api.apply(acnp("in-bad-tier", "bad", "db"));
    let ruleset = h.wait_for("invalid tier skipped", |a, _| a.skipped.len() == 2);
    assert_eq!(enforced(&ruleset), [ip("10.1.0.2")]);
    let admitted = h.latest.get().unwrap();
    let problems: Vec<String> = admitted.skipped.iter().map(|p| p.to_string()).collect();
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("kubernetes: Tier bad: spec.priority")),
        "{problems:#?}"
    );
    assert!(problems
        .iter()
        .any(|p| p.contains("ClusterNetworkPolicy in-bad-tier")));
    assert_eq!(metric(&h.metrics, "tollgate_kubernetes_objects_skipped"), 2);

    // A label change moves a Pod into the rule, another out of it.
    h.api.apply(pod("db-1", "web", "10.1.0.3"));
    h.wait_for("db-1 relabelled in", |_, r| {
        enforced(r) == [ip("10.1.0.2"), ip("10.1.0.3")]
    });
    h.api.apply(pod("web-1", "frontend", "10.1.0.2"));
    h.wait_for("web-1 relabelled out", |_, r| {
        enforced(r) == [ip("10.1.0.3")]
    });

    // A Kubernetes NetworkPolicy selects web-1 again.
    h.api.apply(k8s_policy("isolate-frontend", "frontend"));
    h.wait_for("k8s policy applied", |_, r| {
        enforced(r) == [ip("10.1.0.2"), ip("10.1.0.3")]
    });

    // Fixing the Tier admits it and the policy in it.
    h.api.apply(tier("bad", 20));
    h.wait_for("tier fixed", |a, r| {
        a.skipped.is_empty() && r.policies().len() == 3
    });

    // Deletes are seen too.
    h.api.delete(&acnp("deny-web", "team", "web"));
    h.api.delete(&acnp("in-bad-tier", "bad", "db"));
    h.api.delete(&pod("db-1", "web", "10.1.0.3"));
    h.wait_for("deletes applied", |_, r| {
        enforced(r) == [ip("10.1.0.2")] && r.policies().len() == 1
    });
}

fn node(heartbeat: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}},
           "status": {"addresses": [{"type": "InternalIP", "address": "192.168.7.2"}],
                      "conditions": [{"type": "Ready", "status": "True",
                                      "lastHeartbeatTime": heartbeat}]}})
}

/// Writes that change nothing tollgate keeps of their object — a Node's
/// status report, a Pod's status, Antrea's realization status on a
/// policy — publish no snapshot (no agent reloads for them) and are
/// counted; a change after them is published. The absence is watched for
/// 1 s after the writes were received (ten times the source's quiet
/// period before it publishes). Mutations (tried, both fail): the store
/// reporting an unread write as due → a snapshot follows them; its
/// `keep_if_same` always false → none is counted.
#[test]
fn status_writes_publish_no_snapshot() {
    let api = FakeApi::start("127.0.0.1:0");
    api.apply(namespace("shop"));
    api.apply(node("2026-11-29T00:00:00Z"));
    api.apply(pod("web-1", "web", "10.1.0.2"));
    api.apply(tier("team", 10));
    api.apply(acnp("deny-web", "team", "web"));
    let h = Harness::start(api);
    h.wait_for("initial snapshot", |a, r| {
        a.snapshot.objects.len() == 5 && enforced(r) == [ip("10.1.0.2")]
    });
    let first = Arc::clone(&h.latest.get().unwrap().snapshot);
    while h.notified.try_recv().is_ok() {}

    for minute in 1..=3 {
        h.api.apply(node(&format!("2026-11-29T00:0{minute}:00Z")));
    }
    let mut status = pod("web-1", "web", "10.1.0.2");
    status["status"]["conditions"] = json!([{"type": "Ready", "status": "False"}]);
    h.api.apply(status);
    let mut realized = acnp("deny-web", "team", "web");
    realized["status"] = json!({"phase": "Realized", "observedGeneration": 1,
                                "currentNodesRealized": 1, "desiredNodesRealized": 1});
    h.api.apply(realized);
    poll_until(
        "five unread writes counted",
        || metric(&h.metrics, "tollgate_kubernetes_writes_unread_total") == 5,
        || h.metrics.render(),
    );
    assert!(
        h.notified.recv_timeout(Duration::from_secs(1)).is_err(),
        "a snapshot was published for writes nothing reads"
    );
    assert!(Arc::ptr_eq(&first, &h.latest.get().unwrap().snapshot));

    // Positive control: a label change is published.
    h.api.apply(pod("web-1", "db", "10.1.0.2"));
    h.wait_for("label change", |_, r| enforced(r).is_empty());
}

#[test]
fn gone_forces_a_relist_and_bookmarks_are_harmless() {
    let api = FakeApi::start("127.0.0.1:0");
    api.apply(namespace("shop"));
    api.apply(pod("web-1", "web", "10.2.0.2"));
    let h = Harness::start(api);
    h.wait_for("initial snapshot", |a, _| a.snapshot.objects.len() == 2);
    let pods = collection("v1", "Pod");
    let tiers = collection("crd.antrea.io/v1beta1", "Tier");
    assert_eq!(h.api.lists(&pods), 1);

    h.api.bookmark(&[pods.clone(), tiers.clone()]);
    h.api.apply(tier("team", 10));
    h.wait_for("tier after bookmark", |a, _| a.snapshot.objects.len() == 3);

    // History compacted: every open watch ends; the next watch from an old
    // resourceVersion gets 410 Gone and the watcher lists again. A change
    // made meanwhile is picked up by that list.
    h.api.compact();
    h.api.apply(acnp("deny-web", "team", "web"));
    h.wait_for("policy after relist", |_, r| {
        enforced(r) == [ip("10.2.0.2")]
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while h.api.lists(&pods) < 2 {
        assert!(Instant::now() < deadline, "no relist: {:#?}", h.api.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(h.api.gone_sent() >= 1);

    // Watching goes on after the relist.
    h.api.apply(pod("web-1", "other", "10.2.0.2"));
    h.wait_for("label change after relist", |_, r| enforced(r).is_empty());
}

/// A collection larger than a page (kube's watcher asks for 500 items at
/// a time) is read whole: every page is taken before the kind counts as
/// listed, and the snapshot holds every Pod.
#[test]
fn a_collection_of_many_pages_is_read_whole() {
    const PODS: usize = 1_201;
    let api = FakeApi::start("127.0.0.1:0");
    api.apply(namespace("shop"));
    for i in 0..PODS {
        let address = format!("10.3.{}.{}", i / 250, i % 250 + 1);
        api.apply(pod(&format!("web-{i}"), "web", &address));
    }
    let h = Harness::start(api);
    h.wait_for("every Pod", |a, _| a.snapshot.objects.len() == PODS + 1);
    let pods = collection("v1", "Pod");
    let pages: Vec<String> = h
        .api
        .log()
        .into_iter()
        .filter(|r| r.starts_with(&format!("GET {pods}?")) && !r.contains("watch=true"))
        .collect();
    assert_eq!(pages.len(), 3, "{pages:#?}");
    assert!(pages.iter().all(|p| p.contains("limit=500")), "{pages:#?}");
    assert_eq!(pages.iter().filter(|p| p.contains("continue=")).count(), 2);
    assert_eq!(h.api.lists(&pods), 1);
}

#[test]
fn unreachable_server_is_retried_until_it_answers() {
    // A socket bound to a port but not listening: connections to it are
    // refused, and no other process can take the port before the server
    // starts listening on this very socket.
    let reserved = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    reserved
        .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    let address = reserved.local_addr().unwrap().as_socket().unwrap();
    let config = kube::Config::new(format!("http://{address}").parse().unwrap());
    let (tx, notified) = mpsc::channel();
    let (metrics, counters) = registered();
    let source = KubeSource::spawn(
        Connection::Config(Box::new(config)),
        None,
        None,
        counters,
        move || {
            let _ = tx.send(());
        },
    )
    .expect("starts without contacting the server");
    assert!(notified.recv_timeout(Duration::from_secs(2)).is_err());
    assert!(source.latest().get().is_none(), "nothing published yet");

    reserved.listen(128).unwrap();
    let api = FakeApi::serve(reserved.into());
    api.apply(namespace("shop"));
    notified
        .recv_timeout(Duration::from_secs(30))
        .expect("snapshot after the server came up");
    assert_eq!(source.latest().get().unwrap().snapshot.objects.len(), 1);
    assert!(
        metric(&metrics, "tollgate_kubernetes_watch_errors_total") >= 1,
        "{}",
        metrics.render()
    );
    drop(source);
}

fn external_entity(name: &str, role: &str, ip: &str) -> Value {
    json!({"apiVersion": "crd.antrea.io/v1alpha2", "kind": "ExternalEntity",
           "metadata": {"name": name, "namespace": "shop", "labels": {"role": role}},
           "spec": {"endpoints": [{"ip": ip, "name": "eth0"}], "externalNode": "vm-host"}})
}

/// Allows TCP to `app` Pods only from ExternalEntities labelled role=vm.
fn allow_from_vms(app: &str) -> Value {
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
           "metadata": {"name": "web-from-vms"},
           "spec": {"priority": 5, "tier": "application",
                    "appliedTo": [{"podSelector": {"matchLabels": {"app": app}}}],
                    "ingress": [{"action": "Allow",
                                 "from": [{"externalEntitySelector": {"matchLabels": {"role": "vm"}}}]},
                                {"action": "Drop"}]}})
}

fn tcp_verdict(ruleset: &Ruleset, src: &str, dst: &str) -> Verdict {
    let flow = Flow {
        src: ip(src),
        dst: ip(dst),
        transport: Transport::Tcp {
            src_port: 40000,
            dst_port: 80,
        },
        local: None,
    };
    ruleset.classify(&flow, &NoFqdn).verdict
}

#[test]
fn missing_external_entity_crd_holds_nothing_back_and_is_picked_up_when_installed() {
    let api = FakeApi::start("127.0.0.1:0");
    let entities = collection("crd.antrea.io/v1alpha2", "ExternalEntity");
    api.uninstall(&entities);
    api.apply(namespace("shop"));
    api.apply(pod("web-1", "web", "10.4.0.2"));
    api.apply(allow_from_vms("web"));
    let h = Harness::start(api);

    // The first snapshot comes although ExternalEntities answer 404, and
    // it is enforced: nothing matches the selector yet.
    h.wait_for("snapshot without the CRD", |a, r| {
        a.snapshot.objects.len() == 3 && tcp_verdict(r, "192.168.7.7", "10.4.0.2") == Verdict::Drop
    });
    assert!(h.api.lists(&entities) >= 1, "{:#?}", h.api.log());

    // The CRD appears, then an ExternalEntity: the policy selects it.
    h.api.install(&entities);
    h.api.apply(external_entity("vm-1", "vm", "192.168.7.7"));
    h.wait_for("external entity selected", |_, r| {
        tcp_verdict(r, "192.168.7.7", "10.4.0.2") == Verdict::Allow
    });
    // It is followed like any kind: relabelled, it leaves the peer.
    h.api.apply(external_entity("vm-1", "db", "192.168.7.7"));
    h.wait_for("external entity relabelled", |_, r| {
        tcp_verdict(r, "192.168.7.7", "10.4.0.2") == Verdict::Drop
    });
    h.api.apply(external_entity("vm-1", "vm", "192.168.7.7"));
    h.wait_for("external entity back", |_, r| {
        tcp_verdict(r, "192.168.7.7", "10.4.0.2") == Verdict::Allow
    });

    // The CRD is removed (no DELETED events): its objects are dropped.
    h.api.uninstall(&entities);
    h.wait_for("external entity dropped with its CRD", |a, r| {
        a.snapshot.objects.len() == 3 && tcp_verdict(r, "192.168.7.7", "10.4.0.2") == Verdict::Drop
    });
    // A missing CRD is not a watch error.
    assert_eq!(
        metric(&h.metrics, "tollgate_kubernetes_watch_errors_total"),
        0
    );
}

// Antrea parity: a policy that names a ClusterGroup or Group not created
// yet is admitted (Antrea admits it) and selects nothing; when the group
// arrives through the watch, the policy starts to enforce with no change to
// the policy itself.

/// Drops traffic from the `clients` ClusterGroup to the `web` ClusterGroup;
/// neither exists when the policy arrives.
fn acnp_between_groups() -> Value {
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
           "metadata": {"name": "web-from-clients"},
           "spec": {"priority": 5, "tier": "SecurityOps",
                    "appliedTo": [{"group": "web"}],
                    "ingress": [{"action": "Drop", "from": [{"group": "clients"}]}]}})
}

/// An Antrea NetworkPolicy in `shop` applied to the Group `db`, not created yet.
fn annp_on_group() -> Value {
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "NetworkPolicy",
           "metadata": {"name": "db-isolation", "namespace": "shop"},
           "spec": {"priority": 5, "appliedTo": [{"group": "db"}],
                    "ingress": [{"action": "Drop", "from": [{"ipBlock": {"cidr": "10.98.0.0/16"}}]}]}})
}

fn cluster_group(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterGroup",
           "metadata": {"name": name}, "spec": spec})
}

#[test]
fn a_policy_before_its_groups_enforces_when_they_arrive() {
    let api = FakeApi::start("127.0.0.1:0");
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}));
    api.apply(pod("web-1", "web", "10.3.0.2"));
    api.apply(pod("db-1", "db", "10.3.0.3"));
    // The policies arrive first, naming groups that do not exist yet.
    api.apply(acnp_between_groups());
    api.apply(annp_on_group());
    let h = Harness::start(api);

    let ruleset = h.wait_for("policies admitted without their groups", |a, r| {
        a.snapshot.objects.len() == 5 && r.policies().len() == 2
    });
    assert!(h.latest.get().unwrap().skipped.is_empty());
    assert!(ruleset.enforced().endpoints.is_empty(), "no group, no Pod");
    assert_eq!(
        tcp_verdict(&ruleset, "10.99.1.1", "10.3.0.2"),
        Verdict::Allow
    );

    // The appliedTo group arrives: web-1 is enforced, but the peer group is
    // still missing, so nothing is dropped yet.
    h.api.apply(cluster_group(
        "web",
        json!({"podSelector": {"matchLabels": {"app": "web"}}}),
    ));
    let ruleset = h.wait_for("appliedTo group arrived", |_, r| {
        r.enforced().endpoints == [ip("10.3.0.2")]
    });
    assert_eq!(
        tcp_verdict(&ruleset, "10.99.1.1", "10.3.0.2"),
        Verdict::Allow
    );

    // The peer group arrives: traffic from it to web-1 is dropped.
    h.api.apply(cluster_group(
        "clients",
        json!({"ipBlocks": [{"cidr": "10.99.0.0/16"}]}),
    ));
    let ruleset = h.wait_for("peer group arrived", |_, r| {
        tcp_verdict(r, "10.99.1.1", "10.3.0.2") == Verdict::Drop
    });
    assert_eq!(
        tcp_verdict(&ruleset, "10.97.1.1", "10.3.0.2"),
        Verdict::Allow
    );

    // The namespaced Group arrives: the Antrea NetworkPolicy applies to db-1.
    h.api.apply(
        json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "Group",
                       "metadata": {"name": "db", "namespace": "shop"},
                       "spec": {"podSelector": {"matchLabels": {"app": "db"}}}}),
    );
    let ruleset = h.wait_for("Group arrived", |_, r| {
        r.enforced().endpoints == [ip("10.3.0.2"), ip("10.3.0.3")]
    });
    assert_eq!(
        tcp_verdict(&ruleset, "10.98.0.9", "10.3.0.3"),
        Verdict::Drop
    );
    assert!(h.latest.get().unwrap().skipped.is_empty());
}

// The network-policy-api kinds are optional kinds too: a cluster without
// their CRDs gets its snapshot; once installed, their objects are added,
// changed and deleted through the watch like any policy.

/// An egress rule of the subject `shop` to `cidr`, in the v1alpha1 or
/// v1alpha2 spelling of `action`.
fn np_egress(action: &str, cidr: &str) -> Value {
    json!({"subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "shop"}}},
           "egress": [{"name": "lab", "action": action, "to": [{"networks": [cidr]}]}]})
}

fn with_spec(mut object: Value, extra: Value) -> Value {
    let spec = object["spec"].as_object_mut().unwrap();
    for (key, value) in extra.as_object().unwrap() {
        spec.insert(key.clone(), value.clone());
    }
    object
}

#[test]
fn network_policy_api_kinds_follow_their_crds_and_objects() {
    let api = FakeApi::start("127.0.0.1:0");
    let anps = collection("policy.networking.k8s.io/v1alpha1", "AdminNetworkPolicy");
    let banps = collection(
        "policy.networking.k8s.io/v1alpha1",
        "BaselineAdminNetworkPolicy",
    );
    let cnps = collection("policy.networking.k8s.io/v1alpha2", "ClusterNetworkPolicy");
    for path in [&anps, &banps, &cnps] {
        api.uninstall(path);
    }
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": "shop", "labels": {"kubernetes.io/metadata.name": "shop"}}}));
    api.apply(pod("web-1", "web", "10.5.0.2"));
    let h = Harness::start(api);
    let egress = |r: &Ruleset, dst: &str| tcp_verdict(r, "10.5.0.2", dst);

    // No CRD of the group: the snapshot comes all the same.
    h.wait_for("snapshot without the network-policy-api CRDs", |a, r| {
        a.snapshot.objects.len() == 2 && egress(r, "10.99.1.1") == Verdict::Allow
    });

    // AdminNetworkPolicy: added, changed, deleted.
    h.api.install(&anps);
    let anp = |cidr: &str| {
        with_spec(
            json!({"apiVersion": "policy.networking.k8s.io/v1alpha1", "kind": "AdminNetworkPolicy",
                   "metadata": {"name": "deny-lab"}, "spec": {"priority": 10}}),
            np_egress("Deny", cidr),
        )
    };
    h.api.apply(anp("10.99.0.0/16"));
    h.wait_for("AdminNetworkPolicy added", |_, r| {
        egress(r, "10.99.1.1") == Verdict::Drop && egress(r, "10.98.1.1") == Verdict::Allow
    });
    h.api.apply(anp("10.98.0.0/16"));
    h.wait_for("AdminNetworkPolicy changed", |_, r| {
        egress(r, "10.99.1.1") == Verdict::Allow && egress(r, "10.98.1.1") == Verdict::Drop
    });
    h.api.delete(&anp("10.98.0.0/16"));
    h.wait_for("AdminNetworkPolicy deleted", |_, r| {
        egress(r, "10.98.1.1") == Verdict::Allow
    });

    // ClusterNetworkPolicy (v1alpha2), Baseline tier, then
    // BaselineAdminNetworkPolicy: each denies until deleted.
    h.api.install(&cnps);
    let cnp = with_spec(
        json!({"apiVersion": "policy.networking.k8s.io/v1alpha2", "kind": "ClusterNetworkPolicy",
               "metadata": {"name": "baseline-lab"}, "spec": {"tier": "Baseline", "priority": 10}}),
        np_egress("Deny", "10.97.0.0/16"),
    );
    h.api.apply(cnp.clone());
    h.wait_for("ClusterNetworkPolicy added", |_, r| {
        egress(r, "10.97.1.1") == Verdict::Drop
    });
    h.api.delete(&cnp);
    h.wait_for("ClusterNetworkPolicy deleted", |_, r| {
        egress(r, "10.97.1.1") == Verdict::Allow
    });
    h.api.install(&banps);
    let banp = with_spec(
        json!({"apiVersion": "policy.networking.k8s.io/v1alpha1",
               "kind": "BaselineAdminNetworkPolicy",
               "metadata": {"name": "default"}, "spec": {}}),
        np_egress("Deny", "10.96.0.0/16"),
    );
    h.api.apply(banp.clone());
    h.wait_for("BaselineAdminNetworkPolicy added", |_, r| {
        egress(r, "10.96.1.1") == Verdict::Drop
    });
    h.api.delete(&banp);
    h.wait_for("BaselineAdminNetworkPolicy deleted", |_, r| {
        egress(r, "10.96.1.1") == Verdict::Allow
    });
    assert!(h.latest.get().unwrap().skipped.is_empty());
    assert_eq!(
        metric(&h.metrics, "tollgate_kubernetes_watch_errors_total"),
        0
    );
}

/// The Events the fake server holds about the object `kind`/`name`.
fn events_on(api: &FakeApi, kind: &str, name: &str) -> Vec<Value> {
    api.events()
        .into_values()
        .filter(|e| e["regarding"]["kind"] == kind && e["regarding"]["name"] == name)
        .collect()
}

#[test]
fn skipped_objects_get_one_event_each_counted_on_edits_and_none_once_fixed() {
    let api = FakeApi::start("127.0.0.1:0");
    api.apply(namespace("shop"));
    api.apply(pod("web-1", "web", "10.5.0.2"));
    api.apply(tier("bad", 400));
    api.apply(acnp("in-bad-tier", "bad", "web"));
    let h = Harness::start(api);
    h.wait_for("invalid tier skipped", |a, _| a.skipped.len() == 2);
    let dump = || format!("{:#?}", h.api.events());
    poll_until("two events", || h.api.events().len() == 2, dump);

    let tier_events = events_on(&h.api, "Tier", "bad");
    assert_eq!(tier_events.len(), 1, "{}", dump());
    let event = &tier_events[0];
    assert_eq!(event["reason"], "PolicySkipped");
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reportingController"], "tollgate");
    assert_eq!(event["reportingInstance"], NODE);
    assert_eq!(event["deprecatedSource"]["host"], NODE);
    assert_eq!(event["regarding"]["uid"], "uid--bad");
    assert_eq!(event["regarding"]["apiVersion"], "crd.antrea.io/v1beta1");
    assert_eq!(event["metadata"]["namespace"], "default");
    let note = event["note"].as_str().unwrap();
    assert!(
        note.starts_with(&format!(
            "tollgate on node {NODE}: skipped (not enforced): spec.priority"
        )),
        "{note}"
    );
    assert_eq!(
        events_on(&h.api, "ClusterNetworkPolicy", "in-bad-tier").len(),
        1
    );

    // What `get skipped` lists: the same objects, named as the API server
    // names them.
    let refused = h.state.refused();
    let bad = refused
        .iter()
        .find(|r| r.name == "bad")
        .expect("tier listed");
    assert_eq!(bad.reason, Reason::PolicySkipped);
    assert_eq!(bad.id.uid, "uid--bad");
    assert_eq!(bad.id.generation, Some(1));
    assert!(
        bad.message().starts_with("spec.priority"),
        "{}",
        bad.message()
    );

    // Snapshots caused by other objects say nothing new.
    for app in ["a", "b", "c"] {
        h.api.apply(pod("web-1", app, "10.5.0.2"));
        h.wait_for("pod relabelled", |a, _| {
            a.snapshot.iter().any(|o| {
                o.metadata().name == "web-1"
                    && o.metadata().labels.get("app").map(String::as_str) == Some(app)
            })
        });
    }
    // A new version of the policy, refused for the same reason: the same
    // Event, counted (the Event queue is in order, so once the count shows
    // every earlier report was handled).
    let mut edited = acnp("in-bad-tier", "bad", "web");
    edited["spec"]["priority"] = json!(6);
    h.api.apply(edited.clone());
    poll_until(
        "series count 2",
        || events_on(&h.api, "ClusterNetworkPolicy", "in-bad-tier")[0]["series"]["count"] == 2,
        dump,
    );
    assert_eq!(h.api.events().len(), 2, "{}", dump());
    assert_eq!(h.api.event_requests(), 3, "two creates and one patch");

    // A dangling group reference: enforced in part, said so.
    let mut dangling = acnp("dangling", "application", "web");
    dangling["spec"]["ingress"][0]["from"] = json!([{"group": "partners"}]);
    h.api.apply(dangling);
    poll_until(
        "partly enforced event",
        || !events_on(&h.api, "ClusterNetworkPolicy", "dangling").is_empty(),
        dump,
    );
    let partial = &events_on(&h.api, "ClusterNetworkPolicy", "dangling")[0];
    assert_eq!(partial["reason"], "PolicyPartiallyEnforced");
    assert!(partial["note"]
        .as_str()
        .unwrap()
        .contains("ClusterGroup `partners` does not exist"));

    // Fixed: no more reporting, even when the policy changes again.
    h.api.apply(tier("bad", 20));
    h.wait_for("tier fixed", |a, _| a.skipped.is_empty());
    edited["spec"]["priority"] = json!(7);
    h.api.apply(edited);
    h.wait_for("edited policy admitted", |a, _| {
        a.snapshot
            .iter()
            .any(|o| o.metadata().name == "in-bad-tier")
    });
    let before = h.api.event_requests();
    // A sentinel: once its Event is there, everything queued before it
    // was handled.
    h.api.apply(tier("sentinel", 999));
    poll_until(
        "sentinel event",
        || !events_on(&h.api, "Tier", "sentinel").is_empty(),
        dump,
    );
    assert_eq!(h.api.event_requests(), before + 1, "{}", dump());
    assert_eq!(
        events_on(&h.api, "ClusterNetworkPolicy", "in-bad-tier")[0]["series"]["count"],
        2
    );
}

#[test]
fn event_api_failing_or_overloaded_holds_nothing_back() {
    let api = FakeApi::start("127.0.0.1:0");
    api.apply(namespace("shop"));
    api.apply(pod("web-1", "web", "10.6.0.2"));
    api.refuse_events(true);
    let h = Harness::start(api);
    h.wait_for("initial snapshot", |a, _| a.snapshot.objects.len() == 2);
    h.api.apply(tier("bad", 400));
    h.wait_for("skipped", |a, _| a.skipped.len() == 1);
    let failed = r#"tollgate_kubernetes_events_total{result="failed"}"#;
    poll_until(
        "failure counted",
        || metric(&h.metrics, failed) >= 1,
        || h.metrics.render(),
    );
    // Enforcement goes on while the Event API refuses.
    h.api.apply(acnp("deny-web", "application", "web"));
    h.wait_for("policy applied", |_, r| enforced(r) == [ip("10.6.0.2")]);

    // More refusals in one snapshot than the queue holds: the rest are
    // dropped, counted, and reported with a later snapshot.
    h.api.refuse_events(false);
    let many = tollgate::source::kube::events::QUEUE + 50;
    h.api.hold_lists();
    for i in 0..many {
        h.api.apply(tier(&format!("bad-{i}"), 400));
    }
    h.api.release_lists();
    h.wait_for("all skipped", |a, _| a.refused.len() == many + 1);
    // The watch thread was not held up: a Pod change still arrives.
    h.api.apply(pod("web-1", "other", "10.6.0.2"));
    h.wait_for("pod relabelled", |_, r| enforced(r).is_empty());
    // Every new one has its Event in the end (the refused one is not
    // retried until it changes).
    poll_until(
        "every new skipped object has its event",
        || h.api.events().len() == many,
        || format!("{} events; {}", h.api.events().len(), h.metrics.render()),
    );
    let dropped = r#"tollgate_kubernetes_events_total{result="dropped"}"#;
    assert!(metric(&h.metrics, dropped) >= 1, "{}", h.metrics.render());
    assert_eq!(metric(&h.metrics, failed), 1);
}

#[test]
fn synced_drops_while_a_watch_fails_and_recovers_after_the_relist() {
    let api = FakeApi::start("127.0.0.1:0");
    api.apply(namespace("shop"));
    let h = Harness::start(api);
    h.wait_for("initial snapshot", |a, _| a.snapshot.objects.len() == 1);
    let synced = || metric(&h.metrics, "tollgate_kubernetes_synced");
    poll_until(
        "synced",
        || synced() == 1 && h.state.synced(),
        || h.metrics.render(),
    );

    let pods = collection("v1", "Pod");
    h.api.fail(&pods);
    poll_until(
        "not synced",
        || synced() == 0 && !h.state.synced(),
        || h.metrics.render(),
    );
    // A change made while the watch fails.
    h.api.apply(pod("web-1", "web", "10.7.0.2"));
    let lists = h.api.lists(&pods);
    h.api.heal(&pods);
    h.wait_for("change picked up by the relist", |a, _| {
        a.snapshot.objects.len() == 2
    });
    poll_until(
        "synced again",
        || synced() == 1 && h.state.synced(),
        || h.metrics.render(),
    );
    assert!(h.api.lists(&pods) > lists, "{:#?}", h.api.log());
    assert!(metric(&h.metrics, "tollgate_kubernetes_watch_errors_total") >= 1);
}
