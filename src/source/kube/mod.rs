//! The Kubernetes source: watches the API server with kube-rs watchers and
//! hands debounced, admitted [`crate::model::Snapshot`]s to the
//! agent, the way the file source's directory watch does.
//!
//! It owns one OS thread running a single-threaded tokio runtime (the
//! packet path never runs on it) with one watcher per kind: the Antrea
//! kinds (`crd.antrea.io/v1beta1` Tier, ClusterNetworkPolicy,
//! NetworkPolicy, ClusterGroup, Group), `networking.k8s.io/v1`
//! NetworkPolicy and the inventory (Pods, Namespaces, Nodes, Services,
//! ServiceAccounts), and the [`OPTIONAL_RESOURCES`] (ExternalEntity, the
//! network-policy-api kinds) whose
//! CRD a cluster may not have: a kind answering `404` counts as listed and
//! empty, is logged once and looked for again with a doubling wait
//! ([`optional`]); once its CRD appears it is watched, and its objects are
//! dropped if the CRD goes away. The watchers list, then watch; after any
//! list or watch error (a `410 Gone` included) a kind's watcher is started
//! afresh and lists again, with backoff while the API server is unreachable.
//! From a failure (other than `410 Gone`) until that kind's list completes
//! the source counts as out of step ([`SourceState::synced`],
//! `tollgate_kubernetes_synced` 0). Objects are decoded and validated by the
//! same code as the file source ([`store`]); invalid ones are logged and
//! skipped. No snapshot is published before every kind has been listed
//! once. Skipped and partly enforced objects are kept for `tollgate get
//! skipped` and reported on the object as Kubernetes Events ([`events`]);
//! skipped objects, failed requests and Events are counted in
//! [`KubeCounters`].
//! Besides those Events the agent only reads.
//!
//! It must never block the agent: it publishes the latest admitted
//! snapshot in a slot and calls a notifier; the agent takes the snapshot
//! when it reloads.
#![allow(clippy::disallowed_methods)] // the Kubernetes source times absences and debouncing on the clock.

pub mod events;
pub mod optional;
pub mod peers;
pub mod store;

