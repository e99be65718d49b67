//! The Docker source: the inventory comes from the Docker Engine API (or
//! podman's Docker-compatible service) through `bollard`, the policies from
//! the policy directory ([`Directory`]). Each running container is a Pod
//! of the local Node ([`mapping`]); the two are merged into the snapshot
//! the agent enforces.
//!
//! It owns one OS thread running a single-threaded tokio runtime (the
//! packet path never runs on it). On each connection the thread agrees on
//! the API version with the server (`/version`: the lower of the server's
//! and bollard's), subscribes to `/events` (container, network and daemon
//! events), lists the running containers and inspects each and the
//! networks, publishes the inventory, and lists again [`super::DEBOUNCE`] after a burst of
//! relevant events (start, die, destroy, rename, network connect and
//! disconnect, …) settles, and every [`RESYNC`] in case an event was lost.
//!
//! Events that end a container's hold on its addresses (`die`, `destroy`,
//! a network `disconnect`) take it out of the inventory at once, and
//! events that give it addresses (`start`, `restart`, a network
//! `connect`) inspect it at once, before the settled relist; network
//! events (`create`, `destroy`, `connect`) read the networks again. The
//! bridge networks' subnets are the local endpoint ranges (the local
//! Node's `podCIDRs` in the snapshot): an address in them that no listed
//! container holds is unknown, and the agent's `startupPolicy` decides it
//! (see `docs/guide/security-model.md`).
//!
//! Like the Kubernetes source, it is not complete until its first
//! successful list: until then [`Source::latest`] says `None` (the agent
//! keeps its `startupPolicy`). An API that cannot be reached is retried
//! with a doubling wait up to [`BACKOFF_MAX`]. Lost later (a daemon
//! restart, the socket gone), the containers' addresses are unknown until
//! the next complete list: the inventory keeps the networks' subnets and
//! no container, so the last inventory can never give an address to a
//! container that no longer holds it. Each change of state (never
//! reached, connected, lost, back) is logged once; failures are counted
//! and said in `status` ([`DockerHealth`]).
//!
//! It must never block the agent nor write to Docker: it publishes the
//! latest inventory in a slot and calls a notifier; the agent takes the
//! merged snapshot when it reloads.
#![allow(clippy::disallowed_methods)] // the Docker source times resyncs, failures and debouncing on the clock.

mod health;
pub mod mapping;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::models::{EventMessage, EventMessageTypeEnum};
use bollard::query_parameters::{EventsOptions, ListContainersOptions};
use bollard::Docker;
use futures::StreamExt;
use ipnet::IpNet;

use crate::config::{ConfigError, DockerConfig};
use crate::counters;
use crate::model::{Node, NodeSpec, Object, ObjectMeta, ObjectRef, Pod, Snapshot, Sourced};
use crate::source::watch::Directory;
use crate::source::{Debounce, Source};
use crate::validate::Problem;
use health::Change;
pub use health::DockerHealth;
use mapping::{Mapped, Mapping};

counters! {
    /// How the Docker API is doing (`docker.enabled`). Registered by the
    /// agent in every mode.
    pub struct DockerCounters: one per agent {
        api_errors: Counter "docker_api_errors" = "Failed list, inspect or event-stream requests to the Docker API (docker.enabled); the containers' addresses are unknown (decided by the startup policy) until the next complete list, retried with backoff",
        containers: Gauge "docker_containers" = "Containers in the last Docker inventory published (docker.enabled)",
        connected: Gauge "docker_connected" = "1 while the Docker API answers (docker.enabled), 0 while it is unreachable and the containers' addresses are unknown",
    }
}

/// Longest a single API request may take.
const REQUEST_TIMEOUT_SECS: u64 = 10;
/// First wait before reconnecting to an API that failed.
pub const BACKOFF_START: Duration = Duration::from_millis(100);
/// Longest wait between reconnection attempts: while the API is away the
/// containers' addresses are unknown (closed by default), so an engine
/// that starts or comes back is picked up within this. An attempt is one
/// `connect` on a unix socket.
pub const BACKOFF_MAX: Duration = Duration::from_millis(500);
/// A full list this often even without events (an event may be lost).
pub const RESYNC: Duration = Duration::from_secs(60);

