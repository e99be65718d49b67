//! `tollgate controller`: publishes, for every Pod and Node selection the
//! cluster's policies use ([`crate::compile::published_selections`]), its
//! members as `AddressGroup` slices ([`crate::selection::group`]), so that
//! agents in controller mode watch only the groups their own policies
//! need, their own Pods and their own Node (`docs/design/scale.md`).
//!
//! It reads the cluster through the Kubernetes source
//! ([`crate::source::kube::KubeSource`]: the same watchers, store and
//! admission as the agent's), feeds the [`Publisher`] each Pod change as
//! it arrives ([`KubeSource::spawn_feeding_pods`]: Pods are not admitted
//! again for each) and each new snapshot's Namespaces and Nodes, and
//! computes the selections again when the policy side or the set of Pod
//! shapes changed. One replica leads, elected on the Lease
//! `kube-system/tollgate-controller` ([`lease`]); only the leader writes,
//! and only once it holds a complete snapshot: Pod changes at most once
//! per [`BATCH`], a policy change's selections as soon as they are
//! computed (a new snapshot, a finished computation and taking the Lease
//! wake the loop; none waits for the batch). On taking the lead (and
//! after a failed write) it lists the AddressGroups and adopts them, so a
//! new leader rewrites only the slices that differ. Standbys keep their
//! publisher up to date and are ready to take over. Serves `/livez`,
//! `/readyz` and `/metrics` ([`ControllerCounters`]). It never touches a
//! node's firewall.
#![allow(clippy::disallowed_methods)] // batching and the Lease are timed on the clock.

pub mod lease;

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, StreamExt};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use serde_json::json;
use tokio::sync::oneshot::{self, error::TryRecvError};

use crate::compile::{self, policy_side, PodShape};
use crate::counters;
use crate::model::{Kind, Object, Snapshot};
use crate::selection::group::{self, AddressGroupSpec};
use crate::selection::{Delta, Publisher, Selection, Write};
use crate::source::kube::{Connection, KubeCounters, KubeError, KubeSource};
use crate::telemetry::{Check, Metrics, Probes};

/// Pod changes are written at most once per batch.
pub const BATCH: Duration = Duration::from_millis(100);

/// AddressGroup writes of one phase made at once: the first publication
/// of a large cluster is thousands of slices, which one at a time took
/// minutes (~6,000 in 131 s in the simulation), and the API server
/// serves concurrent requests of one client over its connections.
const WRITES_IN_FLIGHT: usize = 16;

counters! {
    /// What the controller publishes, and whether it leads.
    pub struct ControllerCounters: one per agent {
        leader: Gauge "controller_leader" = "1 while this tollgate controller holds the Lease kube-system/tollgate-controller and publishes AddressGroups, 0 on a standby",
        selections: Gauge "controller_selections" = "Pod selections the cluster's policies use, each published as an AddressGroup of one or more slices",
        creates: Counter "controller_group_writes" { op = "create" } = "AddressGroup slice writes made by the leader, by operation (create, update, delete)",
        updates: Counter "controller_group_writes" { op = "update" } = "AddressGroup slice writes made by the leader, by operation (create, update, delete)",
        deletes: Counter "controller_group_writes" { op = "delete" } = "AddressGroup slice writes made by the leader, by operation (create, update, delete)",
        write_errors: Counter "controller_group_write_errors" = "AddressGroup writes refused or failed (each is followed by a fresh list and adoption)",
        lease_errors: Counter "controller_lease_errors" = "Failed reads or writes of the Lease (the leader stops writing until it renews again)",
    }
}

/// How the controller runs.
pub struct Options {
    pub connection: Connection,
    /// This replica's name in the Lease (the Pod's name).
    pub identity: String,
    /// The Lease's namespace and name.
    pub lease_namespace: String,
    pub lease_name: String,
    /// How long a Lease not renewed stays held (15 s).
    pub lease_duration: Duration,
    /// How often the leader renews and a standby tries (5 s).
    pub renew_every: Duration,
    /// How often Pod changes are written ([`BATCH`]).
    pub batch: Duration,
    /// Where `/livez`, `/readyz` and `/metrics` are served.
    pub listen: Option<SocketAddr>,
}

