//! An in-process fake Kubernetes API server speaking the real list and
//! watch protocol over HTTP/1.1: collection GETs answer a JSON `List` with
//! `metadata.resourceVersion`, in pages of `limit` items when asked (as
//! kube's watcher does, 500 at a time: `metadata.continue` names the rest,
//! served as the collection was at the first page, or `410 Gone` once
//! [`MAX_CONTINUED`] later lists have left it behind); `?watch=true`
//! answers a chunked stream of `ADDED`/`MODIFIED`/`DELETED`/`BOOKMARK`
//! events after the given resourceVersion, or a `410 Gone` `ERROR` event
//! when that version has been compacted away. A collection can be made
//! absent (a CRD not installed, or removed): it answers `404 NotFound`
//! until installed again, or failing: `500` to every list and watch until
//! healed. It keeps the `events.k8s.io/v1` Events posted (`POST`) and
//! counted (merge `PATCH`), and can refuse them (`403`). Lists and watches
//! honour `labelSelector` (`k=v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`,
//! `k`, `!k`) and `fieldSelector` (`path=v`, `path!=v`, e.g.
//! `spec.nodeName=n1`), matched against each event's object (a change in or
//! out of the selection is not turned into ADDED/DELETED); each watch
//! counts the events it sent ([`FakeApi::watches`]). A GET of one object
//! (`…/namespaces/NS/PLURAL/NAME`, `…/PLURAL/NAME`) answers it or `404`.
//! Objects are also written by clients as a real server takes them: `POST`
//! to a collection (`409` when it exists), `PUT` (`409` when its
//! `resourceVersion` is not the stored one, `404` when absent), merge
//! `PATCH` and `DELETE`, at cluster-scoped or `namespaces/NS/` paths — the
//! controller's Lease and AddressGroups. Plain threads and std sockets:
//! nothing of the client side is mocked.
//!
//! In-process subscribers (the simulated agents of `benches/scale/`) are
//! handed each event as it is written, indexed by what they select
//! ([`fanout`]); HTTP watches find their place in the history by binary
//! search on the resourceVersion, and every event is serialized once.
//!
//! Used by the no-root watcher tests (`tests/kube_watch.rs`), by the
//! Kubernetes-mode test of the netns suite (`tests/netns/kube.rs`) and by
//! the scale simulation (`benches/scale/`).
#![allow(clippy::disallowed_methods)] // a test server: its watch streams wait on the clock.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub mod fanout;
pub use fanout::{Event, Received, Select, Subscriber, Subscription};

/// Collection path of a kind, e.g. `/apis/crd.antrea.io/v1beta1/tiers`.
pub fn collection(api_version: &str, kind: &str) -> String {
    let plural = match kind {
        "Tier" => "tiers",
        "ClusterNetworkPolicy" => "clusternetworkpolicies",
        "NetworkPolicy" => "networkpolicies",
        "ClusterGroup" => "clustergroups",
        "Group" => "groups",
        "Pod" => "pods",
        "Namespace" => "namespaces",
        "Node" => "nodes",
        "Service" => "services",
        "ServiceAccount" => "serviceaccounts",
        "ExternalEntity" => "externalentities",
        "AdminNetworkPolicy" => "adminnetworkpolicies",
        "BaselineAdminNetworkPolicy" => "baselineadminnetworkpolicies",
        "AddressGroup" => "addressgroups",
        "Lease" => "leases",
        other => panic!("fake API server does not serve {other}"),
    };
    if api_version.contains('/') {
        format!("/apis/{api_version}/{plural}")
    } else {
        format!("/api/{api_version}/{plural}")
    }
}