/// Container event actions after which the container no longer holds its
/// addresses: it leaves the inventory at once (Docker's names and
/// podman's).
const GONE_ACTIONS: &[&str] = &["die", "died", "destroy", "remove", "cleanup"];
/// Container event actions after which the container may hold (new)
/// addresses or labels: it is inspected at once.
const CHANGED_ACTIONS: &[&str] = &["start", "restart", "unpause", "rename"];

/// Event actions that can change a container's membership, labels or
/// addresses (Docker's names and podman's), or a network's subnets.
const RELEVANT_ACTIONS: &[&str] = &[
    "start",
    "restart",
    "die",
    "died",
    "stop",
    "kill",
    "destroy",
    "remove",
    "rename",
    "pause",
    "unpause",
    "connect",
    "disconnect",
    "cleanup",
    "init",
    "create",
];

/// Why the Docker source could not start. An API that cannot be reached is
/// not one of them: it is retried (see the module doc).
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("docker.enabled needs --policies DIR: policies come from the directory, the inventory from Docker")]
    NoPolicies,
    #[error("starting the docker thread")]
    Thread(#[source] std::io::Error),
}

/// The containers as endpoints, as last listed and followed since, and
/// the container networks' subnets.
#[derive(Clone, Debug, Default, PartialEq)]
struct Inventory {
    /// Endpoints by container ID.
    containers: BTreeMap<String, Pod>,
    /// The bridge networks' subnets: the local endpoint ranges.
    ranges: Vec<IpNet>,
}

impl Inventory {
    /// The endpoints in `namespace/name` order.
    fn pods(&self) -> Vec<&Pod> {
        let mut pods: Vec<&Pod> = self.containers.values().collect();
        pods.sort_by(|a, b| {
            (a.namespace(), &a.metadata.name).cmp(&(b.namespace(), &b.metadata.name))
        });
        // Two containers cannot share a name on one engine; keep the first
        // if an API answers otherwise.
        pods.dedup_by(|a, b| a.namespace() == b.namespace() && a.metadata.name == b.metadata.name);
        pods
    }
}

/// The last inventory; `None` before the first list.
type Slot = Arc<Mutex<Option<Arc<Inventory>>>>;

