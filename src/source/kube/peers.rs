//! Controller mode's part of the Kubernetes source
//! (`kubernetes.peers: controller`, `docs/design/scale.md`): the
//! AddressGroup slices of the selections the agent's rules need, watched
//! with one label-selector watch (`tollgate.io/selection in (k1,k2,…)`)
//! that starts again, listing the new set, whenever the compiler's set of
//! needed keys changes; and the controller's Lease
//! (`kube-system/tollgate-controller`), read with one GET every 30 s ±
//! 20 % to tell whether a controller is renewing it.
//!
//! [`PeerGroups`] is what the agent and the source share: the slices
//! received (a completed list replaces them whole, later events patch
//! them; while a new list runs the old ones stay), the keys needed, how
//! many the compiler waits for, and whether the controller is stale. A
//! slice whose name, label and selection do not agree is skipped. It only
//! reads; it never decides what a missing group means (the compiler
//! waits for it, [`crate::compile::Incremental::waiting`]).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{Api, ApiResource, GroupVersionKind};
use kube::core::{NotUsed, Object};
use kube::runtime::watcher::{self, DefaultBackoff, Event};
use serde::{Deserialize, Deserializer};

use crate::selection::group::{self, AddressGroupSpec, Slices};

use super::KubeCounters;

/// The controller's Lease, in `kube-system`.
pub const LEASE_NAMESPACE: &str = "kube-system";
pub const LEASE_NAME: &str = "tollgate-controller";
/// How often the Lease is read (± 20 %).
const LEASE_EVERY: Duration = Duration::from_secs(30);

/// What the agent and the source share in controller mode.
#[derive(Clone)]
pub struct PeerGroups {
    inner: Arc<Inner>,
}

struct Inner {
    node: String,
    counters: Arc<KubeCounters>,
    held: Mutex<Arc<Slices>>,
    needed: tokio::sync::watch::Sender<BTreeSet<String>>,
    waiting: AtomicUsize,
    stale: AtomicBool,
}

impl PeerGroups {
    /// The shared state of the agent of Node `node`.
    pub fn new(node: String, counters: Arc<KubeCounters>) -> PeerGroups {
        PeerGroups {
            inner: Arc::new(Inner {
                node,
                counters,
                held: Mutex::new(Arc::new(Slices::new())),
                needed: tokio::sync::watch::Sender::new(BTreeSet::new()),
                waiting: AtomicUsize::new(0),
                // Stale until a read of the Lease says otherwise.
                stale: AtomicBool::new(true),
            }),
        }
    }

    /// The Node whose Pods are watched.
    pub fn node(&self) -> &str {
        &self.inner.node
    }