#[derive(Default)]
struct State {
    rv: u64,
    /// (collection path, namespace, name) → object.
    objects: BTreeMap<(String, String, String), Arc<Value>>,
    /// In resourceVersion order (a watch finds its place by binary search).
    events: Vec<Arc<Event>>,
    /// Watches from a resourceVersion below this get 410 Gone.
    oldest: u64,
    /// Bumped to end every open watch stream.
    epoch: u64,
    /// Requests served, as `GET path?query`.
    log: Vec<String>,
    gone_sent: u64,
    /// While set, list requests wait (a slow API server).
    lists_held: bool,
    /// Collection paths answering 404 (their CRD is not installed).
    absent: BTreeSet<String>,
    /// Collection paths answering 500 to lists and watches.
    failing: BTreeSet<String>,
    /// Events by `namespace/name`, as created then patched.
    k8s_events: BTreeMap<String, Value>,
    /// Event requests (create or patch) answered 403 while set.
    refuse_events: bool,
    /// Event requests received, answered or not.
    event_requests: u64,
    /// Every watch request served: its collection, query and events sent.
    watches: Vec<Watched>,
    /// The in-process subscriptions.
    fanout: fanout::Fanout,
    /// Paginated lists not read to their end, by continue token: the
    /// list's resourceVersion and the items of its later pages, as they
    /// were at its first page (oldest first; at most [`MAX_CONTINUED`]).
    continued: BTreeMap<u64, (u64, std::collections::VecDeque<Arc<Value>>)>,
    /// The last continue token handed out.
    last_token: u64,
}

/// Paginated lists whose rest is kept for a `continue`; an older one is
/// dropped and its token answered `410 Gone` (`Expired`), as a real
/// server answers a token whose resourceVersion was compacted.
pub const MAX_CONTINUED: usize = 64;

impl State {
    /// Records an event at `rv` and hands it to the subscriptions; the
    /// caller holds the lock (so events stay in resourceVersion order) and
    /// notifies the HTTP watches once it has released it.
    fn push(&mut self, rv: u64, kind: &'static str, path: String, object: Arc<Value>) {
        let event = Arc::new(Event::new(rv, path, kind, object));
        self.fanout.publish(&event);
        self.events.push(event);
    }
}

/// One watch request and what it was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Watched {
    /// The collection path.
    pub path: String,
    /// `labelSelector` and `fieldSelector`, decoded (empty when absent).
    pub labels: String,
    pub fields: String,
    /// ADDED, MODIFIED and DELETED events sent (not BOOKMARKs).
    pub events: u64,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    stop: AtomicBool,
}

pub struct FakeApi {
    pub address: SocketAddr,
    shared: Arc<Shared>,
}

fn object_key(value: &Value) -> (String, String, String) {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let path = collection(&s(&value["apiVersion"]), &s(&value["kind"]));
    (
        path,
        s(&value["metadata"]["namespace"]),
        s(&value["metadata"]["name"]),
    )
}

impl FakeApi {
    /// Serves on `address` (e.g. `127.0.0.1:0`) until dropped.
    pub fn start(address: &str) -> FakeApi {
        FakeApi::serve(TcpListener::bind(address).expect("bind fake API server"))
    }

