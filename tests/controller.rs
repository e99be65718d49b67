//! `tollgate controller` against the in-process fake API server: it
//! publishes the AddressGroups of a policy set, a Pod status write writes
//! nothing, a label change rewrites exactly the one slice of the Pod, a
//! `nodeSelector` peer is published from the Nodes, a
//! restarted controller rewrites nothing when nothing changed, and of two
//! controllers one leads while the other takes over once the leader stops
//! renewing its Lease.
#![allow(clippy::disallowed_methods)] // the tests wait on the clock for the controller.

#[path = "support/nodes.rs"]
mod nodes;
use nodes::node;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tollgate::controller::{Controller, Options};
use tollgate::source::kube::Connection;

use tollgate_fake_api::{collection, FakeApi};

const GROUPS: &str = "/apis/tollgate.io/v1alpha1/addressgroups";

fn pod(name: &str, app: &str, ip: &str, phase: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "shop", "labels": {"app": app}},
           "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "nginx"}]},
           "status": {"phase": phase, "podIP": ip, "podIPs": [{"ip": ip}]}})
}

fn world(api: &FakeApi, db_pods: usize) {
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": "shop", "labels": {"kubernetes.io/metadata.name": "shop"}}}));
    api.apply(json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
        "metadata": {"name": "web"},
        "spec": {"priority": 5, "appliedTo": [{"podSelector": {"matchLabels": {"app": "web"}}}],
                 "ingress": [{"action": "Allow", "from": [{"podSelector": {"matchLabels": {"app": "db"}}}]}]}}));
    api.apply(pod("web", "web", "10.1.0.1", "Running"));
    for i in 0..db_pods {
        api.apply(pod(&format!("db-{i}"), "db", &db_ip(i), "Running"));
    }
}

fn db_ip(i: usize) -> String {
    if i.is_multiple_of(2) {
        format!("10.2.{}.{}", i / 200, i % 200 + 1)
    } else {
        format!("fd00::2:{i:x}")
    }
}

fn start(api: &FakeApi, identity: &str) -> Controller {
    let config = kube::Config::new(api.url().parse().unwrap());
    let mut options = Options::new(Connection::Config(Box::new(config)), identity.into());
    options.lease_duration = Duration::from_secs(2);
    options.renew_every = Duration::from_millis(300);
    options.listen = Some("127.0.0.1:0".parse().unwrap());
    Controller::spawn(options).expect("controller starts")
}