use std::collections::HashSet;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::stream::{self, Stream, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::watcher::{self, DefaultBackoff, Event};
use serde_json::Value;
use std::time::{Duration, Instant};

use crate::counters;
use crate::model::{Kind, Snapshot};
use crate::selection::Delta;
use crate::source::{Debounce, Source};
use crate::validate::Problem;
use events::Events;
use optional::Presence;
pub use peers::PeerGroups;
pub use store::{Admitted, Change, Due, Identity, Reason, Refusal, Store, ORIGIN};

counters! {
    /// How the Kubernetes source is doing. Registered by the agent in
    /// every mode, so `kubernetes_synced` reads 0 in standalone mode.
    pub struct KubeCounters: one per agent {
        enabled: Gauge "kubernetes_enabled" = "1 when the agent reads its policies and inventory from the Kubernetes API server (--kubernetes), 0 otherwise: kubernetes_synced means something only then",
        synced: Gauge "kubernetes_synced" = "1 while the Kubernetes source is in step with the API server (a complete snapshot published, no list or watch failing since), 0 before, while a watch fails until its kind is listed again, and in standalone mode",
        skipped: Gauge "kubernetes_objects_skipped" = "Objects from the API server left out of the last snapshot because they are invalid",
        watch_errors: Counter "kubernetes_watch_errors" = "Failed list or watch requests to the API server (each is retried)",
        writes_unread: Counter "kubernetes_writes_unread" = "Watch events that changed nothing tollgate keeps of their object (a status write, a Node's status report, another controller's status on a policy): no snapshot was made for them",
        events_created: Counter "kubernetes_events" { result = "created" } = "Kubernetes Events on skipped or partly enforced objects, by result (created, updated: count raised, failed: refused by the API server, dropped: queue full)",
        events_updated: Counter "kubernetes_events" { result = "updated" } = "Kubernetes Events on skipped or partly enforced objects, by result (created, updated: count raised, failed: refused by the API server, dropped: queue full)",
        events_failed: Counter "kubernetes_events" { result = "failed" } = "Kubernetes Events on skipped or partly enforced objects, by result (created, updated: count raised, failed: refused by the API server, dropped: queue full)",
        events_dropped: Counter "kubernetes_events" { result = "dropped" } = "Kubernetes Events on skipped or partly enforced objects, by result (created, updated: count raised, failed: refused by the API server, dropped: queue full)",
        controller_stale: Gauge "controller_stale" = "kubernetes.peers: controller: 1 while the tollgate controller's Lease (kube-system/tollgate-controller) is absent or not renewed within its duration (read every 30 s); the groups held stay enforced. 0 in watch mode",
        groups_waiting: Gauge "controller_groups_waiting" = "kubernetes.peers: controller: AddressGroups the rules use that are not complete (slice 0, or a slice it lists, not received); while above 0 the ruleset in force stays",
    }
}

/// Why the Kubernetes source could not start. The causes are kept as
/// sources (not repeated in the message): `{:#}` prints the chain.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("kubeconfig {}", path.display())]
    Kubeconfig {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error("in-cluster configuration (not in a Pod? use --kubeconfig)")]
    InCluster(#[from] kube::config::InClusterError),
    #[error("kubernetes client")]
    Client(#[from] kube::Error),
    #[error("starting the kubernetes thread")]
    Thread(#[source] std::io::Error),
}

/// Where the API server is and how to authenticate.
pub enum Connection {
    InCluster,
    Kubeconfig(PathBuf),
    /// A ready configuration (tests point it at a fake server).
    Config(Box<kube::Config>),
}

impl Connection {
    pub(crate) async fn config(self) -> Result<kube::Config, KubeError> {
        match self {
            Connection::InCluster => Ok(kube::Config::incluster()?),
            Connection::Kubeconfig(path) => {
                let error = |source| KubeError::Kubeconfig {
                    path: path.clone(),
                    source,
                };
                let kubeconfig = kube::config::Kubeconfig::read_from(&path).map_err(error)?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                    .await
                    .map_err(error)
            }
            Connection::Config(config) => Ok(*config),
        }
    }
}

/// What a watched kind is called on the API server.
#[derive(Clone, Copy, Debug)]
pub struct Resource {
    pub kind: Kind,
    pub group: &'static str,
    pub version: &'static str,
    /// `kind:` as the API server spells it.
    pub type_name: &'static str,
    pub plural: &'static str,
}

impl Resource {
    pub const fn new(
        kind: Kind,
        group: &'static str,
        version: &'static str,
        type_name: &'static str,
        plural: &'static str,
    ) -> Resource {
        Resource {
            kind,
            group,
            version,
            type_name,
            plural,
        }
    }

    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    fn api_resource(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(self.group, self.version, self.type_name),
            self.plural,
        )
    }
}

/// Longest a change that only the agent's warnings and status read
/// ([`Due::Later`]: a Namespace holding none of an agent's Pods, in
/// controller mode) waits for a snapshot, when no other change carries it
/// sooner.
pub const DEFERRED_AT_MOST: Duration = Duration::from_secs(10);

/// The kinds tollgate always watches: the first snapshot waits for each
/// to be listed, and a `404` for one is an error (retried).
pub const RESOURCES: [Resource; 11] = [
    Resource {
        kind: Kind::Tier,
        group: "crd.antrea.io",
        version: "v1beta1",
        type_name: "Tier",
        plural: "tiers",
    },
    Resource {
        kind: Kind::ClusterNetworkPolicy,
        group: "crd.antrea.io",
        version: "v1beta1",
        type_name: "ClusterNetworkPolicy",
        plural: "clusternetworkpolicies",
    },
    Resource {
        kind: Kind::AntreaNetworkPolicy,
        group: "crd.antrea.io",
        version: "v1beta1",
        type_name: "NetworkPolicy",
        plural: "networkpolicies",
    },
    Resource {
        kind: Kind::ClusterGroup,
        group: "crd.antrea.io",
        version: "v1beta1",
        type_name: "ClusterGroup",
        plural: "clustergroups",
    },
    Resource {
        kind: Kind::Group,
        group: "crd.antrea.io",
        version: "v1beta1",
        type_name: "Group",
        plural: "groups",
    },
    Resource {
        kind: Kind::K8sNetworkPolicy,
        group: "networking.k8s.io",
        version: "v1",
        type_name: "NetworkPolicy",
        plural: "networkpolicies",
    },
    Resource {
        kind: Kind::Pod,
        group: "",
        version: "v1",
        type_name: "Pod",
        plural: "pods",
    },
    Resource {
        kind: Kind::Namespace,
        group: "",
        version: "v1",
        type_name: "Namespace",
        plural: "namespaces",
    },
    Resource {
        kind: Kind::Node,
        group: "",
        version: "v1",
        type_name: "Node",
        plural: "nodes",
    },
    Resource {
        kind: Kind::Service,
        group: "",
        version: "v1",
        type_name: "Service",
        plural: "services",
    },
    Resource {
        kind: Kind::ServiceAccount,
        group: "",
        version: "v1",
        type_name: "ServiceAccount",
        plural: "serviceaccounts",
    },
];

/// The kinds whose CRD a cluster may not have installed, one line each: a
/// missing one counts as listed and empty until its CRD appears (see
/// [`optional`]). The RBAC rules in `docker/base/rbac.yaml` must grant `list`
/// and `watch` on each (`tests/manifests.rs` checks it).
#[rustfmt::skip]
pub const OPTIONAL_RESOURCES: &[Resource] = &[
    Resource::new(Kind::ExternalEntity, "crd.antrea.io", "v1alpha2", "ExternalEntity", "externalentities"),
    Resource::new(Kind::AdminNetworkPolicy, "policy.networking.k8s.io", "v1alpha1", "AdminNetworkPolicy", "adminnetworkpolicies"),
    Resource::new(Kind::BaselineAdminNetworkPolicy, "policy.networking.k8s.io", "v1alpha1", "BaselineAdminNetworkPolicy", "baselineadminnetworkpolicies"),
    Resource::new(Kind::NpClusterNetworkPolicy, "policy.networking.k8s.io", "v1alpha2", "ClusterNetworkPolicy", "clusternetworkpolicies"),
];

/// Every kind tollgate watches, the optional ones last.
pub fn watched() -> impl Iterator<Item = &'static Resource> {
    RESOURCES.iter().chain(OPTIONAL_RESOURCES)
}

/// The latest admitted snapshot, shared with the agent.
#[derive(Clone, Default)]
pub struct Latest(Arc<Mutex<Option<Arc<Admitted>>>>);

impl Latest {
    /// The newest snapshot published, if any was.
    pub fn get(&self) -> Option<Arc<Admitted>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, admitted: Admitted) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(admitted));
    }
}