    /// Serves on a listener bound elsewhere (e.g. inside a lab namespace).
    pub fn serve(listener: TcpListener) -> FakeApi {
        let address = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                rv: 100,
                ..State::default()
            }),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        accept(listener, Arc::clone(&shared));
        FakeApi { address, shared }
    }

    /// Serves the same objects on one more listener (e.g. bound in a
    /// second lab's namespace, so that agents of two Nodes, each in its own
    /// namespace, watch one API server); returns its address.
    pub fn listen(&self, listener: TcpListener) -> SocketAddr {
        let address = listener.local_addr().unwrap();
        accept(listener, Arc::clone(&self.shared));
        address
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// A kubeconfig pointing at this server, without credentials.
    pub fn kubeconfig(&self) -> String {
        kubeconfig_at(self.address)
    }

    /// Subscribes in-process to the collection `path` (the objects
    /// `select` selects): answers the objects already held, then hands
    /// every later event to `subscriber` as it is written (see
    /// [`Subscriber`]).
    pub fn subscribe(
        &self,
        path: &str,
        select: Select,
        subscriber: Arc<dyn Subscriber>,
    ) -> (Subscription, Vec<Arc<Value>>) {
        let mut state = self.shared.state.lock().unwrap();
        let start = (path.to_string(), String::new(), String::new());
        let held = state
            .objects
            .range(start..)
            .take_while(|((p, _, _), _)| p == path)
            .filter(|(_, object)| select.selects(object))
            .map(|(_, object)| Arc::clone(object))
            .collect();
        (state.fanout.subscribe(path, select, subscriber), held)
    }

    /// Ends an in-process subscription.
    pub fn unsubscribe(&self, subscription: &Subscription) {
        self.shared
            .state
            .lock()
            .unwrap()
            .fanout
            .unsubscribe(subscription.id);
    }

    /// Events and bytes sent so far, to in-process subscriptions and HTTP
    /// watches (not BOOKMARKs nor lists).
    pub fn sent(&self) -> (u64, u64) {
        let state = self.shared.state.lock().unwrap();
        (state.fanout.sent_events, state.fanout.sent_bytes)
    }

    /// Creates or replaces an object (ADDED or MODIFIED).
    pub fn apply(&self, mut object: Value) {
        let key = object_key(&object);
        let mut state = self.shared.state.lock().unwrap();
        assert!(!state.absent.contains(&key.0), "{} is not installed", key.0);
        state.rv += 1;
        object["metadata"]["resourceVersion"] = json!(state.rv.to_string());
        object["metadata"]
            .as_object_mut()
            .unwrap()
            .entry("uid")
            .or_insert_with(|| json!(format!("uid-{}-{}", key.1, key.2)));
        let generation = state
            .objects
            .get(&key)
            .and_then(|old| old["metadata"]["generation"].as_i64())
            .unwrap_or(0)
            + 1;
        object["metadata"]["generation"] = json!(generation);
        let object = Arc::new(object);
        let kind = if state
            .objects
            .insert(key.clone(), Arc::clone(&object))
            .is_some()
        {
            "MODIFIED"
        } else {
            "ADDED"
        };
        let rv = state.rv;
        state.push(rv, kind, key.0, object);
        drop(state);
        self.shared.changed.notify_all();
    }

    /// Deletes an object (DELETED); `object` needs only its type and metadata.
    pub fn delete(&self, object: &Value) {
        let key = object_key(object);
        let mut state = self.shared.state.lock().unwrap();
        let Some(old) = state.objects.remove(&key) else {
            panic!("delete of unknown object {key:?}")
        };
        let mut old = Arc::unwrap_or_clone(old);
        state.rv += 1;
        old["metadata"]["resourceVersion"] = json!(state.rv.to_string());
        let rv = state.rv;
        state.push(rv, "DELETED", key.0, Arc::new(old));
        drop(state);
        self.shared.changed.notify_all();
    }

    /// A BOOKMARK on every collection at the current resourceVersion.
    pub fn bookmark(&self, paths: &[String]) {
        let mut state = self.shared.state.lock().unwrap();
        state.rv += 1;
        let rv = state.rv;
        for path in paths {
            let object = json!({"metadata": {"resourceVersion": rv.to_string()}});
            state.push(rv, "BOOKMARK", path.clone(), Arc::new(object));
        }
        drop(state);
        self.shared.changed.notify_all();
    }

    /// Forgets the event history: every open watch ends and its client's
    /// next watch gets 410 Gone, forcing a relist.
    pub fn compact(&self) {
        let mut state = self.shared.state.lock().unwrap();
        state.rv += 1;
        state.oldest = state.rv;
        state.events.clear();
        state.epoch += 1;
        drop(state);
        self.shared.changed.notify_all();
    }

    /// Number of 410 Gone answers sent.
    pub fn gone_sent(&self) -> u64 {
        self.shared.state.lock().unwrap().gone_sent
    }

    /// Requests served so far.
    pub fn log(&self) -> Vec<String> {
        self.shared.state.lock().unwrap().log.clone()
    }

    /// Makes list requests wait until [`FakeApi::release_lists`]: an API
    /// server slow to answer the first list.
    pub fn hold_lists(&self) {
        self.shared.state.lock().unwrap().lists_held = true;
    }

    /// Answers the held list requests and every later one at once.
    pub fn release_lists(&self) {
        self.shared.state.lock().unwrap().lists_held = false;
        self.shared.changed.notify_all();
    }

    /// Removes the collection `path` as deleting its CRD does, abruptly:
    /// its objects are gone without DELETED events, open watches end, and
    /// every request for it answers 404 until [`FakeApi::install`].
    pub fn uninstall(&self, path: &str) {
        let mut state = self.shared.state.lock().unwrap();
        state.absent.insert(path.to_string());
        state.objects.retain(|(p, _, _), _| p != path);
        state.events.retain(|e| e.path != path);
        state.epoch += 1;
        drop(state);
        self.shared.changed.notify_all();
    }

    /// Serves the collection `path` again (its CRD installed), empty.
    pub fn install(&self, path: &str) {
        self.shared.state.lock().unwrap().absent.remove(path);
    }

    /// Makes every list and watch of the collection `path` answer `500`,
    /// ending its open watches, until [`FakeApi::heal`].
    pub fn fail(&self, path: &str) {
        let mut state = self.shared.state.lock().unwrap();
        state.failing.insert(path.to_string());
        state.epoch += 1;
        drop(state);
        self.shared.changed.notify_all();
    }

    /// Serves the collection `path` normally again.
    pub fn heal(&self, path: &str) {
        self.shared.state.lock().unwrap().failing.remove(path);
    }

    /// The Events the server holds (created, then patched), by
    /// `namespace/name`.
    pub fn events(&self) -> BTreeMap<String, Value> {
        self.shared.state.lock().unwrap().k8s_events.clone()
    }

    /// Event requests received (created, patched or refused).
    pub fn event_requests(&self) -> u64 {
        self.shared.state.lock().unwrap().event_requests
    }

    /// While `refuse` holds, Event requests are answered `403 Forbidden`
    /// (no RBAC for Events).
    pub fn refuse_events(&self, refuse: bool) {
        self.shared.state.lock().unwrap().refuse_events = refuse;
    }

    /// Every watch request served so far, in order.
    pub fn watches(&self) -> Vec<Watched> {
        self.shared.state.lock().unwrap().watches.clone()
    }

    /// The objects of collection `path` (as [`collection`] names it), by
    /// `namespace/name` (`/name` when cluster-scoped).
    pub fn objects(&self, path: &str) -> BTreeMap<String, Value> {
        self.shared
            .state
            .lock()
            .unwrap()
            .objects
            .iter()
            .filter(|((p, _, _), _)| p == path)
            .map(|((_, ns, name), object)| (format!("{ns}/{name}"), (**object).clone()))
            .collect()
    }

    /// Requests with `method` (`PUT`, `POST`, `DELETE`) whose path starts
    /// with `prefix`, served so far.
    pub fn writes(&self, method: &str, prefix: &str) -> usize {
        let start = format!("{method} {prefix}");
        self.log().iter().filter(|r| r.starts_with(&start)).count()
    }

    /// Lists (not watches) started for `path`: the later pages of a
    /// paginated list (`continue=`) are not counted again.
    pub fn lists(&self, path: &str) -> usize {
        self.log()
            .iter()
            .filter(|r| {
                let target = r.trim_start_matches("GET ");
                let (p, q) = target.split_once('?').unwrap_or((target, ""));
                p == path && !q.contains("watch=true") && !q.contains("continue=")
            })
            .count()
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
    }
}

