//! The Docker source: the inventory comes from the Docker Engine API (or
//! podman's Docker-compatible service) through `bollard`, the policies from
//! the policy directory ([`Directory`]). Each running container is a Pod
//! of the local Node ([`mapping`]); the two are merged into the snapshot
//! the agent enforces.
//!
//! It owns one OS thread running a single-threaded tokio runtime (the
//! packet path never runs on it). The thread subscribes to `/events`
//! (container and network events), lists the running containers and
//! inspects each, publishes the inventory, and lists again [`super::DEBOUNCE`]
//! after a burst of relevant events (start, die, destroy, rename, network
//! connect and disconnect, …) settles, and every [`RESYNC`] in case an
//! event was lost. An API that cannot be reached when the agent starts is
//! an error; lost later, the last inventory published stays enforced, the
//! failure is counted and said in `status` ([`DockerHealth`]), and the
//! thread reconnects with a doubling wait up to [`BACKOFF_MAX`].
//!
//! It must never block the agent nor write to Docker: it publishes the
//! latest inventory in a slot and calls a notifier; the agent takes the
//! merged snapshot when it reloads.

pub mod mapping;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::query_parameters::{EventsOptions, ListContainersOptions};
use bollard::Docker;
use futures::StreamExt;

use crate::config::{ConfigError, DockerConfig};
use crate::model::{Object, ObjectRef, Pod, Snapshot, Sourced};
use crate::source::watch::Directory;
use crate::source::{Debounce, Source};
use crate::telemetry::Metrics;
use crate::validate::Problem;
use mapping::{Mapped, Mapping};

/// The API version tollgate speaks: Docker 20.10's, which current Docker
/// engines and podman's service (4.x) both serve.
const API_VERSION: bollard::ClientVersion = bollard::ClientVersion {
    major_version: 1,
    minor_version: 41,
};
/// Longest a single API request may take.
const REQUEST_TIMEOUT_SECS: u64 = 10;
/// First wait before reconnecting to an API that failed.
pub const BACKOFF_START: Duration = Duration::from_millis(500);
/// Longest wait between reconnection attempts.
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

/// Why the Docker source could not start.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("docker.enabled needs --policies DIR: policies come from the directory, the inventory from Docker")]
    NoPolicies,
    #[error(
        "Docker API at {host} cannot be reached (is the daemon running and the socket mounted?)"
    )]
    Unreachable {
        host: String,
        #[source]
        source: bollard::errors::Error,
    },
    #[error("starting the docker thread")]
    Thread(#[source] std::io::Error),
}

/// What the source knows about the API, for `status`.
#[derive(Debug)]
pub struct DockerHealth {
    host: String,
    state: Mutex<HealthState>,
}

#[derive(Debug)]
struct HealthState {
    containers: usize,
    /// Since when the API fails, and the last error.
    failing: Option<(Instant, String)>,
    errors: u64,
}

