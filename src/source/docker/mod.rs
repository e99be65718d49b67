//! The Docker source: the inventory comes from the Docker Engine API (or
//! podman's Docker-compatible service) through `bollard`, the policies from
//! the policy directory ([`Directory`]). Each running container is a Pod
//! of the local Node ([`mapping`]); the two are merged into the snapshot
//! the agent enforces.
//!
//! It owns one OS thread running a single-threaded tokio runtime (the
//! packet path never runs on it). On each connection the thread agrees on
//! the API version with the server (`/version`: the lower of the server's
//! and bollard's), subscribes to `/events` (container and network
//! events), lists the running containers and inspects each, publishes the
//! inventory, and lists again [`super::DEBOUNCE`] after a burst of
//! relevant events (start, die, destroy, rename, network connect and
//! disconnect, …) settles, and every [`RESYNC`] in case an event was lost.
//!
//! Like the Kubernetes source, it is not complete until its first
//! successful list: until then [`Source::latest`] says `None` (the agent
//! keeps its `startupPolicy`), and an API that cannot be reached is
//! retried with a doubling wait up to [`BACKOFF_MAX_UNLISTED`]. Lost
//! later, the last inventory published stays enforced and the wait grows
//! up to [`BACKOFF_MAX`]. Each change of state (never reached, connected,
//! lost, back) is logged once; failures are counted and said in `status`
//! ([`DockerHealth`]).
//!
//! It must never block the agent nor write to Docker: it publishes the
//! latest inventory in a slot and calls a notifier; the agent takes the
//! merged snapshot when it reloads.
#![allow(clippy::disallowed_methods)] // the Docker source times resyncs, failures and debouncing on the clock.

pub mod mapping;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::query_parameters::{EventsOptions, ListContainersOptions};
use bollard::Docker;
use futures::StreamExt;

use crate::config::{ConfigError, DockerConfig};
use crate::counters;
use crate::model::{Object, ObjectRef, Pod, Snapshot, Sourced};
use crate::source::watch::Directory;
use crate::source::{Debounce, Source};
use crate::validate::Problem;
use mapping::{Mapped, Mapping};

counters! {
    /// How the Docker API is doing (`docker.enabled`). Registered by the
    /// agent in every mode.
    pub struct DockerCounters: one per agent {
        api_errors: Counter "docker_api_errors" = "Failed list, inspect or event-stream requests to the Docker API (docker.enabled); the last inventory stays enforced and the request is retried with backoff",
        containers: Gauge "docker_containers" = "Containers in the last Docker inventory published (docker.enabled)",
        connected: Gauge "docker_connected" = "1 while the Docker API answers (docker.enabled), 0 while it is unreachable and the last inventory stays enforced",
    }
}

/// Longest a single API request may take.
const REQUEST_TIMEOUT_SECS: u64 = 10;
/// First wait before reconnecting to an API that failed.
pub const BACKOFF_START: Duration = Duration::from_millis(500);
/// Longest wait between attempts before the first list: the agent holds
/// its `startupPolicy` meanwhile, so an engine that starts after tollgate
/// is picked up within this.
pub const BACKOFF_MAX_UNLISTED: Duration = Duration::from_secs(2);
/// Longest wait between reconnection attempts once an inventory is
/// enforced.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A full list this often even without events (an event may be lost).
pub const RESYNC: Duration = Duration::from_secs(60);

/// Event actions that can change a container's membership, labels or
/// addresses (Docker's names and podman's).
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

/// What the source knows about the API, for `status`.
#[derive(Debug)]
pub struct DockerHealth {
    host: String,
    started: Instant,
    state: Mutex<HealthState>,
}

#[derive(Debug, Default)]
struct HealthState {
    /// Containers of the last inventory; `None` before the first list.
    containers: Option<usize>,
    /// The API version agreed on the current (or last) connection.
    version: Option<String>,
    /// Since when the API fails, and the last error.
    failing: Option<(Instant, String)>,
    errors: u64,
}