impl Options {
    /// The production timings, for `identity`.
    pub fn new(connection: Connection, identity: String) -> Options {
        Options {
            connection,
            identity,
            lease_namespace: lease::NAMESPACE.into(),
            lease_name: lease::NAME.into(),
            lease_duration: Duration::from_secs(15),
            renew_every: Duration::from_secs(5),
            batch: BATCH,
            listen: None,
        }
    }
}

/// What the probes read.
#[derive(Default)]
struct State {
    live: AtomicBool,
    leader: AtomicBool,
    /// The leader adopted the API server's slices and wrote its last
    /// batch; or a standby holds a complete snapshot and no watch fails.
    ready: AtomicBool,
}

struct ControllerProbes(Arc<State>);

impl Probes for ControllerProbes {
    fn check(&self, check: Check) -> Result<(), String> {
        match check {
            Check::Live if self.0.live.load(Ordering::SeqCst) => Ok(()),
            Check::Live => Err("controller loop stopped".into()),
            Check::Ready if self.0.ready.load(Ordering::SeqCst) => Ok(()),
            Check::Ready if self.0.leader.load(Ordering::SeqCst) => {
                Err("leader: groups not adopted, or the last batch failed".into())
            }
            Check::Ready => Err("standby: no complete snapshot, or a watch failing".into()),
        }
    }
}