impl DockerHealth {
    fn new(host: String) -> DockerHealth {
        DockerHealth {
            host,
            state: Mutex::new(HealthState {
                containers: 0,
                failing: None,
                errors: 0,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, HealthState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn published(&self, containers: usize) {
        let mut state = self.state();
        state.containers = containers;
        state.failing = None;
    }

    /// Returns whether this failure starts an outage.
    fn failed(&self, error: &str) -> bool {
        let mut state = self.state();
        state.errors += 1;
        let new = state.failing.is_none();
        let since = state.failing.take().map_or_else(Instant::now, |(at, _)| at);
        state.failing = Some((since, error.to_string()));
        new
    }

    /// One line for `status`: connected with how many containers, or
    /// unreachable since when, keeping the last inventory.
    pub fn describe(&self) -> String {
        let state = self.state();
        match &state.failing {
            None => format!(
                "docker {}: connected, {} containers",
                self.host, state.containers
            ),
            Some((since, error)) => format!(
                "docker {}: UNREACHABLE for {}s ({} failed requests), keeping the last inventory of {} containers, retrying: {error}",
                self.host,
                since.elapsed().as_secs(),
                state.errors,
                state.containers
            ),
        }
    }
}

/// The containers as endpoints, as last listed.
#[derive(Clone, Debug, Default, PartialEq)]
struct Inventory {
    pods: Vec<Pod>,
}

type Slot = Arc<Mutex<Arc<Inventory>>>;

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
    /// Connects to the API, lists the containers once (an error when the
    /// API cannot be reached), then follows its events on a thread of its
    /// own. `notify` is called after each inventory that differs from the
    /// one before; it must not block.
    pub fn spawn(
        config: &DockerConfig,
        policies: Directory,
        metrics: Arc<Metrics>,
        notify: impl Fn() + Send + 'static,
    ) -> Result<DockerSource, DockerError> {
        let socket = config.socket()?;
        let host = config.host.clone();
        let unreachable = |source| DockerError::Unreachable {
            host: host.clone(),
            source,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(DockerError::Thread)?;
        let client = Docker::connect_with_unix(
            &socket.to_string_lossy(),
            REQUEST_TIMEOUT_SECS,
            &API_VERSION,
        )
        .map_err(unreachable)?;
        let labels = Labels::from(config);
        let first = runtime
            .block_on(list(&client, &labels))
            .map_err(unreachable)?;
        let health = Arc::new(DockerHealth::new(host.clone()));
        let inventory: Slot = Arc::default();
        publish(&inventory, &health, &metrics, first);
        tracing::info!(
            host = %host,
            containers = inventory.lock().unwrap_or_else(|e| e.into_inner()).pods.len(),
            "docker source started"
        );
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let follower = Follower {
            client,
            labels,
            inventory: Arc::clone(&inventory),
            health: Arc::clone(&health),
            metrics,
        };
        let thread = std::thread::Builder::new()
            .name("docker".into())
            .spawn(move || runtime.block_on(follower.run(notify, stopped)))
            .map_err(DockerError::Thread)?;
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

/// The policy directory's snapshot with the containers added as Pods. A
/// container whose `namespace/name` a policy file already uses as a Pod
/// is left out (logged once). Policy problems refuse the whole reload, as
/// with the directory alone.
impl Source for DockerSource {
    fn latest(&mut self) -> Result<Option<Arc<Snapshot>>, Vec<Problem>> {
        let Some(policies) = self.policies.latest()? else {
            return Ok(None);
        };
        let inventory = Arc::clone(&self.inventory.lock().unwrap_or_else(|e| e.into_inner()));
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

/// Puts `listing` in the slot; returns whether the inventory changed.
fn publish(slot: &Slot, health: &DockerHealth, metrics: &Metrics, listing: Listing) -> bool {
    let count = listing.pods.len();
    health.published(count);
    metrics.docker_inventory(count);
    let inventory = Inventory { pods: listing.pods };
    let mut current = slot.lock().unwrap_or_else(|e| e.into_inner());
    if **current == inventory {
        return false;
    }
    *current = Arc::new(inventory);
    true
}

/// The thread's side: follows the API's events and republishes.
struct Follower {
    client: Docker,
    labels: Labels,
    inventory: Slot,
    health: Arc<DockerHealth>,
    metrics: Arc<Metrics>,
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
            self.metrics.docker_api_error();
            if self.health.failed(&error) {
                tracing::warn!(%error, "Docker API lost: the last inventory stays enforced; reconnecting");
            } else {
                tracing::debug!(%error, "Docker API still unreachable");
            }
            tokio::select! {
                _ = &mut stopped => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    /// Subscribes to the events, lists, and relists after each settled
    /// burst of relevant events, until the stream or a listing fails.
    async fn follow(
        &self,
        notify: &impl Fn(),
        stopped: &mut tokio::sync::oneshot::Receiver<()>,
        reported: &mut BTreeSet<String>,
    ) -> Ended {
        let filters = HashMap::from([(
            "type".to_string(),
            vec!["container".to_string(), "network".to_string()],
        )]);
        let mut events = self.client.events(Some(EventsOptions {
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
                    let listing = match list(&self.client, &self.labels).await {
                        Ok(listing) => listing,
                        Err(error) => return Ended::Failed { error: error.to_string(), listed },
                    };
                    listed = true;
                    let was_failing = self.health.state().failing.is_some();
                    report(&listing.problems, reported);
                    let count = listing.pods.len();
                    if publish(&self.inventory, &self.health, &self.metrics, listing) {
                        tracing::info!(containers = count, "docker inventory changed");
                        notify();
                    }
                    if was_failing {
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
mod tests {
    use super::*;

    #[test]
    fn an_api_missing_at_start_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let policies = Directory::start(dir.path(), Default::default(), || {}).unwrap();
        let config = DockerConfig {
            enabled: true,
            host: format!("unix://{}/docker.sock", dir.path().display()),
            ..DockerConfig::default()
        };
        let Err(error) = DockerSource::spawn(&config, policies, Arc::default(), || {}) else {
            panic!("started without an API");
        };
        let message = error.to_string();
        assert!(message.contains("cannot be reached"), "{message}");
        assert!(message.contains(&config.host), "{message}");
    }

    #[test]
    fn health_says_connected_or_unreachable_keeping_the_inventory() {
        let health = DockerHealth::new("unix:///run/docker.sock".into());
        health.published(3);
        assert_eq!(
            health.describe(),
            "docker unix:///run/docker.sock: connected, 3 containers"
        );
        assert!(health.failed("connection refused"), "an outage starts");
        assert!(!health.failed("connection refused"), "the same outage");
        let down = health.describe();
        assert!(down.contains("UNREACHABLE"), "{down}");
        assert!(down.contains("2 failed requests"), "{down}");
        assert!(down.contains("last inventory of 3 containers"), "{down}");
        health.published(2);
        assert!(health.describe().ends_with("connected, 2 containers"));
    }
}