/// A kubeconfig pointing at `address` (one of a [`FakeApi`]'s listeners),
/// without credentials.
pub fn kubeconfig_at(address: SocketAddr) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
  - name: fake
    cluster:
      server: http://{address}
users:
  - name: fake
    user: {{}}
contexts:
  - name: fake
    context:
      cluster: fake
      user: fake
current-context: fake
"
    )
}

/// Accepts connections on `listener` until the server is dropped, one
/// thread per connection. Polled, so that dropping the server ends the
/// loop even when the listener lives in a namespace the test thread cannot
/// connect into.
fn accept(listener: TcpListener, shared: Arc<Shared>) {
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        while !shared.stop.load(Ordering::SeqCst) {
            match listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false).unwrap();
                    let shared = Arc::clone(&shared);
                    std::thread::spawn(move || serve(stream, &shared));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    });
}

fn query(target: &str) -> BTreeMap<String, String> {
    target
        .split_once('?')
        .map(|(_, q)| q)
        .unwrap_or_default()
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), decode(v)))
        .collect()
}

/// A query value, `application/x-www-form-urlencoded`.
fn decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The requirements of a selector, split at the commas outside
/// parentheses.
fn requirements(selector: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(selector[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(selector[start..].trim());
    out.into_iter().filter(|r| !r.is_empty()).collect()
}

/// Whether `value` (a label or field, `None` when absent) meets one
/// requirement.
fn meets(requirement: &str, value: impl Fn(&str) -> Option<String>) -> bool {
    let set = |list: &str| -> BTreeSet<String> {
        list.trim()
            .trim_start_matches('(')
            .trim_end_matches(')')
            .split(',')
            .map(|v| v.trim().to_string())
            .collect()
    };
    if let Some((key, list)) = requirement.split_once(" notin ") {
        return value(key.trim()).is_none_or(|v| !set(list).contains(&v));
    }
    if let Some((key, list)) = requirement.split_once(" in ") {
        return value(key.trim()).is_some_and(|v| set(list).contains(&v));
    }
    if let Some((key, want)) = requirement.split_once("!=") {
        return value(key.trim()).as_deref() != Some(want.trim());
    }
    if let Some((key, want)) = requirement
        .split_once("==")
        .or_else(|| requirement.split_once('='))
    {
        return value(key.trim()).as_deref() == Some(want.trim());
    }
    if let Some(key) = requirement.strip_prefix('!') {
        return value(key.trim()).is_none();
    }
    value(requirement).is_some()
}

/// Whether `object` is selected by the request's `labelSelector` and
/// `fieldSelector`.
fn selected(object: &Value, labels: &str, fields: &str) -> bool {
    let label = |key: &str| {
        object["metadata"]["labels"][key]
            .as_str()
            .map(str::to_string)
    };
    let field = |path: &str| {
        let mut at = object;
        for part in path.split('.') {
            at = &at[part];
        }
        match at {
            Value::String(s) => Some(s.clone()),
            Value::Null => None,
            other => Some(other.to_string()),
        }
    };
    requirements(labels).iter().all(|r| meets(r, label))
        && requirements(fields).iter().all(|r| meets(r, field))
}

/// The path of `object` itself, as a GET of it names it.
fn object_path(key: &(String, String, String)) -> String {
    let (collection, namespace, name) = key;
    if namespace.is_empty() {
        return format!("{collection}/{name}");
    }
    // `/apis/G/V/PLURAL` → `/apis/G/V/namespaces/NS/PLURAL/NAME`.
    let (base, plural) = collection.rsplit_once('/').unwrap();
    format!("{base}/namespaces/{namespace}/{plural}/{name}")
}

/// Whether `path` names one object (not a collection): after `/api/V`
/// or `/apis/G/V`, two or four segments.
fn names_an_object(path: &str) -> bool {
    let rest = match path.strip_prefix("/apis/") {
        Some(rest) => rest.splitn(3, '/').nth(2),
        None => path
            .strip_prefix("/api/")
            .and_then(|r| r.split_once('/').map(|(_, rest)| rest)),
    };
    rest.is_some_and(|r| matches!(r.split('/').count(), 2 | 4))
}

fn serve(stream: TcpStream, shared: &Shared) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let mut length = 0;
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) if line == "\r\n" => break,
            Ok(_) => {
                if let Some((name, value)) = line.split_once(':') {
                    if name.eq_ignore_ascii_case("content-length") {
                        length = value.trim().parse().unwrap_or(0);
                    }
                }
            }
        }
    }
    let mut body = vec![0; length];
    if std::io::Read::read_exact(&mut reader, &mut body).is_err() {
        return;
    }
    let mut parts = request_line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    shared
        .state
        .lock()
        .unwrap()
        .log
        .push(format!("{method} {target}"));
    let path = target.split('?').next().unwrap_or("");
    let params = query(target);
    let mut stream = stream;
    if path.starts_with("/apis/events.k8s.io/v1/") {
        let (code, answer) = event_request(shared, method, path, &body);
        let _ = respond(&mut stream, code, &answer);
        return;
    }
    if let Some((collection, namespace, name)) = written_object(path) {
        if method != "GET" || !name.is_empty() {
            let (code, answer) =
                object_request(shared, method, &collection, &namespace, &name, &body);
            let _ = respond(&mut stream, code, &answer);
            return;
        }
    }
    if method != "GET" {
        let _ = respond(&mut stream, 405, &json!({"kind": "Status", "code": 405}));
        return;
    }
    if shared.state.lock().unwrap().absent.contains(path) {
        let not_found = failure(
            404,
            "NotFound",
            "the server could not find the requested resource",
        );
        let _ = respond(&mut stream, 404, &not_found);
        return;
    }
    if shared.state.lock().unwrap().failing.contains(path) {
        let timed_out = failure(500, "InternalError", "etcdserver: request timed out");
        let _ = respond(&mut stream, 500, &timed_out);
        return;
    }
    if names_an_object(path) {
        get(&mut stream, shared, path);
    } else if params.get("watch").map(String::as_str) == Some("true") {
        watch(stream, shared, path, &params);
    } else {
        list(&mut stream, shared, path, &params);
    }
}