/// `GET path` of the controller's endpoint: status line and body.
fn get(controller: &Controller, path: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(controller.listening().unwrap()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    (
        head.lines().next().unwrap_or_default().to_string(),
        body.to_string(),
    )
}

fn wait(what: &str, ok: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every address published, by slice name.
fn published(api: &FakeApi) -> Vec<(String, Vec<String>)> {
    api.objects(GROUPS)
        .into_iter()
        .map(|(name, group)| {
            let ips = group["spec"]["members"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|m| m["ips"].as_array().cloned().unwrap_or_default())
                .map(|ip| ip.as_str().unwrap_or_default().to_string())
                .collect();
            (name, ips)
        })
        .collect()
}

fn has(api: &FakeApi, ip: &str) -> bool {
    published(api)
        .iter()
        .any(|(_, ips)| ips.iter().any(|i| i == ip))
}

fn writes(api: &FakeApi) -> usize {
    ["POST", "PUT", "PATCH", "DELETE"]
        .iter()
        .map(|m| api.writes(m, GROUPS))
        .sum()
}

/// Mutations: the publisher's writes not sorted by phase → slice 0
/// written first: fails. Each of these makes the count of writes fail: the publisher
/// without its three guards against a write that changes nothing
/// (`Publisher::set_pod`'s early return for an equal Pod, `Group::set`'s
/// equality check, `same` — each alone is covered by the others) rewrites
/// the slice for the status write; `refresh_member` marking every slice
/// of the group with `same` answering false rewrites both slices for the
/// label change.
#[test]
fn the_controller_publishes_the_groups_and_a_label_change_rewrites_one_slice() {
    let api = FakeApi::start("127.0.0.1:0");
    world(&api, 150);
    let controller = start(&api, "a");
    wait("the db Pods published", || {
        controller.ready() && (0..150).all(|i| has(&api, &db_ip(i)))
    });
    let groups = api.objects(GROUPS);
    // One selection (app=db in every Namespace): two slices of ≤ 100, labelled.
    assert_eq!(groups.len(), 2, "{groups:#?}");
    for group in groups.values() {
        let name = group["metadata"]["name"].as_str().unwrap();
        let key = group["metadata"]["labels"]["tollgate.io/selection"]
            .as_str()
            .unwrap();
        assert!(name.starts_with(&format!("{key}-")), "{name}");
        assert!(group["spec"]["members"].as_array().unwrap().len() <= 100);
        assert_eq!(
            group["spec"]["selection"],
            r#"{"Pods":{"namespaces":"All","pods":{"matchLabels":{"app":"db"}}}}"#
        );
    }
    // Slice 0 lists slice 1 and was written after it: an agent never
    // holds a slice 0 whose listed slice is still unwritten.
    let (first, second) = {
        let mut slices: Vec<&Value> = groups.values().collect();
        slices.sort_by_key(|g| g["spec"]["slice"].as_u64());
        (slices[0], slices[1])
    };
    assert_eq!(first["spec"]["slices"], json!([1]));
    let version = |g: &Value| -> u64 {
        g["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(version(first) > version(second), "{:#?}", api.log());
    assert!(!has(&api, "10.1.0.1"));
    assert_eq!(
        controller
            .counters()
            .selections
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    let before = writes(&api);
    // A status write, then a label change that moves db-7 out.
    api.apply(pod("db-3", "db", &db_ip(3), "Succeeded"));
    api.apply(pod("db-7", "cache", &db_ip(7), "Running"));
    wait("db-7 unpublished", || !has(&api, &db_ip(7)));
    // Positive control: the others stay.
    assert!(has(&api, &db_ip(3)) && has(&api, &db_ip(8)));
    assert_eq!(writes(&api) - before, 1, "{:#?}", api.log());
    assert_eq!(api.writes("PATCH", GROUPS), 1);
}

/// Under a steady churn of Pod writes (one every 50 ms, none of which
/// moves a member) a label change is published at once, not when the
/// source's debounce lets a snapshot out (`DEBOUNCE_MAX`, 3 s after the
/// churn began): the controller takes Pod changes as they arrive. The
/// bound (2 s after the change, 2.5 s after the churn began) is the
/// property, ten times what it takes here. Mutation: the controller's
/// source spawned with `KubeSource::spawn` and its Pods read from
/// snapshots again → published only after ~3 s: fails.
#[test]
fn a_label_change_is_published_at_once_while_other_pods_keep_changing() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let api = Arc::new(FakeApi::start("127.0.0.1:0"));
    world(&api, 150);
    let controller = start(&api, "a");
    wait("the db Pods published", || {
        controller.ready() && (0..150).all(|i| has(&api, &db_ip(i)))
    });
    let before = writes(&api);
    let stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let (api, stop) = (Arc::clone(&api), Arc::clone(&stop));
        std::thread::spawn(move || {
            // A label no policy reads flips on db-5: the Pod changes, no
            // member does. Bounded: at most 200 writes.
            for i in 0..200 {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let mut pod = pod("db-5", "db", &db_ip(5), "Running");
                pod["metadata"]["labels"]["rev"] = json!(i.to_string());
                api.apply(pod);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let changed = Instant::now();
    api.apply(pod("db-7", "cache", &db_ip(7), "Running"));
    let deadline = changed + Duration::from_secs(2);
    while has(&api, &db_ip(7)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let published = !has(&api, &db_ip(7));
    let took = changed.elapsed();
    stop.store(true, Ordering::SeqCst);
    churn.join().unwrap();
    assert!(published, "db-7 still published {took:?} after its change");
    // Positive control: the churned Pod stays, and only db-7's slice was
    // written.
    assert!(has(&api, &db_ip(5)));
    assert_eq!(writes(&api) - before, 1, "{:#?}", api.log());
}

/// A policy change is published as soon as its selections are computed:
/// with a batch of an hour (the loop's tick comes once, at the start,
/// before any snapshot), the first publication and a policy edit's new
/// group are written all the same, woken by the snapshot and by the
/// computation's end.
///
/// Mutation (tried, fails): the loop going on only at its tick (the
/// wake-up's branch skipping everything): nothing is ever published.
#[test]
fn a_policy_change_is_published_without_waiting_for_the_batch() {
    let api = FakeApi::start("127.0.0.1:0");
    world(&api, 2);
    api.apply(pod("cache-0", "cache", "10.3.0.1", "Running"));
    let config = kube::Config::new(api.url().parse().unwrap());
    let mut options = Options::new(Connection::Config(Box::new(config)), "a".into());
    options.batch = Duration::from_secs(3600);
    let _controller = Controller::spawn(options).expect("controller starts");
    wait("the db Pods published", || {
        (0..2).all(|i| has(&api, &db_ip(i)))
    });
    assert!(
        !has(&api, "10.3.0.1"),
        "no policy selects the cache Pod yet"
    );
    api.apply(json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
        "metadata": {"name": "web"},
        "spec": {"priority": 5, "appliedTo": [{"podSelector": {"matchLabels": {"app": "web"}}}],
                 "ingress": [{"action": "Allow", "from": [{"podSelector": {"matchLabels": {"app": "cache"}}}]}]}}));
    wait("the edited policy's group published", || {
        has(&api, "10.3.0.1")
    });
}

/// A standby's selections are written as soon as it takes the Lease, not
/// at the batch's next tick: with a batch of an hour, a controller that
/// finds the Lease held by another (which never renews it) computes the
/// selections as a standby, takes the Lease once it expired (2 s), and
/// publishes them at once. (The test above raced the same way: a span that
/// finished before the first Lease write was published at the next tick
/// only, an hour later; it failed once in CI.)
///
/// Mutation (tried, fails): taking the Lease not waking the loop (the
/// `notify_one` in `elect` left out): nothing is published.
#[test]
fn a_standby_publishes_as_soon_as_it_takes_the_lease() {
    let api = FakeApi::start("127.0.0.1:0");
    world(&api, 2);
    api.apply(
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "tollgate-controller", "namespace": "kube-system"},
        "spec": {"holderIdentity": "gone", "leaseDurationSeconds": 2,
                 "renewTime": "2026-01-01T00:00:00.000000Z"}}),
    );
    let config = kube::Config::new(api.url().parse().unwrap());
    let mut options = Options::new(Connection::Config(Box::new(config)), "b".into());
    options.batch = Duration::from_secs(3600);
    options.lease_duration = Duration::from_secs(2);
    options.renew_every = Duration::from_millis(300);
    let controller = Controller::spawn(options).expect("controller starts");
    wait("a ready standby", || {
        controller.ready() && !controller.leader()
    });
    assert!(!has(&api, &db_ip(0)), "a standby wrote");
    wait("b leads", || controller.leader());
    wait("the db Pods published", || {
        (0..2).all(|i| has(&api, &db_ip(i)))
    });
}

/// A `nodeSelector` peer is published as a Node group (agents in
/// controller mode watch their own Node only): a Node's status report
/// writes nothing, its label change moves it in or out.
///
/// Mutations (tried, each fails): the controller handing the publisher
/// Namespaces only (its `held` filter without `Object::Node`): the group
/// is published empty; the controller skipping every Node it held before
/// (`same` by name alone, not by the object): node-c's relabel is never
/// published.
#[test]
fn a_node_selector_peer_is_published_as_a_node_group() {
    let api = FakeApi::start("127.0.0.1:0");
    world(&api, 2);
    api.apply(json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
        "metadata": {"name": "from-nodes"},
        "spec": {"priority": 6, "appliedTo": [{"podSelector": {"matchLabels": {"app": "web"}}}],
                 "ingress": [{"action": "Allow", "from": [{"nodeSelector": {"matchLabels": {"role": "db"}}}]}]}}));
    api.apply(node("node-a", "web", "10.3.0.1"));
    api.apply(node("node-b", "db", "10.3.0.2"));
    api.apply(node("node-c", "db", "10.3.0.3"));
    let controller = start(&api, "a");
    wait("the db Nodes published", || {
        controller.ready() && has(&api, "10.3.0.2") && has(&api, "10.3.0.3")
    });
    let groups = api.objects(GROUPS);
    let nodes: Vec<&Value> = groups
        .values()
        .filter(|g| {
            g["spec"]["selection"]
                .as_str()
                .unwrap()
                .starts_with(r#"{"Nodes""#)
        })
        .collect();
    assert_eq!(nodes.len(), 1, "{groups:#?}");
    assert_eq!(
        nodes[0]["spec"]["selection"],
        r#"{"Nodes":{"matchLabels":{"role":"db"}}}"#
    );
    assert!(!has(&api, "10.3.0.1"));
    let before = writes(&api);
    // A status report of node-b, then node-c relabelled out of the group.
    let mut report = node("node-b", "db", "10.3.0.2");
    report["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
    api.apply(report);
    api.apply(node("node-c", "web", "10.3.0.3"));
    wait("node-c unpublished", || !has(&api, "10.3.0.3"));
    assert!(has(&api, "10.3.0.2"), "node-b stays");
    assert_eq!(writes(&api) - before, 1, "{:#?}", api.log());
}

/// Mutations: `Publisher::adopt` not called on taking the lead (the new
/// leader creates slices that exist) makes the second controller write;
/// so does writing before the first span of the selections is done (the
/// publisher, with no selection yet, deletes every slice adopted).
#[test]
fn a_restarted_controller_rewrites_nothing_when_nothing_changed() {
    let api = FakeApi::start("127.0.0.1:0");
    world(&api, 120);
    let first = start(&api, "a");
    wait("published", || {
        first.ready() && (0..120).all(|i| has(&api, &db_ip(i)))
    });
    drop(first);
    let before = writes(&api);
    let lists = api.lists(GROUPS);
    let second = start(&api, "b");
    wait("the second leads and is ready", || {
        second.leader() && second.ready()
    });
    // It wrote nothing, having listed the groups to adopt them.
    assert_eq!(writes(&api), before, "{:#?}", api.log());
    assert!(api.lists(GROUPS) > lists);
    // Positive control: a change is still published.
    api.apply(pod("db-new", "db", "10.9.9.9", "Running"));
    wait("db-new published", || has(&api, "10.9.9.9"));
}

/// Mutation: `Elector::try_acquire_or_renew` taking a Lease held by
/// another without waiting for it to expire makes both lead.
#[test]
fn two_controllers_elect_one_leader_and_the_standby_takes_over() {
    let api = FakeApi::start("127.0.0.1:0");
    world(&api, 3);
    let a = start(&api, "a");
    wait("a leads", || a.leader() && a.ready());
    let b = start(&api, "b");
    wait("b is a ready standby", || b.ready());
    // Several renewals later, still one leader.
    let lease = collection("coordination.k8s.io/v1", "Lease");
    let renewals = api.writes(
        "PUT",
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/",
    );
    wait("a renews", || {
        api.writes(
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/",
        ) >= renewals + 5
    });
    assert!(a.leader() && !b.leader());
    // Both ready (a leader with a complete first sync, a healthy standby);
    // the metric tells them apart.
    for (controller, leader) in [(&a, 1), (&b, 0)] {
        assert!(get(controller, "/readyz").0.contains("200"));
        assert!(get(controller, "/livez").0.contains("200"));
        let metrics = get(controller, "/metrics").1;
        assert!(
            metrics.contains(&format!("tollgate_controller_leader {leader}\n")),
            "{metrics}"
        );
        assert!(
            metrics.contains("tollgate_controller_selections 1\n"),
            "{metrics}"
        );
    }
    let holder = |api: &FakeApi| {
        api.objects(&lease)["kube-system/tollgate-controller"]["spec"]["holderIdentity"].clone()
    };
    assert_eq!(holder(&api), "a");
    // a stops renewing without releasing: b takes over once the Lease
    // expires (2 s unchanged), and publishes.
    let stopped = Instant::now();
    a.abandon();
    wait("b leads", || b.leader() && b.ready());
    // b counts the 2 s from when it first saw a's last renewal, at most
    // one renewal period (300 ms) before a stopped.
    assert!(
        stopped.elapsed() >= Duration::from_millis(1_600),
        "{:?}",
        stopped.elapsed()
    );
    assert_eq!(holder(&api), "b");
    api.apply(pod("db-new", "db", "10.9.9.9", "Running"));
    wait("db-new published by b", || has(&api, "10.9.9.9"));
}
