//! The fake API server's own parsing: selectors and object paths.

use super::*;

#[test]
fn selectors_read_as_the_api_server_reads_them() {
    let group = json!({"metadata": {"name": "k1-0", "labels": {"tollgate.io/selection": "k1"}}});
    let pod =
        json!({"metadata": {"name": "p", "labels": {"app": "web"}}, "spec": {"nodeName": "n1"}});
    // What kube's client sends, form-encoded.
    let labels = decode("tollgate.io%2Fselection+in+%28k0%2Ck1%29");
    assert_eq!(labels, "tollgate.io/selection in (k0,k1)");
    assert!(selected(&group, &labels, ""));
    assert!(!selected(&group, "tollgate.io/selection in (k0,k2)", ""));
    assert!(selected(&group, "tollgate.io/selection notin (k0,k2)", ""));
    assert!(selected(&pod, "app=web,!tier", "spec.nodeName=n1"));
    assert!(!selected(&pod, "app!=web", ""));
    assert!(!selected(&pod, "", &decode("spec.nodeName%3Dn2")));
    assert!(selected(&pod, "app", "metadata.name==p"));
}

#[test]
fn one_object_is_told_from_a_collection() {
    assert!(names_an_object(
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/tollgate-controller"
    ));
    assert!(names_an_object(
        "/apis/tollgate.io/v1alpha1/addressgroups/k-0"
    ));
    assert!(names_an_object("/api/v1/namespaces/default"));
    assert!(!names_an_object("/api/v1/pods"));
    assert!(!names_an_object("/apis/tollgate.io/v1alpha1/addressgroups"));
    let key = (
        collection("coordination.k8s.io/v1", "Lease"),
        "kube-system".to_string(),
        "tollgate-controller".to_string(),
    );
    assert_eq!(
        object_path(&key),
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/tollgate-controller"
    );
}

/// A subscriber that keeps the resourceVersions it was handed.
#[derive(Default)]
struct Kept(Mutex<Vec<u64>>);

impl Subscriber for Kept {
    fn deliver(&self, event: &Arc<Event>) {
        self.0.lock().unwrap().push(event.rv);
    }
}

impl Kept {
    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

fn node_pod(name: &str, node: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "ns"}, "spec": {"nodeName": node}})
}

fn slice(name: &str, key: &str) -> Value {
    json!({"apiVersion": "tollgate.io/v1alpha1", "kind": "AddressGroup",
           "metadata": {"name": name, "labels": {"tollgate.io/selection": key}}})
}

/// Mutation: `Fanout::publish` handing every event to every subscription
/// of the collection (a scan, not the index) fails the counts.
#[test]
fn fanout_hands_each_event_to_the_subscribers_it_selects_and_counts_it_once() {
    let api = FakeApi::start("127.0.0.1:0");
    let pods = collection("v1", "Pod");
    let groups = collection("tollgate.io/v1alpha1", "AddressGroup");
    let namespaces = collection("v1", "Namespace");
    api.apply(node_pod("before", "n1"));
    let (a, b, every, ns) = (
        Arc::new(Kept::default()),
        Arc::new(Kept::default()),
        Arc::new(Kept::default()),
        Arc::new(Kept::default()),
    );
    let (sub_a, held) = api.subscribe(&pods, Select::Node("n1".into()), a.clone());
    assert_eq!(held.len(), 1, "the Pod already held is answered");
    let (sub_b, held) = api.subscribe(&pods, Select::Node("n2".into()), b.clone());
    assert!(held.is_empty());
    let keys = |k: &[&str]| Select::Selections(k.iter().map(|s| s.to_string()).collect());
    let (sub_g, _) = api.subscribe(&groups, keys(&["k1", "k2"]), every.clone());
    let (sub_ns, _) = api.subscribe(&namespaces, Select::All, ns.clone());
    let sent_before = api.sent();

    api.apply(node_pod("p1", "n1"));
    api.apply(node_pod("p2", "n2"));
    api.apply(node_pod("p3", "n3"));
    api.apply(slice("k1-0", "k1"));
    api.apply(slice("k3-0", "k3"));
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}}));
    api.delete(&node_pod("p1", "n1"));

    assert_eq!(
        (a.count(), b.count(), every.count(), ns.count()),
        (2, 1, 1, 1)
    );
    assert_eq!(sub_a.received.events(), 2);
    let kept = a.0.lock().unwrap().clone();
    assert!(kept.windows(2).all(|w| w[0] < w[1]), "{kept:?}");
    let (events, bytes) = api.sent();
    assert_eq!(events - sent_before.0, 5);
    let handed: u64 = [&sub_a, &sub_b, &sub_g, &sub_ns]
        .iter()
        .map(|s| s.received.bytes())
        .sum();
    assert_eq!(bytes - sent_before.1, handed);

    // Ended, a subscription is handed nothing more.
    api.unsubscribe(&sub_a);
    api.apply(node_pod("p4", "n1"));
    assert_eq!(a.count(), 2);
}