/// `POST …/namespaces/NS/events` creates an Event, `PATCH
/// …/namespaces/NS/events/NAME` merges a patch into one.
fn event_request(shared: &Shared, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
    let status = |code: u16, reason: &str| failure(code, reason, reason);
    let mut state = shared.state.lock().unwrap();
    state.event_requests += 1;
    if state.refuse_events {
        return (403, status(403, "Forbidden"));
    }
    let Ok(sent) = serde_json::from_slice::<Value>(body) else {
        return (400, status(400, "BadRequest"));
    };
    let parts: Vec<&str> = path
        .trim_start_matches("/apis/events.k8s.io/v1/")
        .split('/')
        .collect();
    match (method, parts.as_slice()) {
        ("POST", ["namespaces", namespace, "events"]) => {
            let name = sent["metadata"]["name"].as_str().unwrap_or_default();
            let key = format!("{namespace}/{name}");
            if state.k8s_events.contains_key(&key) {
                return (409, status(409, "AlreadyExists"));
            }
            state.k8s_events.insert(key, sent.clone());
            (201, sent)
        }
        ("PATCH", ["namespaces", namespace, "events", name]) => {
            let key = format!("{namespace}/{name}");
            let Some(event) = state.k8s_events.get_mut(&key) else {
                return (404, status(404, "NotFound"));
            };
            merge(event, &sent);
            (200, event.clone())
        }
        _ => (405, status(405, "MethodNotAllowed")),
    }
}

