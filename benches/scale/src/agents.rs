//! The simulated agents: the watch-and-store part of an agent in
//! controller mode, in-process, one per Node but the measured ones. Each
//! subscribes to the fake API server ([`tollgate_fake_api::fanout`]) for
//! its own Pods (`spec.nodeName`), the policy kinds and Namespaces, and
//! the AddressGroups of the selections its Node's policies need, keeps
//! what it is handed (the server's objects, shared by `Arc`), and
//! subscribes again when its Pods' shapes or the policies change. The
//! selections are computed by the core's own code
//! ([`compile::published_selections`], keys by [`group::key`]), once per Pod
//! shape (Namespace and app) and unioned per Node. Owns the stores and the
//! latency samples of the simulated side; never writes to the server.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::Value;
use tollgate_core::compile::{published_selections, PodShape};
use tollgate_core::model::{Object, Snapshot, Sourced};
use tollgate_core::selection::group;
use tollgate_fake_api::{collection, Event, FakeApi, Select, Subscriber, Subscription};

/// The annotation the churn marks a write's kind with; a write marked
/// `status` changes no address and no label.
pub const WRITE_ANNOTATION: &str = "sim.tollgate.io/write";

pub fn pods_path() -> String {
    collection("v1", "Pod")
}

pub fn groups_path() -> String {
    collection(group::API_VERSION, group::KIND)
}

/// The policy side's collections every agent watches whole.
pub fn policy_paths() -> [String; 3] {
    [
        collection("v1", "Namespace"),
        collection("crd.antrea.io/v1beta1", "NetworkPolicy"),
        collection("crd.antrea.io/v1beta1", "ClusterNetworkPolicy"),
    ]
}

/// The changes tagged by a fresh address, and when each (change, agent)
/// pair was first handed an event carrying it.
#[derive(Default)]
pub struct Tags {
    /// Fresh address → when it was written, and the agents handed it.
    pending: HashMap<String, (Instant, HashSet<usize>)>,
    /// The fresh addresses of the last event seen (computed once per
    /// event: every agent is handed the same event in turn).
    last: (u64, Vec<String>),
    /// Milliseconds, one per (change, agent) pair.
    pub samples: Vec<f64>,
    /// Per change, the slowest agent so far (cluster-wide).
    pub last_agent: HashMap<String, f64>,
}

impl Tags {
    /// A fresh address is about to be written.
    pub fn written(&mut self, ip: String, at: Instant) {
        self.pending.insert(ip, (at, HashSet::new()));
    }

    /// `event` was handed to `agent`, whose group subscription began at
    /// `since` (a change written before it reached the agent with the
    /// slices it listed, not as an event: not a pair).
    fn handed(&mut self, event: &Event, agent: usize, since: Instant, now: Instant) {
        if self.last.0 != event.rv {
            let members = event.object["spec"]["members"].as_array();
            let fresh = members
                .into_iter()
                .flatten()
                .flat_map(|m| m["ips"].as_array().into_iter().flatten())
                .filter_map(Value::as_str)
                .filter(|ip| self.pending.contains_key(*ip))
                .map(str::to_string)
                .collect();
            self.last = (event.rv, fresh);
        }
        for ip in &self.last.1 {
            let Some((at, agents)) = self.pending.get_mut(ip) else {
                continue;
            };
            if *at >= since && agents.insert(agent) {
                let ms = now.duration_since(*at).as_secs_f64() * 1e3;
                self.samples.push(ms);
                let slowest = self.last_agent.entry(ip.clone()).or_insert(0.0);
                *slowest = slowest.max(ms);
            }
        }
    }
}

/// What one simulated agent holds.
#[derive(Default)]
struct Store {
    pods: HashMap<String, Arc<Value>>,
    groups: HashMap<String, Arc<Value>>,
}

pub struct SimAgent {
    pub id: usize,
    store: Mutex<Store>,
    keys: Mutex<BTreeSet<String>>,
    /// Every subscription it made, ended ones included (their counts).
    subscriptions: Mutex<Vec<Subscription>>,
    groups: Mutex<Option<(Subscription, Instant)>>,
    /// Pod events of status writes (own Pods, through the nodeName watch).
    pub status_events: AtomicU64,
    side: Arc<Side>,
}

/// What the simulated agents share: the latency tags, the agents to
/// subscribe again, and the Namespaces whose policies changed (`None`: a
/// cluster-wide one).
#[derive(Default)]
pub struct Side {
    pub tags: Mutex<Tags>,
    dirty: Mutex<BTreeSet<usize>>,
    policies_changed: Mutex<BTreeSet<Option<String>>>,
}