    /// The slices received.
    pub fn held(&self) -> Arc<Slices> {
        Arc::clone(&self.inner.held.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn edit(&self, change: impl FnOnce(&mut Slices) -> bool) -> bool {
        let mut held = self.inner.held.lock().unwrap_or_else(|e| e.into_inner());
        change(Arc::make_mut(&mut held))
    }

    /// The compiler's state after a compile: the keys its rules use
    /// (the watch follows them) and how many of them it waits for.
    pub fn compiled(&self, needed: BTreeSet<String>, waiting: usize) {
        self.inner.needed.send_if_modified(|keys| {
            let changed = *keys != needed;
            *keys = needed;
            changed
        });
        self.inner.waiting.store(waiting, Ordering::Relaxed);
        self.inner
            .counters
            .groups_waiting
            .store(waiting as u64, Ordering::Relaxed);
    }

    /// Groups the compiler waits for (no ruleset is built meanwhile).
    pub fn waiting(&self) -> usize {
        self.inner.waiting.load(Ordering::Relaxed)
    }

    /// Keys the rules use.
    pub fn needed(&self) -> usize {
        self.inner.needed.borrow().len()
    }

    /// Whether the controller's Lease was absent or not renewed in time
    /// at the last read.
    pub fn stale(&self) -> bool {
        self.inner.stale.load(Ordering::Relaxed)
    }

    fn set_stale(&self, stale: bool) {
        if self.inner.stale.swap(stale, Ordering::Relaxed) != stale {
            match stale {
                true => tracing::warn!("tollgate controller stale: Lease {LEASE_NAMESPACE}/{LEASE_NAME} absent or not renewed; the groups held stay enforced"),
                false => tracing::info!("tollgate controller renewing its Lease"),
            }
        }
        self.inner
            .counters
            .controller_stale
            .store(u64::from(stale), Ordering::Relaxed);
    }
}

/// An AddressGroup as the agent reads it: decoded straight into its
/// spec, object by object. Read as untyped JSON trees, a list page of
/// slices (up to 500 of 100 members) was ~120 MiB of small allocations
/// at 150,000 Pods, and the heap kept most of it.
type AddressGroup = Object<Received, NotUsed>;

/// An AddressGroup's spec as received: decoded on its own, so a slice
/// that does not decode is skipped (with a warning) instead of failing
/// the list or the watch it came in, which would stop every group's
/// updates.
#[derive(Clone, Debug)]
struct Received(Result<AddressGroupSpec, String>);

impl<'de> Deserialize<'de> for Received {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // One object's tree at a time, dropped as soon as it is read.
        let value = serde_json::Value::deserialize(deserializer)?;
        Ok(Received(
            serde_json::from_value(value).map_err(|error| error.to_string()),
        ))
    }
}

/// Files a received AddressGroup under its name, if its spec was read
/// and its name, label and selection agree (`<key>-<slice>`,
/// `tollgate.io/selection=<key>`, key of the selection).
fn slice_of(object: AddressGroup) -> Option<(String, AddressGroupSpec)> {
    let name = object.metadata.name?;
    let spec = object
        .spec
        .0
        .map_err(|error| tracing::warn!(%name, %error, "AddressGroup skipped: unreadable spec"))
        .ok()?;
    let key = group::key_of(&spec.selection);
    let label = object
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(group::SELECTION_LABEL));
    if label != Some(&key) || name != group::slice_name(&key, spec.slice) {
        tracing::warn!(%name, "AddressGroup skipped: its name, label and selection do not agree");
        return None;
    }
    Some((name, spec))
}

/// Follows the AddressGroups of the keys needed: one label-selector
/// watch, started again (a new list) when the set changes, and after an
/// error with kube's backoff. Calls `notify` after each change of the
/// slices held.
pub(super) async fn follow(
    client: kube::Client,
    groups: PeerGroups,
    notify: Arc<dyn Fn() + Send + Sync>,
) {
    // The AddressGroup custom resource (cluster-scoped).
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group::GROUP, group::VERSION, group::KIND),
        group::PLURAL,
    );
    let api: Api<AddressGroup> = Api::all_with(client, &resource);
    let mut needed = groups.inner.needed.subscribe();
    let mut backoff = DefaultBackoff::default();
    let mut failed = false;
    loop {
        if failed {
            if let Some(wait) = backoff.next() {
                tokio::time::sleep(wait).await;
            }
        }
        failed = false;
        let keys: Vec<String> = needed.borrow_and_update().iter().cloned().collect();
        if keys.is_empty() {
            if groups.edit(|held| std::mem::take(held) != Slices::new()) {
                notify();
            }
            if needed.changed().await.is_err() {
                return;
            }
            continue;
        }
        let selector = format!("{} in ({})", group::SELECTION_LABEL, keys.join(","));
        tracing::info!(groups = keys.len(), "watching AddressGroups");
        let config = watcher::Config::default().labels(&selector);
        let mut watch = watcher::watcher(api.clone(), config).boxed();
        // A list in progress: the slices held stay until it completes.
        let mut listing: Option<Slices> = None;
        loop {
            tokio::select! {
                changed = needed.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    break;
                }
                event = watch.next() => {
                    let changed = match event {
                        None => break,
                        Some(Ok(Event::Init)) => {
                            listing = Some(Slices::new());
                            false
                        }
                        Some(Ok(Event::InitApply(object))) => {
                            if let (Some(list), Some((name, spec))) = (&mut listing, slice_of(object)) {
                                list.insert(name, Arc::new(spec));
                            }
                            false
                        }
                        Some(Ok(Event::InitDone)) => match listing.take() {
                            Some(list) => groups.edit(|held| std::mem::replace(held, list) != *held),
                            None => false,
                        },
                        Some(Ok(Event::Apply(object))) => match slice_of(object) {
                            Some((name, spec)) => groups.edit(|held| {
                                if held.get(&name).is_some_and(|h| **h == spec) {
                                    return false;
                                }
                                held.insert(name, Arc::new(spec));
                                true
                            }),
                            None => false,
                        },
                        Some(Ok(Event::Delete(object))) => {
                            let name = object.metadata.name.clone().unwrap_or_default();
                            groups.edit(|held| held.remove(&name).is_some())
                        }
                        Some(Err(error)) => {
                            groups.inner.counters.watch_errors.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(%error, "AddressGroup watch failed, listing again");
                            failed = true;
                            break;
                        }
                    };
                    if changed {
                        notify();
                    }
                }
            }
        }
    }
}