/// The collection, Namespace and name a path of a written kind (Lease,
/// AddressGroup) names: `/apis/G/V[/namespaces/NS]/PLURAL[/NAME]`;
/// `None` for every other path.
fn written_object(path: &str) -> Option<(String, String, String)> {
    let rest = path.strip_prefix("/apis/")?;
    let parts: Vec<&str> = rest.split('/').collect();
    let (group, version, rest) = match parts.as_slice() {
        [group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (ns.to_string(), rest),
        rest => (String::new(), rest),
    };
    let (plural, name) = match rest {
        [plural] => (*plural, String::new()),
        [plural, name] => (*plural, name.to_string()),
        _ => return None,
    };
    if !matches!(plural, "leases" | "addressgroups") {
        return None;
    }
    Some((format!("/apis/{group}/{version}/{plural}"), namespace, name))
}

/// A write (or a GET of one object) of a written kind.
fn object_request(
    shared: &Shared,
    method: &str,
    collection: &str,
    namespace: &str,
    name: &str,
    body: &[u8],
) -> (u16, Value) {
    let status = |code: u16, reason: &str| failure(code, reason, reason);
    let sent = serde_json::from_slice::<Value>(body).unwrap_or(Value::Null);
    let mut state = shared.state.lock().unwrap();
    let name = match method {
        "POST" => sent["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        _ => name.to_string(),
    };
    let key = (collection.to_string(), namespace.to_string(), name.clone());
    let held = state.objects.get(&key).map(|o| (**o).clone());
    let (code, event, object) = match (method, held) {
        ("GET", Some(object)) => return (200, object),
        ("GET" | "PUT" | "PATCH" | "DELETE", None) => return (404, status(404, "NotFound")),
        ("POST", Some(_)) => return (409, status(409, "AlreadyExists")),
        ("PUT", Some(old))
            if sent["metadata"]["resourceVersion"].is_string()
                && sent["metadata"]["resourceVersion"] != old["metadata"]["resourceVersion"] =>
        {
            return (409, status(409, "Conflict"));
        }
        ("DELETE", Some(old)) => (200, "DELETED", old),
        ("POST", None) => (201, "ADDED", sent),
        ("PUT", Some(_)) => (200, "MODIFIED", sent),
        ("PATCH", Some(mut old)) => {
            merge(&mut old, &sent);
            (200, "MODIFIED", old)
        }
        _ => return (405, status(405, "MethodNotAllowed")),
    };
    let mut object = object;
    state.rv += 1;
    object["metadata"]["resourceVersion"] = json!(state.rv.to_string());
    if event != "DELETED" {
        object["metadata"]["uid"] = json!(format!("uid-{namespace}-{name}"));
    }
    let object = Arc::new(object);
    if event == "DELETED" {
        state.objects.remove(&key);
    } else {
        state.objects.insert(key, Arc::clone(&object));
    }
    let rv = state.rv;
    state.push(rv, event, collection.to_string(), Arc::clone(&object));
    drop(state);
    let object = Arc::unwrap_or_clone(object);
    shared.changed.notify_all();
    (code, object)
}

/// JSON merge patch (RFC 7386).
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    target.remove(key);
                } else {
                    merge(target.entry(key.clone()).or_insert(Value::Null), value);
                }
            }
        }
        (target, patch) => *target = patch.clone(),
    }
}