/// What the agent's status shows of the source: whether it is in step
/// with the API server, and what the latest snapshot refused.
#[derive(Clone, Default)]
pub struct SourceState {
    latest: Latest,
    synced: Arc<AtomicBool>,
    peers: Option<PeerGroups>,
    /// The controller's source: Pod changes as they arrive, not yet
    /// taken ([`KubeSource::take_pod_deltas`]).
    pod_deltas: Option<Arc<Mutex<Vec<Delta>>>>,
}

impl SourceState {
    /// A complete snapshot was published and no list or watch has failed
    /// since (a kind that failed is in step again once listed again).
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }

    /// In controller mode, the groups shared with the agent.
    pub fn peers(&self) -> Option<&PeerGroups> {
        self.peers.as_ref()
    }

    /// The objects the latest snapshot skipped or enforces only in part.
    pub fn refused(&self) -> Vec<Refusal> {
        self.latest
            .get()
            .map(|admitted| admitted.refused.clone())
            .unwrap_or_default()
    }
}

/// A running Kubernetes source. Dropping it stops the watchers and joins
/// the thread.
pub struct KubeSource {
    state: SourceState,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl KubeSource {
    /// Connects (without contacting the API server yet) and starts the
    /// watchers. `notify` is called after each published snapshot (and,
    /// with `peers`, each change of the groups held); it must not block.
    /// With `node`, refused objects are reported as Kubernetes Events from
    /// that node. With `peers` (controller mode) only the Pods of its Node
    /// are watched, and the AddressGroups it needs and the controller's
    /// Lease are followed ([`peers`]).
    pub fn spawn(
        connection: Connection,
        node: Option<String>,
        peers: Option<PeerGroups>,
        counters: Arc<KubeCounters>,
        notify: impl Fn() + Send + Sync + 'static,
    ) -> Result<KubeSource, KubeError> {
        let state = SourceState {
            peers,
            ..SourceState::default()
        };
        KubeSource::start(connection, node, state, counters, Arc::new(notify))
    }

    /// The controller's source: every kind, the Pods as [`Delta`]s as
    /// they arrive ([`KubeSource::take_pod_deltas`]) and not in its
    /// snapshots (the `store` module says why). `notify` is called after
    /// each new snapshot; it must not block.
    pub fn spawn_feeding_pods(
        connection: Connection,
        counters: Arc<KubeCounters>,
        notify: impl Fn() + Send + Sync + 'static,
    ) -> Result<KubeSource, KubeError> {
        let state = SourceState {
            pod_deltas: Some(Arc::default()),
            ..SourceState::default()
        };
        KubeSource::start(connection, None, state, counters, Arc::new(notify))
    }

    /// The Pod changes since the last call, in order (none unless spawned
    /// with [`KubeSource::spawn_feeding_pods`]).
    pub fn take_pod_deltas(&self) -> Vec<Delta> {
        self.state
            .pod_deltas
            .as_ref()
            .map(|d| std::mem::take(&mut *d.lock().unwrap_or_else(|e| e.into_inner())))
            .unwrap_or_default()
    }

    fn start(
        connection: Connection,
        node: Option<String>,
        state: SourceState,
        counters: Arc<KubeCounters>,
        notify: Arc<dyn Fn() + Send + Sync>,
    ) -> Result<KubeSource, KubeError> {
        let peers = state.peers.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(KubeError::Thread)?;
        let client = runtime.block_on(async {
            let config = connection.config().await?;
            Ok::<_, KubeError>(kube::Client::try_from(config)?)
        })?;
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let published = state.clone();
        let thread = std::thread::Builder::new()
            .name("kube".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let events =
                        node.map(|node| Events::spawn(client.clone(), node, Arc::clone(&counters)));
                    if let Some(peers) = &peers {
                        tokio::spawn(peers::follow(
                            client.clone(),
                            peers.clone(),
                            Arc::clone(&notify),
                        ));
                        tokio::spawn(peers::follow_lease(client.clone(), peers.clone()));
                    }
                    let own = peers.as_ref().map(|p| p.node().to_string());
                    let notify = move || notify();
                    watch_all(client, published, events, own, &counters, notify, stopped).await;
                });
            })
            .map_err(KubeError::Thread)?;
        Ok(KubeSource {
            state,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    pub fn latest(&self) -> Latest {
        self.state.latest.clone()
    }

    /// Sync state and refusals, for the agent's status.
    pub fn state(&self) -> SourceState {
        self.state.clone()
    }
}

/// Complete once every kind was listed once: no snapshot is published
/// before.
impl Source for KubeSource {
    fn latest(&mut self) -> Result<Option<Arc<Snapshot>>, Vec<Problem>> {
        Ok(self
            .state
            .latest
            .get()
            .map(|admitted| Arc::clone(&admitted.snapshot)))
    }
}

impl Drop for KubeSource {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

type KindEvents = Pin<Box<dyn Stream<Item = KindEvent> + Send>>;

/// One kind's watch events. After an error the watcher is dropped and,
/// after a backoff (kube's: 800 ms doubling to 30 s, reset after 120 s
/// without errors), a new one lists the kind again: kube's watcher resumes
/// a failed watch without a list and without an event, so nothing would
/// tell when the kind is in step again; a completed list does.
fn kind_events(client: &kube::Client, resource: Resource, config: watcher::Config) -> KindEvents {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource.api_resource());
    let api_version = resource.api_version();
    type Watch = Pin<Box<dyn Stream<Item = watcher::Result<Event<DynamicObject>>> + Send>>;
    let start = (None::<Watch>, DefaultBackoff::default(), false);
    stream::unfold(start, move |(watch, mut backoff, failed)| {
        let api = api.clone();
        let config = config.clone();
        async move {
            if failed {
                if let Some(wait) = backoff.next() {
                    tokio::time::sleep(wait).await;
                }
            }
            let mut watch = watch.unwrap_or_else(|| watcher::watcher(api, config).boxed());
            let event = watch.next().await?;
            let failed = event.is_err();
            let next = (!failed).then_some(watch);
            Some((event, (next, backoff, failed)))
        }
    })
    .map(move |event| {
        let change = event.map(|event| {
            let value = |object: DynamicObject| typed(object, &api_version, resource.type_name);
            match event {
                Event::Apply(o) => Change::Apply(value(o)),
                Event::Delete(o) => Change::Delete(value(o)),
                Event::Init => Change::InitStart,
                Event::InitApply(o) => Change::InitApply(value(o)),
                Event::InitDone => Change::InitDone,
            }
        });
        (resource, change)
    })
    .boxed()
}

/// An optional kind's events: its watcher runs while the kind is served;
/// a `404` stops it and reads as an empty list (dropping what the kind
/// held), and the watcher starts again when [`Presence`] says to look.
/// The task ends with the runtime, or when the receiving side is gone.
fn optional_kind_events(client: &kube::Client, resource: Resource) -> KindEvents {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(follow_optional(client.clone(), resource, tx));
    stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
    .boxed()
}

type KindEvent = (Resource, Result<Change, watcher::Error>);

/// Runs `resource`'s watcher while it is served and sends its events on;
/// says once when its CRD goes missing (sending an empty list) and once
/// when it appears.
async fn follow_optional(
    client: kube::Client,
    resource: Resource,
    tx: tokio::sync::mpsc::Sender<KindEvent>,
) {
    let mut presence = Presence::default();
    loop {
        let mut events = kind_events(&client, resource, watcher::Config::default());
        loop {
            match events.next().await {
                None => return,
                Some((_, Err(error))) if is_not_found(&error) => break,
                Some(event) => {
                    if matches!(event.1, Ok(Change::InitDone)) && presence.answered() {
                        tracing::info!(
                            "CRD {}.{} installed: {} watched",
                            resource.plural,
                            resource.group,
                            resource.kind
                        );
                    }
                    if tx.send(event).await.is_err() {
                        return;
                    }
                }
            }
        }
        drop(events);
        let found = presence.not_found(Instant::now());
        if found.newly {
            tracing::info!(
                "CRD {}.{} not installed: {} skipped until it appears",
                resource.plural,
                resource.group,
                resource.kind
            );
            for change in [Change::InitStart, Change::InitDone] {
                if tx.send((resource, Ok(change))).await.is_err() {
                    return;
                }
            }
        }
        tokio::time::sleep_until(found.recheck_at.into()).await;
    }
}

/// The API server does not serve the resource (`404`): its CRD is not
/// installed.
fn is_not_found(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status))
        | watcher::Error::WatchError(status) => status.code == 404,
        _ => false,
    }
}