/// A running controller; dropping it releases the Lease and stops.
pub struct Controller {
    state: Arc<State>,
    counters: Arc<ControllerCounters>,
    listening: Option<SocketAddr>,
    stop: Option<oneshot::Sender<bool>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Controller {
    /// Connects, starts the watchers, the election and the endpoint.
    pub fn spawn(options: Options) -> Result<Controller, ControllerError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(KubeError::Thread)?;
        let Options {
            connection,
            identity,
            lease_namespace,
            lease_name,
            lease_duration,
            renew_every,
            batch,
            listen,
        } = options;
        let (config, client) = runtime.block_on(async {
            let config = connection.config().await?;
            let client = kube::Client::try_from(config.clone()).map_err(KubeError::Client)?;
            Ok::<_, KubeError>((config, client))
        })?;
        let metrics = Arc::new(Metrics::new());
        let kube_counters = Arc::new(KubeCounters::default());
        let counters = Arc::new(ControllerCounters::default());
        metrics.counters().register_set(kube_counters.clone());
        metrics.counters().register_set(counters.clone());
        let state = Arc::new(State {
            live: AtomicBool::new(true),
            ..State::default()
        });
        let listening = match listen {
            Some(address) => Some(crate::telemetry::http::serve(
                address,
                Arc::clone(&metrics),
                Arc::new(ControllerProbes(Arc::clone(&state))),
            )?),
            None => None,
        };
        // Every Pod, and no AddressGroup: the controller is what writes them.
        let wake = Arc::new(tokio::sync::Notify::new());
        let woken = Arc::clone(&wake);
        let source = KubeSource::spawn_feeding_pods(
            Connection::Config(Box::new(config)),
            kube_counters,
            move || woken.notify_one(),
        )?;
        let elector = lease::Elector::new(
            client.clone(),
            &lease_namespace,
            &lease_name,
            &identity,
            lease_duration,
        );
        let (stop, stopped) = oneshot::channel();
        let looping = Loop {
            client,
            source,
            renew_every,
            batch,
            publisher: Publisher::new(),
            state: Arc::clone(&state),
            counters: Arc::clone(&counters),
            last: None,
            policies: None,
            span: None,
            respan: false,
            adopted: false,
            wake,
            unwritten: false,
        };
        let thread = std::thread::Builder::new()
            .name("controller".into())
            .spawn(move || runtime.block_on(looping.run(elector, stopped)))
            .map_err(KubeError::Thread)?;
        Ok(Controller {
            state,
            counters,
            listening,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Whether this replica leads.
    pub fn leader(&self) -> bool {
        self.state.leader.load(Ordering::SeqCst)
    }

    /// Whether `/readyz` answers 200.
    pub fn ready(&self) -> bool {
        self.state.ready.load(Ordering::SeqCst)
    }

    pub fn counters(&self) -> &ControllerCounters {
        &self.counters
    }

    /// Where the endpoint listens, if it does.
    pub fn listening(&self) -> Option<SocketAddr> {
        self.listening
    }

    /// Stops without releasing the Lease, as a crashed replica would: a
    /// standby takes over only once the Lease expires.
    pub fn abandon(mut self) {
        self.finish(false);
    }

    fn finish(&mut self, release: bool) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(release);
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.finish(true);
    }
}

/// Why the controller could not start.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error(transparent)]
    Kube(#[from] KubeError),
    #[error(transparent)]
    Listen(#[from] crate::telemetry::http::ListenError),
}

/// The controller's loop state.
struct Loop {
    client: kube::Client,
    source: KubeSource,
    renew_every: Duration,
    batch: Duration,
    publisher: Publisher,
    state: Arc<State>,
    counters: Arc<ControllerCounters>,
    /// The last snapshot fed to the publisher.
    last: Option<Arc<Snapshot>>,
    /// Its policy side, as the selections were last computed from (none
    /// before the first span: nothing is written until then).
    policies: Option<Snapshot>,
    /// The span being computed, off the loop (seconds at 150,000 Pods),
    /// and the policy side it is computed from. Pod changes keep being
    /// published meanwhile, with the selections of the last span.
    span: Option<(oneshot::Receiver<BTreeSet<Selection>>, Snapshot)>,
    /// The policy side or the Pod shapes changed since the span running
    /// was started: another follows it.
    respan: bool,
    /// Whether the publisher holds what the API server holds.
    adopted: bool,
    /// Notified when the source hands a new snapshot, when a span
    /// finishes and when the Lease is taken, so that none waits for the
    /// next batch's tick.
    wake: Arc<tokio::sync::Notify>,
    /// A span's selections were handed to the publisher and not written
    /// yet (this controller was a standby, or had nothing to write them
    /// over): they are written at the next wake-up that can.
    unwritten: bool,
}

/// Takes or renews the Lease every `renew_every` until `quit` says to
/// stop (`Some(release)`), then gives it up if asked to and held. Taking
/// it wakes the loop (`wake`), so that a standby's selections are written
/// at once.
async fn elect(
    mut elector: lease::Elector,
    renew_every: Duration,
    state: Arc<State>,
    counters: Arc<ControllerCounters>,
    wake: Arc<tokio::sync::Notify>,
    mut quit: tokio::sync::watch::Receiver<Option<bool>>,
) {
    loop {
        let leader = match elector.try_acquire_or_renew().await {
            Ok(leader) => leader,
            Err(error) => {
                counters.lease_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%error, "controller lease");
                false
            }
        };
        if leader != state.leader.swap(leader, Ordering::SeqCst) {
            tracing::info!(leader, "controller leadership changed");
            if leader {
                wake.notify_one();
            }
        }
        counters.leader.store(u64::from(leader), Ordering::Relaxed);
        tokio::select! {
            _ = quit.changed() => break,
            _ = tokio::time::sleep(renew_every) => {}
        }
    }
    let release = quit.borrow().unwrap_or(true);
    if release && state.leader.swap(false, Ordering::SeqCst) {
        if let Err(error) = elector.release().await {
            tracing::warn!(%error, "releasing the controller lease");
        }
    }
}

fn address_groups() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group::GROUP, group::VERSION, group::KIND),
        group::PLURAL,
    )
}