/// A running Docker source. Dropping it stops the thread.
pub struct DockerSource {
    policies: Directory,
    origin: Arc<Path>,
    /// The local Node's name: the container networks' subnets are its
    /// `podCIDRs`.
    node: String,
    inventory: Slot,
    health: Arc<DockerHealth>,
    /// Pods left out because a policy file holds an object of that name;
    /// logged once while it lasts.
    shadowed: HashSet<ObjectRef>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DockerSource {
    /// Starts the thread that connects to the API, lists the containers
    /// and follows the events; it does not wait for the API (until its
    /// first list the source is incomplete). `node` is the local Node's
    /// name. `notify` is called after each inventory that differs from
    /// the one before (the first included); it must not block.
    pub fn spawn(
        config: &DockerConfig,
        node: &str,
        policies: Directory,
        counters: Arc<DockerCounters>,
        notify: impl Fn() + Send + 'static,
    ) -> Result<DockerSource, DockerError> {
        let socket = config.socket()?;
        let host = config.host.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(DockerError::Thread)?;
        let health = Arc::new(DockerHealth::new(host.clone()));
        let inventory: Slot = Arc::default();
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let follower = Follower {
            socket: socket.to_string_lossy().into_owned(),
            labels: Labels::from(config),
            inventory: Arc::clone(&inventory),
            health: Arc::clone(&health),
            counters,
        };
        let thread = std::thread::Builder::new()
            .name("docker".into())
            .spawn(move || runtime.block_on(follower.run(notify, stopped)))
            .map_err(DockerError::Thread)?;
        tracing::info!(host = %host, "docker source started; no decision before its first list");
        Ok(DockerSource {
            policies,
            origin: Path::new(&format!("docker {host}")).into(),
            node: node.to_string(),
            inventory,
            health,
            shadowed: HashSet::new(),
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The API's state, for `status`.
    pub fn health(&self) -> Arc<DockerHealth> {
        Arc::clone(&self.health)
    }
}

/// The policy directory's snapshot with the containers added as Pods and
/// the container networks' subnets as the local Node's `podCIDRs`; `None`
/// until the containers were listed once. A container whose
/// `namespace/name` a policy file already uses as a Pod is left out
/// (logged once). Policy problems refuse the whole reload, as with the
/// directory alone.
impl Source for DockerSource {
    fn latest(&mut self) -> Result<Option<Arc<Snapshot>>, Vec<Problem>> {
        let Some(policies) = self.policies.latest()? else {
            return Ok(None);
        };
        let Some(inventory) = self
            .inventory
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        else {
            return Ok(None);
        };
        let taken: HashSet<ObjectRef> = policies.iter().map(Object::object_ref).collect();
        let mut snapshot = Snapshot::clone(&policies);
        let mut shadowed = HashSet::new();
        for pod in inventory.pods() {
            let object = Object::Pod(pod.clone());
            let key = object.object_ref();
            if taken.contains(&key) {
                if !self.shadowed.contains(&key) {
                    tracing::warn!("container left out: a policy file already defines {key}");
                }
                shadowed.insert(key);
                continue;
            }
            snapshot
                .objects
                .push(Sourced::new(self.origin.clone(), object));
        }
        if !inventory.ranges.is_empty() {
            snapshot.objects.push(Sourced::new(
                self.origin.clone(),
                Object::Node(Node {
                    metadata: ObjectMeta {
                        name: self.node.clone(),
                        ..ObjectMeta::default()
                    },
                    spec: NodeSpec {
                        pod_cidr: None,
                        pod_cidrs: inventory.ranges.iter().map(IpNet::to_string).collect(),
                    },
                    status: Default::default(),
                }),
            ));
        }
        self.shadowed = shadowed;
        Ok(Some(Arc::new(snapshot)))
    }
}

impl Drop for DockerSource {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The labels the mapping reads, owned by the thread.
#[derive(Clone, Debug)]
struct Labels {
    namespace: String,
    ports: String,
}

impl From<&DockerConfig> for Labels {
    fn from(config: &DockerConfig) -> Labels {
        Labels {
            namespace: config.namespace_label.clone(),
            ports: config.ports_label.clone(),
        }
    }
}

impl Labels {
    fn mapping(&self) -> Mapping<'_> {
        Mapping {
            namespace_label: &self.namespace,
            ports_label: &self.ports,
        }
    }
}

/// What one listing found: the inventory and what was left out of it.
struct Listing {
    inventory: Inventory,
    problems: Vec<String>,
}

/// Lists the running containers and inspects each, and the networks. A
/// container that goes away between the two is skipped; any other
/// failure fails the listing.
async fn list(client: &Docker, labels: &Labels) -> Result<Listing, bollard::errors::Error> {
    let summaries = client
        .list_containers(Some(ListContainersOptions {
            all: false,
            ..Default::default()
        }))
        .await?;
    let mut containers = BTreeMap::new();
    let mut problems = Vec::new();
    for id in summaries.iter().filter_map(|s| s.id.as_deref()) {
        if let Some(Mapped::Pod { pod, problem }) = inspect(client, id, labels).await? {
            if let Some(problem) = problem {
                problems.push(format!(
                    "container {}/{}: {problem}",
                    pod.namespace(),
                    pod.metadata.name
                ));
            }
            containers.insert(id.to_string(), *pod);
        }
    }
    let ranges = networks(client).await?;
    Ok(Listing {
        inventory: Inventory { containers, ranges },
        problems,
    })
}

/// One container as the mapping sees it; `None` when it is gone.
async fn inspect(
    client: &Docker,
    id: &str,
    labels: &Labels,
) -> Result<Option<Mapped>, bollard::errors::Error> {
    match client.inspect_container(id, None).await {
        Ok(container) => {
            let mapped = mapping::endpoint(&container, labels.mapping());
            if let Mapped::NotAnEndpoint(why) = &mapped {
                tracing::debug!(container = %id, why, "container is not an endpoint");
            }
            Ok(Some(mapped))
        }
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(None),
        Err(error) => Err(error),
    }
}

/// The subnets of the bridge networks (Docker's and podman's `bridge`
/// driver), both families, in order and once each. Other drivers'
/// subnets (macvlan, ipvlan) are usually the host's own LAN, whose other
/// hosts no container inventory knows: they are left out.
async fn networks(client: &Docker) -> Result<Vec<IpNet>, bollard::errors::Error> {
    let networks = client.list_networks(None).await?;
    let mut ranges: Vec<IpNet> = networks
        .iter()
        .filter(|n| n.driver.as_deref() == Some("bridge"))
        .filter_map(|n| n.ipam.as_ref()?.config.as_ref())
        .flatten()
        .filter_map(|c| c.subnet.as_deref()?.parse::<IpNet>().ok())
        .map(|net| net.trunc())
        .collect();
    ranges.sort();
    ranges.dedup();
    Ok(ranges)
}

/// A client for one connection, speaking the lower of the server's API
/// version (its `/version` answer) and bollard's own: Docker 29 refuses
/// clients below 1.44, podman 4.3 serves 1.41.
async fn connect(socket: &str) -> Result<Docker, bollard::errors::Error> {
    Docker::connect_with_unix(socket, REQUEST_TIMEOUT_SECS, bollard::API_DEFAULT_VERSION)?
        .negotiate_version()
        .await
}

/// The thread's side: connects, follows the API's events and republishes.
struct Follower {
    socket: String,
    labels: Labels,
    inventory: Slot,
    health: Arc<DockerHealth>,
    counters: Arc<DockerCounters>,
}

/// How one connection to the event stream ended.
enum Ended {
    Stopped,
    /// `listed`: a listing succeeded on this connection first.
    Failed {
        error: String,
        listed: bool,
    },
}

/// What an event asks of the inventory before the settled relist.
#[derive(Debug, PartialEq)]
enum Step {
    /// Nothing at once.
    Nothing,
    /// The container no longer holds its addresses.
    Gone(String),
    /// The container may hold (new) addresses: inspect it.
    Inspect(String),
    /// The networks changed; with a container connected or disconnected.
    Networks(Option<String>),
    /// The daemon says something changed: list everything now.
    Relist,
}

/// What `message` asks of the inventory at once.
fn step(message: &EventMessage) -> Step {
    let action = message.action.as_deref().unwrap_or_default();
    // `health_status: healthy`, `exec_start: sh`: the action's first word.
    let verb = action.split([':', ' ']).next().unwrap_or_default();
    let actor = message.actor.as_ref();
    let id = actor.and_then(|a| a.id.clone()).unwrap_or_default();
    match message.typ {
        Some(EventMessageTypeEnum::CONTAINER) if id.is_empty() => Step::Nothing,
        Some(EventMessageTypeEnum::CONTAINER) if GONE_ACTIONS.contains(&verb) => Step::Gone(id),
        Some(EventMessageTypeEnum::CONTAINER) if CHANGED_ACTIONS.contains(&verb) => {
            Step::Inspect(id)
        }
        Some(EventMessageTypeEnum::NETWORK)
            if matches!(
                verb,
                "create" | "destroy" | "remove" | "connect" | "disconnect"
            ) =>
        {
            let container = actor
                .and_then(|a| a.attributes.as_ref())
                .and_then(|a| a.get("container"))
                .cloned();
            Step::Networks(container)
        }
        Some(EventMessageTypeEnum::DAEMON) => Step::Relist,
        _ => Step::Nothing,
    }
}

impl Follower {
    async fn run(self, notify: impl Fn(), mut stopped: tokio::sync::oneshot::Receiver<()>) {
        let mut backoff = BACKOFF_START;
        // Problems already logged, so each is logged once while it lasts.
        let mut reported: BTreeSet<String> = BTreeSet::new();
        loop {
            let error = match self.follow(&notify, &mut stopped, &mut reported).await {
                Ended::Stopped => return,
                Ended::Failed { error, listed } => {
                    if listed {
                        backoff = BACKOFF_START;
                    }
                    error
                }
            };
            self.counters.api_errors.fetch_add(1, Ordering::Relaxed);
            self.counters.connected.store(0, Ordering::Relaxed);
            // No container holds an address for sure any more.
            if self.update(|inventory| inventory.containers.clear()) {
                self.counters.containers.store(0, Ordering::Relaxed);
                notify();
            }
            match self.health.failed(&error) {
                Change::NotReached => tracing::warn!(
                    %error,
                    host = %self.health.host,
                    "Docker API not reachable: no inventory yet, the startup policy holds; retrying"
                ),
                Change::Lost => tracing::warn!(
                    %error,
                    "Docker API lost: the containers' addresses are unknown until the next complete list, the startup policy decides them; reconnecting"
                ),
                Change::Same => tracing::debug!(%error, "Docker API still unreachable"),
            }
            tokio::select! {
                _ = &mut stopped => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    /// Changes the inventory in the slot with `change`, once there is
    /// one; returns whether it changed.
    fn update(&self, change: impl FnOnce(&mut Inventory)) -> bool {
        let mut slot = self.inventory.lock().unwrap_or_else(|e| e.into_inner());
        let Some(current) = slot.as_deref() else {
            return false;
        };
        let mut next = current.clone();
        change(&mut next);
        if next == *current {
            return false;
        }
        *slot = Some(Arc::new(next));
        true
    }

    /// Puts a complete listing in the slot; returns whether the inventory
    /// changed (the first one always does).
    fn publish(&self, inventory: Inventory) -> bool {
        let count = inventory.containers.len();
        self.health.published(count);
        self.counters.connected.store(1, Ordering::Relaxed);
        self.counters
            .containers
            .store(count as u64, Ordering::Relaxed);
        let mut current = self.inventory.lock().unwrap_or_else(|e| e.into_inner());
        if current.as_deref() == Some(&inventory) {
            return false;
        }
        *current = Some(Arc::new(inventory));
        true
    }

    /// Carries out what an event asks at once (see [`Step`]); returns
    /// whether the inventory changed, and whether everything must be
    /// listed now.
    async fn apply(
        &self,
        client: &Docker,
        step: Step,
    ) -> Result<(bool, bool), bollard::errors::Error> {
        let mapped = |mapped: Option<Mapped>| match mapped {
            Some(Mapped::Pod { pod, .. }) => Some(*pod),
            _ => None,
        };
        let set = |inventory: &mut Inventory, id: String, pod: Option<Pod>| match pod {
            Some(pod) => {
                inventory.containers.insert(id, pod);
            }
            None => {
                inventory.containers.remove(&id);
            }
        };
        let changed = match step {
            Step::Nothing => false,
            Step::Relist => return Ok((false, true)),
            Step::Gone(id) => self.update(|inventory| {
                inventory.containers.remove(&id);
            }),
            Step::Inspect(id) => {
                let pod = mapped(inspect(client, &id, &self.labels).await?);
                self.update(|inventory| set(inventory, id, pod))
            }
            Step::Networks(container) => {
                // A disconnected container's address goes before anything
                // is asked of the API.
                let gone = container.as_ref().is_some_and(|id| {
                    self.update(|inventory| {
                        inventory.containers.remove(id);
                    })
                });
                let ranges = networks(client).await?;
                let pod = match &container {
                    Some(id) => mapped(inspect(client, id, &self.labels).await?),
                    None => None,
                };
                let changed = self.update(|inventory| {
                    inventory.ranges = ranges;
                    if let Some(id) = container {
                        set(inventory, id, pod);
                    }
                });
                gone || changed
            }
        };
        Ok((changed, false))
    }

    /// Connects, subscribes to the events, lists, follows each event at
    /// once as far as it tells, and relists after each settled burst of
    /// relevant events, until the stream or a request fails.
    async fn follow(
        &self,
        notify: &impl Fn(),
        stopped: &mut tokio::sync::oneshot::Receiver<()>,
        reported: &mut BTreeSet<String>,
    ) -> Ended {
        let client = tokio::select! {
            _ = &mut *stopped => return Ended::Stopped,
            client = connect(&self.socket) => match client {
                Ok(client) => client,
                Err(error) => return Ended::Failed { error: error.to_string(), listed: false },
            },
        };
        let version = client.client_version().to_string();
        tracing::debug!(version, "Docker API version agreed");
        self.health.negotiated(version);
        let filters = HashMap::from([(
            "type".to_string(),
            vec![
                "container".to_string(),
                "network".to_string(),
                "daemon".to_string(),
            ],
        )]);
        let mut events = client.events(Some(EventsOptions {
            filters: Some(filters),
            ..Default::default()
        }));
        let mut debounce = Debounce::STEPS;
        // The first listing of each connection happens at once: events
        // may have been missed while it was down.
        let mut resync_at = Instant::now();
        let mut listed = false;
        loop {
            let due = debounce.due().unwrap_or(resync_at).min(resync_at);
            tokio::select! {
                _ = &mut *stopped => return Ended::Stopped,
                _ = tokio::time::sleep_until(due.into()) => {
                    debounce.clear();
                    resync_at = Instant::now() + RESYNC;
                    let listing = match list(&client, &self.labels).await {
                        Ok(listing) => listing,
                        Err(error) => return Ended::Failed { error: error.to_string(), listed },
                    };
                    listed = true;
                    let (first, was_failing) = {
                        let state = self.health.state();
                        (state.containers.is_none(), state.failing.is_some())
                    };
                    report(&listing.problems, reported);
                    let count = listing.inventory.containers.len();
                    if self.publish(listing.inventory) {
                        tracing::info!(containers = count, "docker inventory changed");
                        notify();
                    }
                    if first {
                        tracing::info!(
                            containers = count,
                            api = %client.client_version(),
                            "Docker API reached: first inventory listed"
                        );
                    } else if was_failing {
                        tracing::info!(containers = count, "Docker API reachable again");
                    }
                }
                event = events.next() => match event {
                    Some(Ok(message)) => {
                        let action = message.action.as_deref().unwrap_or_default();
                        let verb = action.split([':', ' ']).next().unwrap_or_default();
                        if !RELEVANT_ACTIONS.contains(&verb) && message.typ != Some(EventMessageTypeEnum::DAEMON) {
                            continue;
                        }
                        tracing::debug!(action, "docker event");
                        debounce.changed(Instant::now());
                        // Before the first list of this connection, the
                        // list itself is due at once.
                        if !listed {
                            continue;
                        }
                        match self.apply(&client, step(&message)).await {
                            Ok((changed, relist)) => {
                                if changed {
                                    tracing::debug!(action, "docker inventory changed by an event");
                                    notify();
                                }
                                if relist {
                                    resync_at = Instant::now();
                                }
                            }
                            Err(error) => return Ended::Failed { error: error.to_string(), listed },
                        }
                    }
                    Some(Err(error)) => return Ended::Failed { error: error.to_string(), listed },
                    None => return Ended::Failed { error: "the event stream ended".into(), listed },
                },
            }
        }
    }
}

/// Logs each problem once while it lasts.
fn report(problems: &[String], reported: &mut BTreeSet<String>) {
    let now: BTreeSet<String> = problems.iter().cloned().collect();
    for problem in now.difference(reported) {
        tracing::warn!("{problem}");
    }
    *reported = now;
}

#[cfg(test)]
mod tests;