fn respond(stream: &mut TcpStream, code: u16, body: &Value) -> std::io::Result<()> {
    let body = body.to_string();
    write!(
        stream,
        "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

fn get(stream: &mut TcpStream, shared: &Shared, path: &str) {
    let state = shared.state.lock().unwrap();
    let found = state
        .objects
        .iter()
        .find(|(key, _)| object_path(key) == path)
        .map(|(_, object)| Arc::clone(object));
    drop(state);
    let _ = match found {
        Some(object) => respond(stream, 200, object.as_ref()),
        None => respond(stream, 404, &failure(404, "NotFound", "not found")),
    };
}

fn selectors(params: &BTreeMap<String, String>) -> (String, String) {
    let get = |k: &str| params.get(k).cloned().unwrap_or_default();
    (get("labelSelector"), get("fieldSelector"))
}

fn list(stream: &mut TcpStream, shared: &Shared, path: &str, params: &BTreeMap<String, String>) {
    let (labels, fields) = selectors(params);
    let limit = params
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|&l| l > 0);
    let mut state = shared.state.lock().unwrap();
    while state.lists_held && !shared.stop.load(Ordering::SeqCst) {
        state = shared.changed.wait(state).unwrap();
    }
    let (rv, mut rest) = match params.get("continue") {
        Some(token) => {
            let Some(kept) = token
                .parse::<u64>()
                .ok()
                .and_then(|t| state.continued.remove(&t))
            else {
                drop(state);
                let too_old = "the provided continue parameter is too old";
                let _ = respond(stream, 410, &failure(410, "Expired", too_old));
                return;
            };
            kept
        }
        None => (
            state.rv,
            state
                .objects
                .iter()
                .filter(|((p, _, _), object)| p == path && selected(object, &labels, &fields))
                .map(|(_, object)| Arc::clone(object))
                .collect(),
        ),
    };
    let page: Vec<Arc<Value>> = rest
        .drain(..limit.unwrap_or(usize::MAX).min(rest.len()))
        .collect();
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if !rest.is_empty() {
        state.last_token += 1;
        let token = state.last_token;
        metadata["continue"] = json!(token.to_string());
        metadata["remainingItemCount"] = json!(rest.len());
        state.continued.insert(token, (rv, rest));
        while state.continued.len() > MAX_CONTINUED {
            state.continued.pop_first();
        }
    }
    drop(state);
    // List items come without apiVersion and kind, as from a real server.
    let items: Vec<Value> = page
        .iter()
        .map(|object| {
            let mut item = (**object).clone();
            let map = item.as_object_mut().unwrap();
            map.remove("apiVersion");
            map.remove("kind");
            item
        })
        .collect();
    let body = json!({
        "kind": "List",
        "apiVersion": "v1",
        "metadata": metadata,
        "items": items,
    });
    let _ = respond(stream, 200, &body);
}

/// A `Status` answering a request that failed, as the API server writes it.
fn failure(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "details": {}, "code": code})
}