fn app_of(pod: &Value) -> Option<&str> {
    pod["metadata"]["labels"]["app"].as_str()
}

impl Subscriber for SimAgent {
    fn deliver(&self, event: &Arc<Event>) {
        let name = event.object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let deleted = event.kind == "DELETED";
        if event.path == pods_path() {
            let status = event.object["metadata"]["annotations"][WRITE_ANNOTATION] == "status";
            if status {
                self.status_events.fetch_add(1, Ordering::Relaxed);
            }
            let mut store = self.store.lock().unwrap();
            let old = if deleted {
                store.pods.remove(&name)
            } else {
                store.pods.insert(name, Arc::clone(&event.object))
            };
            if old.as_deref().and_then(app_of) != app_of(&event.object) || deleted {
                self.side.dirty.lock().unwrap().insert(self.id);
            }
        } else if event.path == groups_path() {
            let mut store = self.store.lock().unwrap();
            if deleted {
                store.groups.remove(&name);
            } else {
                store.groups.insert(name, Arc::clone(&event.object));
            }
            drop(store);
            let now = Instant::now();
            let since = self.groups.lock().unwrap().as_ref().map_or(now, |g| g.1);
            self.side
                .tags
                .lock()
                .unwrap()
                .handed(event, self.id, since, now);
        } else if event.path != policy_paths()[0] {
            let namespace = event.object["metadata"]["namespace"]
                .as_str()
                .map(str::to_string);
            self.side.policies_changed.lock().unwrap().insert(namespace);
        }
    }
}

impl SimAgent {
    /// Events and bytes it was handed so far.
    pub fn received(&self) -> (u64, u64) {
        self.subscriptions
            .lock()
            .unwrap()
            .iter()
            .fold((0, 0), |(e, b), s| {
                (e + s.received.events(), b + s.received.bytes())
            })
    }

    /// Whether it holds slice 0 of every selection it needs.
    pub fn complete(&self) -> bool {
        let store = self.store.lock().unwrap();
        self.keys
            .lock()
            .unwrap()
            .iter()
            .all(|k| store.groups.contains_key(&group::slice_name(k, 0)))
    }

    pub fn keys(&self) -> usize {
        self.keys.lock().unwrap().len()
    }

    pub fn slices(&self) -> usize {
        self.store.lock().unwrap().groups.len()
    }
}

/// Every simulated agent, and the Pod selections per shape.
pub struct Agents {
    pub agents: Vec<Arc<SimAgent>>,
    pub side: Arc<Side>,
    /// (Namespace, app) → the keys of the selections its Pods need.
    shapes: HashMap<(String, String), BTreeSet<String>>,
    /// Namespace → itself, its policies and the cluster's: what decides
    /// the selections of its Pods (a selection is a selector's normal
    /// form, not the Namespaces it matches).
    policies: HashMap<String, Snapshot>,
    /// Time spent computing selections, for the report.
    pub span_seconds: f64,
}

impl Agents {
    /// Agents for `nodes`, subscribed to their Pods and the policy side.
    pub fn start(api: &FakeApi, nodes: Vec<String>) -> Agents {
        let side = Arc::new(Side::default());
        let agents = nodes
            .into_iter()
            .enumerate()
            .map(|(id, node)| {
                let agent = Arc::new(SimAgent {
                    id,
                    store: Mutex::default(),
                    keys: Mutex::default(),
                    subscriptions: Mutex::default(),
                    groups: Mutex::default(),
                    status_events: AtomicU64::new(0),
                    side: Arc::clone(&side),
                });
                let mut subscriptions = Vec::new();
                let (pods, held) = api.subscribe(&pods_path(), Select::Node(node), agent.clone());
                subscriptions.push(pods);
                let mut store = agent.store.lock().unwrap();
                for pod in held {
                    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
                    store.pods.insert(name.to_string(), pod);
                }
                drop(store);
                for path in policy_paths() {
                    subscriptions.push(api.subscribe(&path, Select::All, agent.clone()).0);
                }
                *agent.subscriptions.lock().unwrap() = subscriptions;
                side.dirty.lock().unwrap().insert(id);
                agent
            })
            .collect();
        side.policies_changed.lock().unwrap().insert(None);
        Agents {
            agents,
            side,
            shapes: HashMap::new(),
            policies: HashMap::new(),
            span_seconds: 0.0,
        }
    }