/// A `410 Gone`: the API server compacted the history; a relist follows
/// and nothing is out of step meanwhile (it is not counted as a failure).
fn is_gone(error: &watcher::Error) -> bool {
    matches!(error, watcher::Error::WatchError(status) if status.code == 410)
}

/// The object as JSON with `apiVersion` and `kind` set: list items come
/// without them. Its fields are moved, not copied (only `metadata` is
/// written out again): each list item and event is a tree of its own,
/// which writing the whole object out copied for nothing.
fn typed(object: DynamicObject, api_version: &str, kind: &str) -> Value {
    let DynamicObject { metadata, data, .. } = object;
    let mut map = match data {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    let metadata = serde_json::to_value(metadata).unwrap_or(Value::Null);
    map.insert("metadata".into(), metadata);
    map.insert("apiVersion".into(), Value::String(api_version.into()));
    map.insert("kind".into(), Value::String(kind.into()));
    Value::Object(map)
}

async fn watch_all(
    client: kube::Client,
    state: SourceState,
    mut events_out: Option<Events>,
    own: Option<String>,
    counters: &KubeCounters,
    notify: impl Fn(),
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    // In controller mode (`own`: this Node's name) the Pods and the Node
    // watched are this Node's only; the others' addresses come in the
    // controller's groups.
    let required = RESOURCES.iter().map(|r| {
        let config = match (&own, r.kind) {
            (Some(node), Kind::Pod) => {
                watcher::Config::default().fields(&format!("spec.nodeName={node}"))
            }
            (Some(node), Kind::Node) => {
                watcher::Config::default().fields(&format!("metadata.name={node}"))
            }
            _ => watcher::Config::default(),
        };
        kind_events(&client, *r, config)
    });
    let optional = OPTIONAL_RESOURCES
        .iter()
        .map(|r| optional_kind_events(&client, *r));
    let mut events = stream::select_all(required.chain(optional));
    let mut store = Store::new(watched().map(|r| r.kind));
    if state.pod_deltas.is_some() {
        store.feed(Kind::Pod);
    }
    if own.is_some() {
        store.span_to_local_endpoints();
    }
    let mut reported: HashSet<String> = HashSet::new();
    // When the pending changes are published.
    let mut debounce = match state.pod_deltas {
        Some(_) => Debounce::POLICY_SIDE,
        None => Debounce::OBJECTS,
    };
    let mut failing: HashSet<Kind> = HashSet::new();
    // When refusals whose Event reports were dropped are reported again.
    let mut report_again: Option<tokio::time::Instant> = None;
    tracing::info!(
        kinds = RESOURCES.len() + OPTIONAL_RESOURCES.len(),
        "kubernetes watch starting"
    );
    loop {
        let publish_at = debounce.due().map(tokio::time::Instant::from_std);
        tokio::select! {
            _ = &mut stopped => return,
            _ = async { tokio::time::sleep_until(report_again.unwrap_or_else(tokio::time::Instant::now)).await },
                if report_again.is_some() => {
                report_again = None;
                if let (Some(events), Some(admitted)) = (&mut events_out, state.latest.get()) {
                    if events.report(&admitted.refused) {
                        report_again = Some(tokio::time::Instant::now() + events::RETRY);
                    }
                }
            }
            _ = async { tokio::time::sleep_until(publish_at.unwrap_or_else(tokio::time::Instant::now)).await },
                if publish_at.is_some() => {
                debounce.clear();
                let admitted = store.admit();
                report(&admitted, &mut reported);
                if let Some(events) = &mut events_out {
                    if events.report(&admitted.refused) {
                        report_again = Some(tokio::time::Instant::now() + events::RETRY);
                    }
                }
                counters
                    .skipped
                    .store(admitted.skipped.len() as u64, Ordering::Relaxed);
                tracing::info!(
                    objects = admitted.snapshot.objects.len(),
                    skipped = admitted.skipped.len(),
                    "kubernetes snapshot"
                );
                state.latest.set(admitted);
                let synced = failing.is_empty();
                state.synced.store(synced, Ordering::SeqCst);
                counters.synced.store(u64::from(synced), Ordering::Relaxed);
                notify();
            }
            event = events.next() => {
                let Some((resource, change)) = event else { return };
                let due = match change {
                    Ok(change) => {
                        if matches!(change, Change::InitDone) && failing.remove(&resource.kind) {
                            tracing::info!(kind = %resource.kind, "kubernetes watch recovered: listed again");
                        }
                        // The first snapshot goes out once every kind is
                        // listed: the last InitDone counts as a change.
                        let unread = store.unread();
                        let due = store.apply(resource.kind, change);
                        counters
                            .writes_unread
                            .fetch_add(store.unread() - unread, Ordering::Relaxed);
                        if let Some(fed) = &state.pod_deltas {
                            let deltas = store.take_deltas();
                            if !deltas.is_empty() {
                                fed.lock().unwrap_or_else(|e| e.into_inner()).extend(deltas);
                            }
                        }
                        due
                    }
                    Err(error) => {
                        counters.watch_errors.fetch_add(1, Ordering::Relaxed);
                        // The kind is listed again after a backoff
                        // (`kind_events`); until then it may miss changes.
                        if is_gone(&error) {
                            tracing::debug!(kind = %resource.kind, "kubernetes watch expired (410 Gone), listing again");
                        } else if failing.insert(resource.kind) {
                            state.synced.store(false, Ordering::SeqCst);
                            counters.synced.store(0, Ordering::Relaxed);
                            tracing::warn!(kind = %resource.kind, %error, "kubernetes watch failed, retrying");
                        } else {
                            tracing::debug!(kind = %resource.kind, %error, "kubernetes watch failed again");
                        }
                        Due::Not
                    }
                };
                if store.synced() {
                    match due {
                        Due::Not => {}
                        Due::Now => debounce.changed(Instant::now()),
                        Due::Later => debounce.changed_within(Instant::now(), DEFERRED_AT_MOST),
                    }
                }
            }
        }
    }
}

/// Logs each skipped object, and each validation warning on an admitted
/// one, once while it lasts: a snapshot follows every Pod change, and the
/// same lines each time would drown the new ones.
fn report(admitted: &Admitted, reported: &mut HashSet<String>) {
    let skipped = admitted.skipped.iter().map(|p| (true, p.to_string()));
    let warnings = admitted.warnings.iter().map(|p| (false, p.to_string()));
    let mut now = HashSet::new();
    for (error, problem) in skipped.chain(warnings) {
        if !reported.contains(&problem) {
            if error {
                tracing::error!("kubernetes object skipped: {problem}");
            } else {
                tracing::warn!("policy warning: {problem}");
            }
        }
        now.insert(problem);
    }
    *reported = now;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `typed` gives what writing the whole object out gives (its fields
    /// and metadata) with apiVersion and kind set, without the copy.
    #[test]
    fn typed_is_the_object_written_out_with_its_type() {
        let item = serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"},
                         "resourceVersion": "7", "uid": "u-1", "generation": 3},
            "spec": {"podSelector": {"matchLabels": {"app": "web"}},
                     "ingress": [{"ports": [{"port": 80}]}]},
            "status": {"phase": "x"}
        });
        let object: DynamicObject = serde_json::from_value(item).unwrap();
        let mut whole = serde_json::to_value(object.clone()).unwrap();
        whole["apiVersion"] = "networking.k8s.io/v1".into();
        whole["kind"] = "NetworkPolicy".into();
        assert_eq!(
            typed(object, "networking.k8s.io/v1", "NetworkPolicy"),
            whole
        );
    }
}