/// The whole answer (status line, headers, body) to `GET target`, read
/// until the server closes the connection.
fn http_get(api: &FakeApi, target: &str) -> String {
    use std::io::Read;
    let mut stream = TcpStream::connect(api.address).unwrap();
    write!(stream, "GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

/// An HTTP watch from a resourceVersion is sent exactly the later events
/// of its collection, counted in [`FakeApi::sent`].
#[test]
fn an_http_watch_resumes_after_its_resource_version() {
    let api = FakeApi::start("127.0.0.1:0");
    let pods = collection("v1", "Pod");
    for i in 0..50 {
        api.apply(node_pod(&format!("p{i}"), "n1"));
        api.apply(slice(&format!("k{i}-0"), "k"));
    }
    let from = api.shared.state.lock().unwrap().events[59].rv;
    let answer = http_get(
        &api,
        &format!("{pods}?watch=true&resourceVersion={from}&timeoutSeconds=1"),
    );
    let names: Vec<String> = answer
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(Value::is_object)
        .map(|e| {
            e["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let expected: Vec<String> = (30..50).map(|i| format!("p{i}")).collect();
    assert_eq!(names, expected);
    assert_eq!(api.sent().0, 20);
}

/// A list asked for in pages is served as the collection was at its first
/// page: a Pod written between two pages is not in the list (its watch
/// from the list's resourceVersion brings it), one deleted meanwhile still
/// is; a continue token left behind by [`MAX_CONTINUED`] later lists is
/// answered `410 Gone`. A list without `limit` is one page.
#[test]
fn a_paginated_list_is_served_as_the_collection_was_at_its_first_page() {
    let api = FakeApi::start("127.0.0.1:0");
    let pods = collection("v1", "Pod");
    for i in 0..5 {
        api.apply(node_pod(&format!("p{i}"), "n1"));
    }
    let get = |query: &str| -> (u16, Value) {
        let answer = http_get(&api, &format!("{pods}?{query}"));
        let code = answer[9..12].parse().unwrap();
        let body = answer.split_once("\r\n\r\n").unwrap().1;
        (code, serde_json::from_str(body).unwrap())
    };
    let names = |list: &Value| -> Vec<String> {
        let items = list["items"].as_array().unwrap();
        items
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };

    let (code, first) = get("limit=2");
    assert_eq!(code, 200);
    assert_eq!(names(&first), ["p0", "p1"]);
    assert_eq!(first["metadata"]["remainingItemCount"], 3);
    let rv = first["metadata"]["resourceVersion"].clone();
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();

    api.apply(node_pod("p5", "n1"));
    api.delete(&node_pod("p3", "n1"));
    let (_, second) = get(&format!("limit=2&continue={token}"));
    assert_eq!(names(&second), ["p2", "p3"]);
    assert_eq!(second["metadata"]["resourceVersion"], rv);
    let token = second["metadata"]["continue"].as_str().unwrap().to_string();
    let (_, last) = get(&format!("limit=2&continue={token}"));
    assert_eq!(names(&last), ["p4"]);
    assert!(last["metadata"].get("continue").is_none());
    assert_eq!(
        api.lists(&pods),
        1,
        "later pages are not lists of their own"
    );

    // Positive control: a list without limit has every Pod as it is now.
    let (_, whole) = get("");
    assert_eq!(names(&whole), ["p0", "p1", "p2", "p4", "p5"]);

    // A token left behind answers 410 Gone.
    let (_, kept) = get("limit=1");
    let stale = kept["metadata"]["continue"].as_str().unwrap().to_string();
    for _ in 0..MAX_CONTINUED {
        get("limit=1");
    }
    let (code, gone) = get(&format!("limit=1&continue={stale}"));
    assert_eq!(code, 410);
    assert_eq!(gone["reason"], "Expired");
}