    /// Reads the policy side again from the server (as every agent holds
    /// it), per Namespace, and forgets the selections of the shapes of
    /// the Namespaces in `changed` (`None`: all).
    fn read_policies(&mut self, api: &FakeApi, changed: &BTreeSet<Option<String>>) {
        let [namespaces, local, cluster] = policy_paths();
        let decode = |value: Value| {
            Sourced::new(
                PathBuf::from("scale-sim"),
                Object::from_value(value).expect("a generated object decodes"),
            )
        };
        let namespaces: Vec<Sourced> = api.objects(&namespaces).into_values().map(decode).collect();
        let cluster: Vec<Sourced> = api.objects(&cluster).into_values().map(decode).collect();
        let mut by_namespace: BTreeMap<String, Vec<Sourced>> = BTreeMap::new();
        for (key, value) in api.objects(&local) {
            let ns = key.split_once('/').map(|(ns, _)| ns).unwrap_or_default();
            by_namespace
                .entry(ns.to_string())
                .or_default()
                .push(decode(value));
        }
        self.policies = namespaces
            .into_iter()
            .map(|ns| {
                let name = ns.object.metadata().name.clone();
                let mut objects = vec![ns];
                objects.extend(cluster.iter().cloned());
                objects.extend(by_namespace.remove(&name).unwrap_or_default());
                (name, Snapshot { objects })
            })
            .collect();
        if changed.contains(&None) {
            self.shapes.clear();
        } else {
            self.shapes
                .retain(|(ns, _), _| !changed.contains(&Some(ns.clone())));
        }
    }

    fn keys_of(&mut self, namespace: &str, app: &str) -> &BTreeSet<String> {
        let shape_key = (namespace.to_string(), app.to_string());
        if !self.shapes.contains_key(&shape_key) {
            let started = Instant::now();
            let shape = PodShape {
                namespace: namespace.to_string(),
                labels: tollgate_core::model::Labels::from_iter([(
                    "app".to_string(),
                    app.to_string(),
                )]),
                service_account: "default".to_string(),
            };
            let keys = match self.policies.get(namespace) {
                Some(policies) => published_selections(policies, [&shape])
                    .iter()
                    .map(group::key)
                    .collect(),
                None => BTreeSet::new(),
            };
            self.span_seconds += started.elapsed().as_secs_f64();
            self.shapes.insert(shape_key.clone(), keys);
        }
        &self.shapes[&shape_key]
    }

    /// Subscribes again each agent whose needed selections changed (its
    /// Pods' shapes, or the policies); answers how many did.
    pub fn refresh(&mut self, api: &FakeApi) -> usize {
        let changed = std::mem::take(&mut *self.side.policies_changed.lock().unwrap());
        if !changed.is_empty() {
            self.read_policies(api, &changed);
            self.side.dirty.lock().unwrap().extend(0..self.agents.len());
        }
        let dirty = std::mem::take(&mut *self.side.dirty.lock().unwrap());
        let mut changed = 0;
        for id in dirty {
            let agent = Arc::clone(&self.agents[id]);
            let shapes: BTreeSet<(String, String)> = agent
                .store
                .lock()
                .unwrap()
                .pods
                .values()
                .filter_map(|pod| {
                    let ns = pod["metadata"]["namespace"].as_str()?;
                    Some((ns.to_string(), app_of(pod)?.to_string()))
                })
                .collect();
            let mut keys = BTreeSet::new();
            for (ns, app) in &shapes {
                keys.extend(self.keys_of(ns, app).iter().cloned());
            }
            if *agent.keys.lock().unwrap() == keys {
                continue;
            }
            changed += 1;
            // Not locked while the server is called: its deliveries lock it.
            let old = agent.groups.lock().unwrap().take();
            if let Some((old, _)) = old {
                api.unsubscribe(&old);
            }
            let since = Instant::now();
            let (subscription, held) = api.subscribe(
                &groups_path(),
                Select::Selections(keys.clone()),
                agent.clone(),
            );
            let mut store = agent.store.lock().unwrap();
            store.groups.retain(|name, _| {
                name.rsplit_once('-')
                    .is_some_and(|(key, _)| keys.contains(key))
            });
            for slice in held {
                let name = slice["metadata"]["name"].as_str().unwrap_or_default();
                store.groups.entry(name.to_string()).or_insert(slice);
            }
            drop(store);
            agent
                .subscriptions
                .lock()
                .unwrap()
                .push(subscription.clone());
            *agent.groups.lock().unwrap() = Some((subscription, since));
            *agent.keys.lock().unwrap() = keys;
        }
        changed
    }
}
