//! In-process watchers of the fake API server (the simulated agents of
//! `benches/scale/`), indexed by what they select, as the API server's
//! watch cache indexes watches: Pods by `spec.nodeName`, AddressGroups by
//! their `tollgate.io/selection` label, every other collection to every
//! subscriber of it. A write is serialized once ([`Event::line`]) and
//! handed to exactly the subscribers its object's node or selection key
//! names — a map look-up, never a scan of the subscribers. Each
//! subscription counts the events and bytes it was handed; the server
//! counts every event and byte it sent, HTTP watches included
//! ([`super::FakeApi::sent`]). This module owns the index and the counts;
//! it never decides what a subscriber selects.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::Value;

/// The label an AddressGroup slice carries its selection key in.
pub const SELECTION_LABEL: &str = "tollgate.io/selection";

/// One write as the server keeps it and hands it out: serialized once.
pub struct Event {
    pub rv: u64,
    /// The collection path ([`super::collection`]).
    pub path: String,
    /// `ADDED`, `MODIFIED`, `DELETED` or `BOOKMARK`.
    pub kind: &'static str,
    pub object: Arc<Value>,
    /// The watch stream's line for it: `{"type":…,"object":…}\n`.
    pub line: String,
}

impl Event {
    pub(crate) fn new(rv: u64, path: String, kind: &'static str, object: Arc<Value>) -> Event {
        let line = format!(
            "{}\n",
            serde_json::json!({"type": kind, "object": &*object})
        );
        Event {
            rv,
            path,
            kind,
            object,
            line,
        }
    }

    /// The Pod's `spec.nodeName`, or the slice's selection key: what the
    /// index looks the subscribers up by.
    fn node(&self) -> Option<&str> {
        self.object["spec"]["nodeName"].as_str()
    }

    fn selection(&self) -> Option<&str> {
        self.object["metadata"]["labels"][SELECTION_LABEL].as_str()
    }
}

/// What a subscription selects in its collection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Select {
    /// Every object (Namespaces, policies, Nodes).
    All,
    /// Pods with this `spec.nodeName`.
    Node(String),
    /// AddressGroup slices whose selection key is one of these.
    Selections(BTreeSet<String>),
}

impl Select {
    /// Whether `object` is selected (for the objects already held when
    /// the subscription starts).
    pub(crate) fn selects(&self, object: &Value) -> bool {
        match self {
            Select::All => true,
            Select::Node(node) => object["spec"]["nodeName"].as_str() == Some(node),
            Select::Selections(keys) => object["metadata"]["labels"][SELECTION_LABEL]
                .as_str()
                .is_some_and(|k| keys.contains(k)),
        }
    }
}

/// Receives the events of its subscriptions, in resourceVersion order, on
/// the writer's thread with the server locked: it must not call the
/// server back.
pub trait Subscriber: Send + Sync {
    fn deliver(&self, event: &Arc<Event>);
}

/// Events and bytes one subscription was handed.
#[derive(Debug, Default)]
pub struct Received {
    pub events: AtomicU64,
    pub bytes: AtomicU64,
}

impl Received {
    pub fn events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }

    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    fn count(&self, event: &Event) {
        self.events.fetch_add(1, Ordering::Relaxed);
        self.bytes
            .fetch_add(event.line.len() as u64, Ordering::Relaxed);
    }
}

/// A subscription's handle: its id (to end it) and its counts.
#[derive(Clone, Debug)]
pub struct Subscription {
    pub id: u64,
    pub received: Arc<Received>,
}

struct Entry {
    path: String,
    select: Select,
    subscriber: Arc<dyn Subscriber>,
    received: Arc<Received>,
}

/// The subscriptions of one collection, by what they select.
#[derive(Default)]
struct ByPath {
    all: Vec<u64>,
    by_node: HashMap<String, Vec<u64>>,
    by_selection: HashMap<String, Vec<u64>>,
}

/// Every in-process subscription, indexed.
#[derive(Default)]
pub(crate) struct Fanout {
    next: u64,
    entries: HashMap<u64, Entry>,
    paths: HashMap<String, ByPath>,
    /// Events and bytes sent, to subscriptions and HTTP watches.
    pub(crate) sent_events: u64,
    pub(crate) sent_bytes: u64,
}

impl Fanout {
    pub(crate) fn subscribe(
        &mut self,
        path: &str,
        select: Select,
        subscriber: Arc<dyn Subscriber>,
    ) -> Subscription {
        self.next += 1;
        let id = self.next;
        let by_path = self.paths.entry(path.to_string()).or_default();
        match &select {
            Select::All => by_path.all.push(id),
            Select::Node(node) => by_path.by_node.entry(node.clone()).or_default().push(id),
            Select::Selections(keys) => {
                for key in keys {
                    by_path
                        .by_selection
                        .entry(key.clone())
                        .or_default()
                        .push(id);
                }
            }
        }
        let received = Arc::new(Received::default());
        self.entries.insert(
            id,
            Entry {
                path: path.to_string(),
                select,
                subscriber,
                received: Arc::clone(&received),
            },
        );
        Subscription { id, received }
    }

    pub(crate) fn unsubscribe(&mut self, id: u64) {
        let Some(entry) = self.entries.remove(&id) else {
            return;
        };
        let Some(by_path) = self.paths.get_mut(&entry.path) else {
            return;
        };
        let drop_id = |ids: &mut Vec<u64>| ids.retain(|i| *i != id);
        match &entry.select {
            Select::All => drop_id(&mut by_path.all),
            Select::Node(node) => {
                if let Some(ids) = by_path.by_node.get_mut(node) {
                    drop_id(ids);
                }
            }
            Select::Selections(keys) => {
                for key in keys {
                    if let Some(ids) = by_path.by_selection.get_mut(key) {
                        drop_id(ids);
                    }
                }
            }
        }
    }

    /// Hands `event` to the subscriptions that select it. BOOKMARKs go to
    /// HTTP watches only.
    pub(crate) fn publish(&mut self, event: &Arc<Event>) {
        if event.kind == "BOOKMARK" {
            return;
        }
        let Some(by_path) = self.paths.get(&event.path) else {
            return;
        };
        let none = Vec::new();
        let node = event
            .node()
            .and_then(|n| by_path.by_node.get(n))
            .unwrap_or(&none);
        let selection = event
            .selection()
            .and_then(|k| by_path.by_selection.get(k))
            .unwrap_or(&none);
        let mut handed = 0;
        for id in by_path.all.iter().chain(node).chain(selection) {
            if let Some(entry) = self.entries.get(id) {
                entry.received.count(event);
                entry.subscriber.deliver(event);
                handed += 1;
            }
        }
        self.sent_events += handed;
        self.sent_bytes += handed * event.line.len() as u64;
    }
}