impl Loop {
    async fn run(mut self, elector: lease::Elector, mut stopped: oneshot::Receiver<bool>) {
        // The election runs beside the loop, so that a long computation
        // of the selections never delays a renewal.
        let (quit, quitting) = tokio::sync::watch::channel(None);
        let election = tokio::spawn(elect(
            elector,
            self.renew_every,
            Arc::clone(&self.state),
            Arc::clone(&self.counters),
            Arc::clone(&self.wake),
            quitting,
        ));
        let mut tick = tokio::time::interval(self.batch);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let release = loop {
            let ticked = tokio::select! {
                release = &mut stopped => break release.unwrap_or(true),
                _ = tick.tick() => true,
                () = self.wake.notified() => false,
            };
            // A policy change's selections are written as soon as they are
            // computed (or, on a standby, as soon as it leads); every other
            // write (Pod changes above all) waits for the batch's tick.
            self.unwritten |= self.take_snapshot();
            if !ticked && !self.unwritten {
                continue;
            }
            let leader = self.state.leader.load(Ordering::SeqCst);
            if !leader {
                self.adopted = false;
                let healthy = self.last.is_some() && self.source.state().synced();
                self.state.ready.store(healthy, Ordering::SeqCst);
                continue;
            }
            // Nothing is written before the selections are known: a
            // publisher without them would delete every slice adopted.
            if self.last.is_none() || self.policies.is_none() {
                self.state.ready.store(false, Ordering::SeqCst);
                continue;
            }
            if !self.adopted {
                self.state.ready.store(false, Ordering::SeqCst);
                match self.adopt().await {
                    Ok(()) => self.adopted = true,
                    Err(error) => {
                        self.counters.write_errors.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(%error, "listing AddressGroups");
                        continue;
                    }
                }
            }
            self.adopted = self.write().await;
            self.unwritten = false;
            self.state.ready.store(self.adopted, Ordering::SeqCst);
        };
        let _ = quit.send(Some(release));
        let _ = election.await;
        self.state.live.store(false, Ordering::SeqCst);
    }

    /// Feeds the Pod changes and a new snapshot's Namespaces to the
    /// publisher; starts computing the selections again when the policy
    /// side or the Pod shapes changed (one span at a time, beside the
    /// loop, which it wakes when done), and hands the publisher those of
    /// a span that finished: whether it did.
    fn take_snapshot(&mut self) -> bool {
        for delta in self.source.take_pod_deltas() {
            self.publisher.apply(delta);
        }
        let latest = self.source.latest().get().map(|a| Arc::clone(&a.snapshot));
        let new = latest.filter(|s| !self.last.as_ref().is_some_and(|l| Arc::ptr_eq(l, s)));
        if let Some(snapshot) = &new {
            // Pods come as they change, above, and not in snapshots. Of
            // the Namespaces and Nodes, those the source handed again
            // (the same object: a write that changed nothing it keeps, or
            // none) are skipped, the others handed, those gone deleted.
            let held = |o: &Object| matches!(o, Object::Namespace(_) | Object::Node(_));
            fn key(o: &Object) -> (Kind, &str) {
                (o.kind(), o.metadata().name.as_str())
            }
            let mut before: HashMap<_, &Arc<Object>> = self
                .last
                .iter()
                .flat_map(|l| l.objects.iter())
                .filter(|o| held(&o.object))
                .map(|o| (key(&o.object), &o.object))
                .collect();
            for sourced in snapshot.objects.iter().filter(|o| held(&o.object)) {
                let same = before
                    .remove(&key(&sourced.object))
                    .is_some_and(|was| Arc::ptr_eq(was, &sourced.object));
                if !same {
                    if let Some(delta) = Delta::apply(&sourced.object) {
                        self.publisher.apply(delta);
                    }
                }
            }
            for gone in before.into_values() {
                if let Some(delta) = Delta::delete(gone) {
                    self.publisher.apply(delta);
                }
            }
            self.last = Some(Arc::clone(snapshot));
        }
        // Nothing is computed before the first complete snapshot.
        let Some(last) = &self.last else {
            return false;
        };
        if self.publisher.take_shapes_changed() {
            self.respan = true;
        }
        // The policy side of a new snapshot, where it differs from the
        // one being (or last) computed.
        let mut side = new.as_ref().map(|s| policy_side(s)).filter(|side| {
            let computing = self.span.as_ref().map(|(_, side)| side);
            computing.or(self.policies.as_ref()) != Some(side)
        });
        self.respan |= side.is_some();
        let mut handed = false;
        let finished = match &mut self.span {
            Some((computing, _)) => computing.try_recv(),
            None => Err(TryRecvError::Empty),
        };
        if !matches!(finished, Err(TryRecvError::Empty)) {
            let (_, side) = self.span.take().expect("a finished span");
            match finished {
                Ok(selections) => {
                    self.counters
                        .selections
                        .store(selections.len() as u64, Ordering::Relaxed);
                    self.publisher.set_selections(selections);
                    self.policies = Some(side);
                    handed = true;
                }
                Err(_) => {
                    // The computation panicked; computed again at once.
                    tracing::error!("computing the selections in use failed");
                    self.respan = true;
                }
            }
        }
        if self.span.is_none() && (self.respan || self.policies.is_none()) {
            self.respan = false;
            let side = side.take().unwrap_or_else(|| policy_side(last));
            let shapes: Vec<PodShape> = self.publisher.shapes().cloned().collect();
            let computed = side.clone();
            let (sender, computing) = oneshot::channel();
            let done = Arc::clone(&self.wake);
            tokio::task::spawn_blocking(move || {
                let selections = compile::published_selections(&computed, &shapes);
                // Sent before the wake-up, so the loop it wakes finds it.
                let _ = sender.send(selections);
                done.notify_one();
            });
            self.span = Some((computing, side));
        }
        handed
    }