fn chunk(stream: &mut TcpStream, line: &str) -> std::io::Result<()> {
    write!(stream, "{:x}\r\n{line}\r\n", line.len())?;
    stream.flush()
}

fn watch(mut stream: TcpStream, shared: &Shared, path: &str, params: &BTreeMap<String, String>) {
    let from: u64 = params
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let timeout = params
        .get("timeoutSeconds")
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_secs(290), Duration::from_secs);
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    if stream.write_all(head.as_bytes()).is_err() {
        return;
    }
    let deadline = Instant::now() + timeout;
    let mut state = shared.state.lock().unwrap();
    if from < state.oldest {
        state.gone_sent += 1;
        drop(state);
        let gone = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1",
            "metadata": {}, "status": "Failure", "message": "too old resource version",
            "reason": "Expired", "code": 410}});
        let _ = chunk(&mut stream, &format!("{gone}\n"));
        let _ = stream.write_all(b"0\r\n\r\n");
        return;
    }
    let (labels, fields) = selectors(params);
    let watch_id = state.watches.len();
    state.watches.push(Watched {
        path: path.to_string(),
        labels: labels.clone(),
        fields: fields.clone(),
        events: 0,
    });
    let epoch = state.epoch;
    let mut sent = from;
    loop {
        if shared.stop.load(Ordering::SeqCst) || state.epoch != epoch || Instant::now() >= deadline
        {
            break;
        }
        let start = state.events.partition_point(|e| e.rv <= sent);
        let events: Vec<Arc<Event>> = state.events[start..]
            .iter()
            .filter(|e| e.path == path)
            .filter(|e| e.kind == "BOOKMARK" || selected(&e.object, &labels, &fields))
            .cloned()
            .collect();
        let (count, bytes) = events
            .iter()
            .filter(|e| e.kind != "BOOKMARK")
            .fold((0, 0), |(n, b), e| (n + 1, b + e.line.len() as u64));
        state.watches[watch_id].events += count;
        state.fanout.sent_events += count;
        state.fanout.sent_bytes += bytes;
        if let Some(last) = state.events.last() {
            sent = sent.max(last.rv);
        }
        if !events.is_empty() {
            drop(state);
            for event in &events {
                if chunk(&mut stream, &event.line).is_err() {
                    return;
                }
            }
            state = shared.state.lock().unwrap();
            continue;
        }
        state = shared
            .changed
            .wait_timeout(state, Duration::from_millis(200))
            .unwrap()
            .0;
    }
    drop(state);
    let _ = stream.write_all(b"0\r\n\r\n");
}

#[cfg(test)]
mod tests;