/// Whether a Lease read at `now` is stale: absent, held by nobody (a
/// leader that stopped gave it up), never renewed, or not renewed within
/// its duration.
pub fn lease_stale(spec: Option<&LeaseSpec>, now: k8s_openapi::jiff::Timestamp) -> bool {
    let Some(spec) = spec else {
        return true;
    };
    if spec
        .holder_identity
        .as_deref()
        .unwrap_or_default()
        .is_empty()
    {
        return true;
    }
    match (&spec.renew_time, spec.lease_duration_seconds) {
        (Some(renewed), Some(duration)) => {
            renewed.0.as_millisecond() + i64::from(duration) * 1000 < now.as_millisecond()
        }
        _ => true,
    }
}

/// Reads the controller's Lease at once and then every 30 s ± 20 %.
pub(super) async fn follow_lease(client: kube::Client, groups: PeerGroups) {
    let api: Api<Lease> = Api::namespaced(client, LEASE_NAMESPACE);
    loop {
        let stale = match api.get_opt(LEASE_NAME).await {
            Ok(lease) => lease_stale(
                lease.as_ref().and_then(|l| l.spec.as_ref()),
                k8s_openapi::jiff::Timestamp::now(),
            ),
            Err(error) => {
                groups
                    .inner
                    .counters
                    .watch_errors
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%error, "reading the controller's Lease failed");
                true
            }
        };
        groups.set_stale(stale);
        let jitter = f64::from(getrandom::u32().unwrap_or(0)) / f64::from(u32::MAX);
        tokio::time::sleep(LEASE_EVERY.mul_f64(0.8 + 0.4 * jitter)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use k8s_openapi::jiff::Timestamp;

    #[test]
    fn a_lease_is_stale_when_absent_or_not_renewed_within_its_duration() {
        let at = |s: i64| Timestamp::from_second(s).unwrap();
        let lease = |renewed: Option<i64>, duration: Option<i32>| LeaseSpec {
            holder_identity: Some("tollgate-controller-0".into()),
            renew_time: renewed.map(|s| MicroTime(at(s))),
            lease_duration_seconds: duration,
            ..LeaseSpec::default()
        };
        assert!(lease_stale(None, at(1000)));
        assert!(lease_stale(Some(&lease(None, Some(15))), at(1000)));
        assert!(!lease_stale(Some(&lease(Some(990), Some(15))), at(1000)));
        assert!(!lease_stale(Some(&lease(Some(985), Some(15))), at(1000)));
        assert!(lease_stale(Some(&lease(Some(984), Some(15))), at(1000)));
        // Given up (a leader's graceful stop): stale at once.
        let released = LeaseSpec {
            holder_identity: None,
            ..lease(Some(990), Some(15))
        };
        assert!(lease_stale(Some(&released), at(1000)));
    }
}