    /// Lists the AddressGroups and hands them to the publisher.
    async fn adopt(&mut self) -> Result<(), kube::Error> {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &address_groups());
        let list = api.list(&ListParams::default()).await?;
        let slices = list.items.into_iter().filter_map(|object| {
            let name = object.metadata.name.clone()?;
            let spec: AddressGroupSpec =
                serde_json::from_value(object.data.get("spec")?.clone()).ok()?;
            Some((name, spec))
        });
        self.publisher.adopt(slices);
        Ok(())
    }

    /// Makes the publisher's writes, phase by phase ([`Write::phase`]):
    /// the writes of one phase at once (at most [`WRITES_IN_FLIGHT`]),
    /// those of the next only once every one of them succeeded. Whether
    /// all succeeded.
    async fn write(&mut self) -> bool {
        let writes = self.publisher.writes();
        if writes.is_empty() {
            return true;
        }
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &address_groups());
        let counters = &self.counters;
        let mut writes = writes.into_iter().peekable();
        while let Some(first) = writes.next() {
            let phase = first.phase();
            let mut batch = vec![first];
            while let Some(write) = writes.next_if(|w| w.phase() == phase) {
                batch.push(write);
            }
            let results: Vec<(Write, Result<(), kube::Error>)> = stream::iter(batch)
                .map(|write| async {
                    let result = make(&api, &write).await;
                    (write, result)
                })
                .buffer_unordered(WRITES_IN_FLIGHT)
                .collect()
                .await;
            let mut failed = false;
            for (write, result) in results {
                match result {
                    Ok(()) => {
                        let counter = match write {
                            Write::Create { .. } => &counters.creates,
                            Write::Update { .. } => &counters.updates,
                            Write::Delete { .. } => &counters.deletes,
                        };
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(error) => {
                        counters.write_errors.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(slice = write.name(), %error, "AddressGroup write failed: listing again");
                        failed = true;
                    }
                }
            }
            if failed {
                return false;
            }
        }
        true
    }
}

/// One write to the API server.
async fn make(api: &Api<DynamicObject>, write: &Write) -> Result<(), kube::Error> {
    match write {
        Write::Create { name, key, spec } => {
            let object = serde_json::from_value(group::object(name, key, spec))
                .map_err(kube::Error::SerdeError)?;
            api.create(&PostParams::default(), &object)
                .await
                .map(|_| ())
        }
        // The spec replaced by a merge patch (its member list whole): the
        // leader is the one writer, and a custom resource's update would
        // need the resourceVersion.
        Write::Update { name, spec, .. } => api
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": spec })),
            )
            .await
            .map(|_| ()),
        Write::Delete { name } => api.delete(name, &DeleteParams::default()).await.map(|_| ()),
    }
}