/// A change of the API's state worth one log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    /// The first failure before any list.
    NotReached,
    /// The first failure after an inventory was published.
    Lost,
    /// A failure of an outage already logged.
    Same,
}

impl DockerHealth {
    fn new(host: String) -> DockerHealth {
        DockerHealth {
            host,
            started: Instant::now(),
            state: Mutex::new(HealthState::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, HealthState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn negotiated(&self, version: String) {
        self.state().version = Some(version);
    }

    fn published(&self, containers: usize) {
        let mut state = self.state();
        state.containers = Some(containers);
        state.failing = None;
    }

    /// Counts a failure; says whether it starts an outage, and which.
    fn failed(&self, error: &str) -> Change {
        let mut state = self.state();
        state.errors += 1;
        let change = match (&state.failing, state.containers) {
            (Some(_), _) => Change::Same,
            (None, None) => Change::NotReached,
            (None, Some(_)) => Change::Lost,
        };
        let since = state.failing.take().map_or_else(Instant::now, |(at, _)| at);
        state.failing = Some((since, error.to_string()));
        change
    }

    /// One line for `status`: connected with how many containers;
    /// unreachable since when, keeping the last inventory; or not reached
    /// yet, with the startup policy holding.
    pub fn describe(&self) -> String {
        let state = self.state();
        let api = state
            .version
            .as_deref()
            .map_or_else(String::new, |v| format!(" (API {v})"));
        match (&state.failing, state.containers) {
            (None, Some(containers)) => format!(
                "docker {}{api}: connected, {containers} containers",
                self.host
            ),
            (None, None) => format!(
                "docker {}: connecting for {}s, no inventory yet (the startup policy holds)",
                self.host,
                self.started.elapsed().as_secs()
            ),
            (Some((_, error)), None) => format!(
                "docker {}: NOT REACHED YET for {}s ({} failed requests), no inventory: the startup policy holds until the first list; retrying: {error}",
                self.host,
                self.started.elapsed().as_secs(),
                state.errors
            ),
            (Some((since, error)), Some(containers)) => format!(
                "docker {}{api}: UNREACHABLE for {}s ({} failed requests), keeping the last inventory of {containers} containers, retrying: {error}",
                self.host,
                since.elapsed().as_secs(),
                state.errors
            ),
        }
    }
}

/// The containers as endpoints, as last listed.
#[derive(Clone, Debug, Default, PartialEq)]
struct Inventory {
    pods: Vec<Pod>,
}

/// The last inventory listed; `None` before the first list.
type Slot = Arc<Mutex<Option<Arc<Inventory>>>>;

/// A running Docker source. Dropping it stops the thread.
pub struct DockerSource {
    policies: Directory,
    origin: PathBuf,
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
    /// first list the source is incomplete). `notify` is called after each
    /// inventory that differs from the one before (the first included); it
    /// must not block.
    pub fn spawn(
        config: &DockerConfig,
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
            origin: PathBuf::from(format!("docker {host}")),
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

/// The policy directory's snapshot with the containers added as Pods;
/// `None` until the containers were listed once. A container whose
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
        for pod in &inventory.pods {
            let object = Object::Pod(pod.clone());
            let key = object.object_ref();
            if taken.contains(&key) {
                if !self.shadowed.contains(&key) {
                    tracing::warn!("container left out: a policy file already defines {key}");
                }
                shadowed.insert(key);
                continue;
            }
            snapshot.objects.push(Sourced {
                origin: self.origin.clone(),
                object,
            });
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

/// What one listing found: the endpoints and what was left out of them.
struct Listing {
    pods: Vec<Pod>,
    problems: Vec<String>,
}

/// Lists the running containers and inspects each. A container that goes
/// away between the two is skipped; any other failure fails the listing.
async fn list(client: &Docker, labels: &Labels) -> Result<Listing, bollard::errors::Error> {
    let mapping = Mapping {
        namespace_label: &labels.namespace,
        ports_label: &labels.ports,
    };
    let summaries = client
        .list_containers(Some(ListContainersOptions {
            all: false,
            ..Default::default()
        }))
        .await?;
    let mut pods = Vec::new();
    let mut problems = Vec::new();
    for id in summaries.iter().filter_map(|s| s.id.as_deref()) {
        let container = match client.inspect_container(id, None).await {
            Ok(container) => container,
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => continue,
            Err(error) => return Err(error),
        };
        match mapping::endpoint(&container, mapping) {
            Mapped::Pod { pod, problem } => {
                if let Some(problem) = problem {
                    problems.push(format!(
                        "container {}/{}: {problem}",
                        pod.namespace(),
                        pod.metadata.name
                    ));
                }
                pods.push(*pod);
            }
            Mapped::NotAnEndpoint(why) => {
                tracing::debug!(container = %id, why, "container is not an endpoint");
            }
        }
    }
    pods.sort_by(|a, b| (a.namespace(), &a.metadata.name).cmp(&(b.namespace(), &b.metadata.name)));
    // Two containers cannot share a name on one engine; keep the first if
    // an API answers otherwise.
    pods.dedup_by(|a, b| a.namespace() == b.namespace() && a.metadata.name == b.metadata.name);
    Ok(Listing { pods, problems })
}

/// Puts `listing` in the slot; returns whether the inventory changed (the
/// first one always does).
fn publish(
    slot: &Slot,
    health: &DockerHealth,
    counters: &DockerCounters,
    listing: Listing,
) -> bool {
    let count = listing.pods.len();
    health.published(count);
    counters.connected.store(1, Ordering::Relaxed);
    counters.containers.store(count as u64, Ordering::Relaxed);
    let inventory = Inventory { pods: listing.pods };
    let mut current = slot.lock().unwrap_or_else(|e| e.into_inner());
    if current.as_deref() == Some(&inventory) {
        return false;
    }
    *current = Some(Arc::new(inventory));
    true
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
            match self.health.failed(&error) {
                Change::NotReached => tracing::warn!(
                    %error,
                    host = %self.health.host,
                    "Docker API not reachable: no inventory yet, the startup policy holds; retrying"
                ),
                Change::Lost => tracing::warn!(
                    %error,
                    "Docker API lost: the last inventory stays enforced; reconnecting"
                ),
                Change::Same => tracing::debug!(%error, "Docker API still unreachable"),
            }
            tokio::select! {
                _ = &mut stopped => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            let listed = self.health.state().containers.is_some();
            let max = if listed {
                BACKOFF_MAX
            } else {
                BACKOFF_MAX_UNLISTED
            };
            backoff = (backoff * 2).min(max);
        }
    }

    /// Connects, subscribes to the events, lists, and relists after each
    /// settled burst of relevant events, until the stream or a request
    /// fails.
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
            vec!["container".to_string(), "network".to_string()],
        )]);
        let mut events = client.events(Some(EventsOptions {
            filters: Some(filters),
            ..Default::default()
        }));
        let mut debounce = Debounce::default();
        // The first listing of each connection happens at once: events
        // may have been missed while it was down.
        let mut resync_at = Instant::now();
        let mut listed = false;
        loop {
            let due = debounce.due().unwrap_or(resync_at).min(resync_at);
            tokio::select! {
                _ = &mut *stopped => return Ended::Stopped,
                _ = tokio::time::sleep_until(due.into()) => {
                    debounce = Debounce::default();
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
                    let count = listing.pods.len();
                    if publish(&self.inventory, &self.health, &self.counters, listing) {
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
                        // `health_status: healthy`, `exec_start: sh`: the
                        // action's first word.
                        let verb = action.split([':', ' ']).next().unwrap_or_default();
                        if RELEVANT_ACTIONS.contains(&verb) {
                            tracing::debug!(action, "docker event");
                            debounce.changed(Instant::now());
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
