//! What the watchers have seen, per kind, and how it becomes a [`Snapshot`].
//! Pure: watch events in, snapshots and problems out; no I/O, no clock.
//!
//! [`Store::apply`] says when each change is due in a snapshot ([`Due`]):
//! not at all when it changed nothing tollgate keeps (a status write), at
//! once, or later for what only the agent's warnings and status read (in
//! controller mode, a Namespace none of the agent's Pods lives in). In
//! controller mode [`Store::admit`] also leaves out the namespaced
//! policies that apply to none of the agent's endpoints, and their
//! changes are due for nothing ([`Store::span_to_local_endpoints`]).
//!
//! Objects are decoded with [`Object::from_value`] as they arrive, so the
//! store keeps only the fields tollgate's model has (a Pod keeps its name,
//! namespace, labels, IPs, node, service account and container ports, not
//! its whole spec and status). An object that does not decode is kept as a
//! [`Problem`] under its key: a later valid version replaces it, a delete
//! removes it.
//!
//! Unlike the file source, which rejects a whole invalid change, the API
//! server is shared by many writers: [`Store::admit`] skips the invalid
//! objects (and those that only fail because they refer to a skipped one)
//! and admits the rest. Each skipped object, and each admitted one that
//! validation warns about (enforced only in part), becomes a [`Refusal`]
//! naming the object as the API server knows it (uid, generation,
//! resourceVersion): what `tollgate get skipped` lists and what the
//! Kubernetes Events report ([`super::events`]).
//!
//! A kind can also be *fed* ([`Store::feed`]): its changes are handed out
//! as inventory [`Delta`]s as they arrive ([`Store::take_deltas`]; a
//! relist as the difference from what was held) instead of in snapshots:
//! they make no snapshot due, and [`Store::admit`] leaves them out. The
//! controller takes Pods this way: it needs each Pod change at once, and
//! admitting 150,000 Pods again (a copy and a validation of every
//! object, ~0.65 s, on the thread that reads the watches) for each change
//! of a Namespace or policy, or under a steady churn at the debounce's
//! longest wait, held every Pod change back. Pods are never refused by
//! validation (only by decoding), and none of the checks of the other
//! objects reads them, so a fed Pod is exactly what an admitted snapshot
//! would have held.

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::compile::applied_namespaces;
use crate::model::memo::Memo;
use crate::model::{Kind, Object, ObjectRef, Snapshot, Sourced};
use crate::selection::Delta;
use crate::validate::{Checker, Problem};

/// The `origin` of every object and problem from the API server.
pub const ORIGIN: &str = "kubernetes";

/// One event of a kind's watch, as the watcher reports it. `Value`s are
/// whole objects with `apiVersion` and `kind` set.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// Added or modified.
    Apply(Value),
    Delete(Value),
    /// A (re)list starts: the objects that follow replace the kind's.
    InitStart,
    InitApply(Value),
    /// The (re)list is complete.
    InitDone,
}

/// `namespace` (empty for cluster-scoped kinds) and `name`.
type Key = (String, String);

/// An object as the API server names it, and what it decoded to (or why
/// it did not decode).
#[derive(Debug)]
struct Stored {
    /// What a refusal names. Not kept for an object of a kind no check
    /// reads on its own that decoded ([`is_unchecked`]: it is never
    /// refused or warned about), 150,000 Pods in the controller.
    id: Option<Box<Identity>>,
    /// Shared with the snapshots admitted ([`Sourced`]). The problem is
    /// boxed: it is rare, and inline it made every entry of the store
    /// (150,000 Pods in the controller) 112 bytes larger.
    object: Result<Arc<Object>, Box<Problem>>,
}

/// Which version of which object: what a [`Refusal`] names beside the
/// kind, namespace and name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    /// The spellings tollgate reads ([`Kind::spelling`]) are borrowed, not
    /// copied into every object.
    pub api_version: Cow<'static, str>,
    /// `kind:` as the API server spells it.
    pub api_kind: Cow<'static, str>,
    pub uid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    pub resource_version: String,
}

impl Identity {
    /// An object of `kind` whose uid and versions were not kept.
    fn of(kind: Kind) -> Identity {
        let (api_version, api_kind) = kind.type_meta();
        Identity {
            api_version: Cow::Borrowed(api_version),
            api_kind: Cow::Borrowed(api_kind),
            ..Identity::default()
        }
    }
}

#[derive(Debug, Default)]
struct KindStore {
    objects: BTreeMap<Key, Stored>,
    /// Objects of a list in progress.
    listing: Option<BTreeMap<Key, Stored>>,
    /// A list has completed at least once.
    synced: bool,
}

/// The objects of every watched kind.
#[derive(Debug)]
pub struct Store {
    kinds: BTreeMap<Kind, KindStore>,
    /// The kinds whose changes go out as [`Delta`]s.
    fed: HashSet<Kind>,
    /// Their deltas not taken yet.
    deltas: Vec<Delta>,
    /// Validation, kept between admissions: the objects that did not
    /// change are not checked again.
    checker: Checker,
    /// [`Store::unread`].
    unread: u64,
    /// [`ORIGIN`], shared by every object admitted.
    origin: Arc<Path>,
    /// [`Store::span_to_local_endpoints`].
    local_span: bool,
    /// What [`applied_namespaces`] answered for each spanned policy.
    reach: Memo<Reach>,
    /// Bumped by every change of a Group: a [`Reach`] that read one is
    /// stale.
    groups: u64,
}

/// When a change [`Store::apply`] took is to be published in a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    /// Nothing a snapshot holds changed (a status write, a fed kind's
    /// change, a list still in progress).
    Not,
    /// With the next snapshot, as soon as the debounce allows.
    Now,
    /// Only what the agent reports reads it (a Namespace that holds none
    /// of the Pods held, in controller mode): it goes out with the next
    /// change due now, or within [`super::DEFERRED_AT_MOST`].
    Later,
}

/// The result of [`Store::admit`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Admitted {
    /// The objects that passed decoding and validation, in a stable order.
    pub snapshot: Arc<Snapshot>,
    /// Why each skipped object was skipped.
    pub skipped: Vec<Problem>,
    /// What validation warns about in the admitted objects (a reference to
    /// a group not defined yet, an ipBlock beside a selector): they are
    /// enforced all the same.
    pub warnings: Vec<Problem>,
    /// The skipped objects, then the partly enforced ones, one entry per
    /// object, in the order of the store (kind, namespace, name).
    pub refused: Vec<Refusal>,
}

/// Whether an object is left out or enforced only in part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Reason {
    /// Invalid, or depends on an invalid object: not enforced at all.
    PolicySkipped,
    /// Enforced, but part of it is ignored or selects nothing (a group
    /// not defined yet, selectors beside an ipBlock).
    PolicyPartiallyEnforced,
}

impl Reason {
    /// The Event `reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::PolicySkipped => "PolicySkipped",
            Reason::PolicyPartiallyEnforced => "PolicyPartiallyEnforced",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One object tollgate skips or enforces only in part, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Refusal {
    /// As tollgate prints kinds.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    #[serde(flatten)]
    pub id: Identity,
    pub reason: Reason,
    /// Each problem as `field: reason` (the reason alone when it names
    /// no field).
    pub problems: Vec<String>,
}

impl Refusal {
    /// The problems in one line.
    pub fn message(&self) -> String {
        self.problems.join("; ")
    }
}

/// `field: reason`, or the reason alone.
fn describe(problem: &Problem) -> String {
    if problem.field.is_empty() {
        problem.reason.clone()
    } else {
        format!("{}: {}", problem.field, problem.reason)
    }
}

impl Store {
    /// A store for `kinds`; [`Store::synced`] waits for each of them.
    pub fn new(kinds: impl IntoIterator<Item = Kind>) -> Store {
        Store {
            kinds: kinds
                .into_iter()
                .map(|k| (k, KindStore::default()))
                .collect(),
            fed: HashSet::new(),
            deltas: Vec::new(),
            checker: Checker::new(false),
            unread: 0,
            origin: Path::new(ORIGIN).into(),
            local_span: false,
            reach: Memo::default(),
            groups: 0,
        }
    }

    /// The agent in controller mode: the Pods held are the local Node's,
    /// and the others come as the controller's groups. What a decision of
    /// the agent's reads then depends on which Namespaces hold a local
    /// endpoint (one of the Pods held, or an ExternalEntity):
    ///
    /// - a Namespace that holds none is read by no decision (its labels
    ///   select the local endpoints it holds, and the controller resolves
    ///   every peer), only by the warnings and the status, so its changes
    ///   are [`Due::Later`]. At 5,000 Nodes most Namespaces hold no Pod of
    ///   a given Node, and each change of one cost every agent an
    ///   admission and a reload of the whole policy side that applied
    ///   nothing;
    /// - a namespaced policy (an Antrea or a Kubernetes
    ///   NetworkPolicy) none of whose [`applied_namespaces`] holds one
    ///   applies to no local endpoint: [`Store::admit`] leaves it out
    ///   (kept, it is admitted with the first local endpoint of such a
    ///   Namespace, in that endpoint's snapshot), and its changes are
    ///   [`Due::Not`]. At 5,000 Nodes an agent held every policy of the
    ///   cluster and validated, reviewed and ranked them all at each of
    ///   its reloads, and an edit of any of them reloaded every agent.
    pub fn span_to_local_endpoints(&mut self) {
        self.local_span = true;
    }

    /// Feeds `kind`: from now on its changes go out as [`Delta`]s
    /// ([`Store::take_deltas`]), [`Store::apply`] no longer reports them
    /// as due for a snapshot (but for a completed list), and
    /// [`Store::admit`] leaves its objects out.
    pub fn feed(&mut self, kind: Kind) {
        self.fed.insert(kind);
    }

    /// The deltas of the fed kinds since the last call, in order.
    pub fn take_deltas(&mut self) -> Vec<Delta> {
        std::mem::take(&mut self.deltas)
    }

    /// Applies one event of `kind`'s watch. Returns whether, and when,
    /// the store changed in a way a snapshot can see.
    pub fn apply(&mut self, kind: Kind, change: Change) -> Due {
        let span = self.local_span && (kind == Kind::Namespace || is_spanned(kind));
        let key = match (&change, span) {
            (Change::Apply(value) | Change::Delete(value), true) => Some(key_of(kind, value)),
            _ => None,
        };
        // A spanned policy's change is due when the version held or the
        // new one may apply to a local endpoint.
        let before = key
            .as_ref()
            .filter(|_| is_spanned(kind))
            .is_some_and(|key| self.reaches_local(kind, key));
        if !self.changed(kind, change) {
            return Due::Not;
        }
        if kind == Kind::Group {
            self.groups += 1;
        }
        match key {
            Some((_, name)) if kind == Kind::Namespace && !self.holds_local(&name) => Due::Later,
            Some(key) if is_spanned(kind) && !before && !self.reaches_local(kind, &key) => Due::Not,
            _ => Due::Now,
        }
    }

    /// Whether Namespace `namespace` holds a local endpoint (a Pod held
    /// or an ExternalEntity): [`Store::span_to_local_endpoints`].
    fn holds_local(&self, namespace: &str) -> bool {
        holds_local(&self.kinds, namespace)
    }

    /// Whether the object of spanned `kind` held under `key` may apply to
    /// a local endpoint ([`applied_namespaces`]); false when none is held.
    fn reaches_local(&mut self, kind: Kind, key: &Key) -> bool {
        let kinds = &self.kinds;
        reaches(
            kinds,
            &mut self.reach,
            self.groups,
            kind,
            key,
            |namespace| holds_local(kinds, namespace),
        )
    }

    /// [`Store::apply`]: whether a snapshot can see the change.
    fn changed(&mut self, kind: Kind, change: Change) -> bool {
        let Some(store) = self.kinds.get_mut(&kind) else {
            return false;
        };
        let fed = self.fed.contains(&kind);
        let deltas = &mut self.deltas;
        let mut put = |old: Option<&Stored>, new: Option<&Stored>| {
            if fed {
                deltas.extend(delta(old, new));
            }
        };
        match change {
            Change::Apply(value) => {
                let (key, mut object) = decode(kind, value);
                let old = store.objects.remove(&key);
                let unread = keep_if_same(old.as_ref(), &mut object);
                self.unread += u64::from(unread);
                put(old.as_ref(), Some(&object));
                store.objects.insert(key, object);
                store.synced && !fed && !unread
            }
            Change::Delete(value) => {
                let (key, _) = decode(kind, value);
                let old = store.objects.remove(&key);
                put(old.as_ref(), None);
                old.is_some() && store.synced && !fed
            }
            Change::InitStart => {
                store.listing = Some(BTreeMap::new());
                false
            }
            Change::InitApply(value) => {
                let (key, object) = decode(kind, value);
                store
                    .listing
                    .get_or_insert_with(BTreeMap::new)
                    .insert(key, object);
                false
            }
            Change::InitDone => {
                let old =
                    std::mem::replace(&mut store.objects, store.listing.take().unwrap_or_default());
                for (key, object) in &mut store.objects {
                    keep_if_same(old.get(key), object);
                    put(old.get(key), Some(object));
                }
                for (key, object) in &old {
                    if !store.objects.contains_key(key) {
                        put(Some(object), None);
                    }
                }
                store.synced = true;
                true
            }
        }
    }

    /// Writes so far that changed nothing tollgate keeps of their object
    /// (a status write, a Node's status report, another controller's
    /// status on a policy): they made no snapshot due.
    pub fn unread(&self) -> u64 {
        self.unread
    }

    /// Every kind has been listed once.
    pub fn synced(&self) -> bool {
        self.kinds.values().all(|k| k.synced)
    }

    /// Number of objects held (decoded or not), over all kinds.
    pub fn len(&self) -> usize {
        self.kinds.values().map(|k| k.objects.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The valid objects as a snapshot, and why the others were skipped.
    /// Validation runs over the whole set; an object with a problem is
    /// removed and the rest validated again, so an object that only
    /// referred to a skipped one (a policy in a skipped Tier) is skipped
    /// too. Each round removes at least one object, so it ends.
    pub fn admit(&mut self) -> Admitted {
        let mut skipped = Vec::new();
        let mut objects = Vec::new();
        let admitted = self.kinds.iter().filter(|(k, _)| !self.fed.contains(k));
        // The Namespaces of local endpoints, for every policy at once.
        let local: Option<HashSet<&str>> = self.local_span.then(|| {
            LOCAL_ENDPOINTS
                .iter()
                .filter_map(|kind| self.kinds.get(kind))
                .flat_map(|held| held.objects.keys().map(|(namespace, _)| namespace.as_str()))
                .collect()
        });
        for (&kind, store) in admitted {
            for (key, object) in &store.objects {
                let left_out = |local: &HashSet<&str>| {
                    let holds = |namespace: &str| local.contains(namespace);
                    !reaches(&self.kinds, &mut self.reach, self.groups, kind, key, holds)
                };
                if is_spanned(kind) && local.as_ref().is_some_and(left_out) {
                    // Applies to no local endpoint: not this agent's.
                    continue;
                }
                match &object.object {
                    Ok(object) => objects.push(Sourced {
                        origin: Arc::clone(&self.origin),
                        object: Arc::clone(object),
                    }),
                    Err(problem) => skipped.push(Problem::clone(problem)),
                }
            }
        }
        if self.local_span {
            // Every spanned policy held was visited: forget the others.
            self.reach.sweep();
        }
        let mut snapshot = Snapshot { objects };
        let mut warnings = Vec::new();
        loop {
            let findings = self.checker.check(&snapshot);
            let problems = findings.errors;
            if problems.is_empty() {
                warnings = findings.warnings;
                break;
            }
            let bad: HashSet<&ObjectRef> = problems.iter().map(|p| &p.object).collect();
            let before = snapshot.objects.len();
            snapshot
                .objects
                .retain(|s| !bad.contains(&s.object.object_ref()));
            if snapshot.objects.len() == before {
                // A problem that names no object of the snapshot: nothing
                // can be singled out, so no policy is admitted at all
                // rather than an unvalidated one.
                snapshot.objects.retain(|s| !is_policy(s.object.kind()));
                skipped.extend(problems);
                break;
            }
            skipped.extend(problems);
        }
        let refused = self.refusals(&skipped, &warnings);
        Admitted {
            snapshot: Arc::new(snapshot),
            skipped,
            warnings,
            refused,
        }
    }

    /// One [`Refusal`] per object named by `skipped` (not enforced) or
    /// only by `warnings` (enforced in part). A problem naming no stored
    /// object is left out: it has nothing to be reported on.
    fn refusals(&self, skipped: &[Problem], warnings: &[Problem]) -> Vec<Refusal> {
        let mut by_object: BTreeMap<(Kind, Key), (Reason, Vec<String>)> = BTreeMap::new();
        let reasons = skipped.iter().map(|p| (Reason::PolicySkipped, p)).chain(
            warnings
                .iter()
                .map(|p| (Reason::PolicyPartiallyEnforced, p)),
        );
        for (reason, problem) in reasons {
            let Some(kind) = problem.object.kind else {
                continue;
            };
            let key = (
                problem.object.namespace.clone().unwrap_or_default(),
                problem.object.name.clone(),
            );
            let entry = by_object
                .entry((kind, key))
                .or_insert_with(|| (reason, Vec::new()));
            // Skipped wins over partly enforced; its problems alone count.
            if reason < entry.0 {
                *entry = (reason, Vec::new());
            }
            if reason == entry.0 {
                let text = describe(problem);
                if !entry.1.contains(&text) {
                    entry.1.push(text);
                }
            }
        }
        let mut refused: Vec<Refusal> = by_object
            .into_iter()
            .filter_map(|((kind, key), (reason, problems))| {
                let stored = self.kinds.get(&kind)?.objects.get(&key)?;
                Some(Refusal {
                    kind: kind.to_string(),
                    namespace: kind.is_namespaced().then(|| key.0.clone()),
                    name: key.1,
                    id: stored
                        .id
                        .as_deref()
                        .cloned()
                        .unwrap_or_else(|| Identity::of(kind)),
                    reason,
                    problems,
                })
            })
            .collect();
        refused.sort_by_key(|r| r.reason);
        refused
    }
}

/// Kinds no check reads on its own (the inventory but Namespaces): their
/// annotations are not read, and once decoded they are never refused or
/// warned about.
fn is_unchecked(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Pod | Kind::Node | Kind::Service | Kind::ServiceAccount | Kind::ExternalEntity
    )
}

fn is_policy(kind: Kind) -> bool {
    !matches!(
        kind,
        Kind::Node
            | Kind::Namespace
            | Kind::Pod
            | Kind::Service
            | Kind::ServiceAccount
            | Kind::ExternalEntity
    )
}

/// Drops what the model would keep but tollgate never reads, before the
/// object is decoded (the API server's bookkeeping, `managedFields` and
/// the rest, the model drops itself: [`crate::model::ObjectMeta`]; the
/// [`Identity`] is read from the raw object first). Annotations are only
/// read on Namespaces (audit logging of Kubernetes NetworkPolicies) and
/// policies, so inventory objects lose them. Only a Pod's and a Node's
/// `status` is read (addresses): every other kind's goes before it is
/// decoded (the models of policies and groups would drop it too).
fn slim(kind: Kind, value: &mut Value) {
    let Some(object) = value.as_object_mut() else {
        return;
    };
    if !matches!(kind, Kind::Pod | Kind::Node) {
        object.remove("status");
    }
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    if is_unchecked(kind) {
        meta.remove("annotations");
    }
}

/// Whether `new` decoded to what `old` holds (or failed to decode the same
/// way): then `new` takes `old`'s shared object, so that what was kept by
/// its identity (validation, the verdict cache's digest, the compiler's
/// comparisons) still holds for it, and the write is one nothing reads.
fn keep_if_same(old: Option<&Stored>, new: &mut Stored) -> bool {
    let same = old.is_some_and(|old| old.object == new.object);
    if let (true, Some(old)) = (same, old) {
        new.object = old.object.clone();
    }
    same
}

/// The inventory delta from `old` to `new` (absent or undecodable: no
/// object), if the decoded objects differ: a write that changed nothing
/// the model keeps (a Pod's status conditions) is none.
fn delta(old: Option<&Stored>, new: Option<&Stored>) -> Option<Delta> {
    fn object(stored: Option<&Stored>) -> Option<&Object> {
        stored.and_then(|s| s.object.as_deref().ok())
    }
    match (object(old), object(new)) {
        (old, Some(new)) if old != Some(new) => Delta::apply(new),
        (Some(old), None) => Delta::delete(old),
        _ => None,
    }
}

/// What [`applied_namespaces`] answered for a spanned policy, kept by
/// object: its walk reads every rule of the policy, which at thousands of
/// policies a reload is memory out of the cache.
struct Reach {
    /// `None`: any Namespace.
    namespaces: Option<Box<[Box<str>]>>,
    /// [`Store`]'s Group version it read Groups at, if it read any.
    groups: Option<u64>,
}

/// The kinds of an agent's own endpoints in controller mode: the Pods
/// held (its Node's) and the ExternalEntities.
const LOCAL_ENDPOINTS: [Kind; 2] = [Kind::Pod, Kind::ExternalEntity];

/// Whether Namespace `namespace` holds one of `kinds`' Pods or
/// ExternalEntities.
fn holds_local(kinds: &BTreeMap<Kind, KindStore>, namespace: &str) -> bool {
    LOCAL_ENDPOINTS.into_iter().any(|kind| {
        let Some(store) = kinds.get(&kind) else {
            return false;
        };
        let from = (namespace.to_string(), String::new());
        store
            .objects
            .range(from..)
            .next()
            .is_some_and(|((held, _), _)| held == namespace)
    })
}

/// Whether the object of spanned `kind` held in `kinds` under `key` may
/// apply to an endpoint of a Namespace `local` answers for: its
/// [`applied_namespaces`], from `memo` unless it read a Group before the
/// Group version `groups`. False when none is held; one that did not
/// decode is read as its Namespace's.
fn reaches(
    kinds: &BTreeMap<Kind, KindStore>,
    memo: &mut Memo<Reach>,
    groups: u64,
    kind: Kind,
    key: &Key,
    local: impl Fn(&str) -> bool,
) -> bool {
    let Some(stored) = kinds.get(&kind).and_then(|k| k.objects.get(key)) else {
        return false;
    };
    let Ok(object) = &stored.object else {
        return local(namespace_or_default(&key.0));
    };
    let reach = memo.visit(
        object,
        |reach| reach.groups.is_some_and(|at| at != groups),
        || {
            let read = Cell::new(false);
            let group = |namespace: &str, name: &str| {
                read.set(true);
                let stored = kinds
                    .get(&Kind::Group)?
                    .objects
                    .get(&(namespace.to_string(), name.to_string()))?;
                match stored.object.as_deref() {
                    Ok(Object::Group(group)) => Some(&**group),
                    _ => None,
                }
            };
            let namespaces = applied_namespaces(object, group)
                .map(|reached| reached.into_iter().map(Box::from).collect());
            Reach {
                namespaces,
                groups: read.get().then_some(groups),
            }
        },
    );
    match &reach.namespaces {
        None => true,
        Some(namespaces) => namespaces.iter().any(|ns| local(ns)),
    }
}

/// Whether objects of `kind` are namespaced policies, which apply to the
/// endpoints of a few Namespaces ([`applied_namespaces`]): Antrea and
/// Kubernetes NetworkPolicies.
fn is_spanned(kind: Kind) -> bool {
    matches!(kind, Kind::AntreaNetworkPolicy | Kind::K8sNetworkPolicy)
}

/// The [`Key`] an event's object is held under (as [`decode`] makes it).
fn key_of(kind: Kind, value: &Value) -> Key {
    let field = |name: &str| {
        value
            .pointer(&format!("/metadata/{name}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let namespace = if kind.is_namespaced() {
        field("namespace")
    } else {
        String::new()
    };
    (namespace, field("name"))
}

/// A namespaced object's Namespace as the compiler reads it: `default`
/// when it names none.
fn namespace_or_default(namespace: &str) -> &str {
    if namespace.is_empty() {
        "default"
    } else {
        namespace
    }
}

/// The key of a watched object and its decoded form (or why it is not one).
fn decode(kind: Kind, mut value: Value) -> (Key, Stored) {
    let meta = value.get("metadata");
    let field = |name: &str| {
        meta.and_then(|m| m.get(name))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let text = |name: &str| {
        value
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let (written_version, written_kind) = (text("apiVersion"), text("kind"));
    let (api_version, api_kind) = match Kind::spelling(&written_version, &written_kind) {
        Some((version, kind)) => (Cow::Borrowed(version), Cow::Borrowed(kind)),
        None => (Cow::Owned(written_version), Cow::Owned(written_kind)),
    };
    let id = Identity {
        api_version,
        api_kind,
        uid: field("uid"),
        generation: meta
            .and_then(|m| m.get("generation"))
            .and_then(Value::as_i64),
        resource_version: field("resourceVersion"),
    };
    let (namespace, name) = key_of(kind, &value);
    slim(kind, &mut value);
    let object = Object::from_value(value).map(Arc::new).map_err(|error| {
        Box::new(Problem {
            origin: PathBuf::from(ORIGIN),
            object: ObjectRef {
                kind: Some(kind),
                namespace: kind.is_namespaced().then(|| namespace.clone()),
                name: name.clone(),
            },
            field: String::new(),
            reason: error.to_string(),
        })
    });
    let id = (object.is_err() || !is_unchecked(kind)).then(|| Box::new(id));
    ((namespace, name), Stored { id, object })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const KINDS: [Kind; 3] = [Kind::Tier, Kind::ClusterNetworkPolicy, Kind::Pod];

    fn tier(name: &str, priority: i64) -> Value {
        json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "Tier",
               "metadata": {"name": name}, "spec": {"priority": priority}})
    }

    fn acnp(name: &str, tier: &str) -> Value {
        json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
               "metadata": {"name": name},
               "spec": {"priority": 5, "tier": tier,
                        "appliedTo": [{"podSelector": {"matchLabels": {"app": "web"}}}],
                        "ingress": [{"action": "Drop", "from": [{"ipBlock": {"cidr": "10.9.0.0/16"}}]}]}})
    }

    fn pod(name: &str, app: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
               "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x",
                        "ports": [{"containerPort": 80}], "resources": {"limits": {"cpu": "1"}}}]},
               "status": {"podIPs": [{"ip": "10.1.0.2"}], "phase": "Running"}})
    }

    fn names(admitted: &Admitted) -> Vec<String> {
        admitted
            .snapshot
            .iter()
            .map(|o| o.object_ref().to_string())
            .collect()
    }

    fn synced_store() -> Store {
        let mut store = Store::new(KINDS);
        for kind in KINDS {
            store.apply(kind, Change::InitStart);
            assert_eq!(store.apply(kind, Change::InitDone), Due::Now);
        }
        store
    }

    /// The Pod (namespace, name) of each delta, and whether it puts the
    /// Pod in place (`true`) or removes it.
    fn fed(store: &mut Store) -> Vec<(String, bool)> {
        store
            .take_deltas()
            .into_iter()
            .map(|delta| match delta {
                Delta::Pod { name, pod, .. } => (name, pod.is_some()),
                other => panic!("not a Pod: {other:?}"),
            })
            .collect()
    }

    /// A fed kind's changes go out as deltas (a relist as its difference
    /// from what was held), only when the decoded object changed, and
    /// make no snapshot due but for a completed list; other kinds are not
    /// fed. Mutation: `delta` put for every write (no comparison) → the
    /// status-only write yields a delta.
    #[test]
    fn a_fed_kind_hands_its_changes_as_deltas_and_makes_no_snapshot_due() {
        let mut store = Store::new(KINDS);
        store.feed(Kind::Pod);
        for kind in KINDS {
            store.apply(kind, Change::InitStart);
        }
        store.apply(Kind::Pod, Change::InitApply(pod("a", "web")));
        store.apply(Kind::Pod, Change::InitApply(pod("b", "web")));
        assert_eq!(
            store.apply(Kind::Pod, Change::InitDone),
            Due::Now,
            "a list is due"
        );
        assert_eq!(fed(&mut store), [("a".into(), true), ("b".into(), true)]);
        store.apply(Kind::Tier, Change::InitDone);
        store.apply(Kind::ClusterNetworkPolicy, Change::InitDone);
        assert!(store.synced());
        assert_eq!(
            names(&store.admit()),
            Vec::<String>::new(),
            "fed Pods are not admitted"
        );

        // A status write that changes nothing the model keeps: no delta.
        let mut status = pod("a", "web");
        status["status"]["phase"] = json!("Succeeded");
        status["status"]["conditions"] = json!([{"type": "Ready", "status": "False"}]);
        assert_eq!(store.apply(Kind::Pod, Change::Apply(status)), Due::Not);
        assert_eq!(fed(&mut store), []);
        // A label change, a new Pod, a delete: deltas, no snapshot due.
        assert_eq!(
            store.apply(Kind::Pod, Change::Apply(pod("a", "db"))),
            Due::Not
        );
        assert_eq!(
            store.apply(Kind::Pod, Change::Apply(pod("c", "web"))),
            Due::Not
        );
        assert_eq!(
            store.apply(Kind::Pod, Change::Delete(pod("b", "web"))),
            Due::Not
        );
        assert_eq!(
            fed(&mut store),
            [("a".into(), true), ("c".into(), true), ("b".into(), false)]
        );
        // An undecodable version removes the Pod; a delete of it is none.
        let mut bad = pod("c", "web");
        bad["status"]["podIPs"] = json!([{"ip": "not-an-address"}]);
        store.apply(Kind::Pod, Change::Apply(bad.clone()));
        store.apply(Kind::Pod, Change::Delete(bad));
        assert_eq!(fed(&mut store), [("c".into(), false)]);
        // A relist: what changed, appeared or vanished since.
        store.apply(Kind::Pod, Change::InitStart);
        store.apply(Kind::Pod, Change::InitApply(pod("a", "db")));
        store.apply(Kind::Pod, Change::InitApply(pod("d", "web")));
        store.apply(Kind::Pod, Change::Apply(pod("a", "db")));
        assert_eq!(store.apply(Kind::Pod, Change::InitDone), Due::Now);
        assert_eq!(fed(&mut store), [("d".into(), true)]);
        // Other kinds are not fed, and still make a snapshot due.
        assert_eq!(
            store.apply(Kind::Tier, Change::Apply(tier("t", 10))),
            Due::Now
        );
        assert_eq!(fed(&mut store), []);
    }

    /// A write that changes nothing tollgate keeps of its object — a Pod's
    /// status and `resourceVersion`, another controller's status on a
    /// policy — makes no snapshot due, is counted, and leaves the object
    /// shared with the last snapshot (what is kept by its identity holds);
    /// a relist keeps the unchanged objects shared too. Mutations:
    /// `keep_if_same` always false → the status writes make a snapshot
    /// due; `resourceVersion` kept in the object → the same; policy
    /// `status` kept → the policy's write is due.
    #[test]
    fn a_write_that_changes_nothing_kept_makes_no_snapshot_due() {
        let mut store = synced_store();
        let versioned = |mut object: Value, version: &str| {
            object["metadata"]["resourceVersion"] = json!(version);
            object["metadata"]["uid"] = json!("u-1");
            object
        };
        assert_eq!(
            store.apply(Kind::Pod, Change::Apply(versioned(pod("a", "web"), "1"))),
            Due::Now
        );
        assert_eq!(
            store.apply(Kind::Tier, Change::Apply(tier("t", 10))),
            Due::Now
        );
        let policy = versioned(acnp("p", "t"), "2");
        assert_eq!(
            store.apply(Kind::ClusterNetworkPolicy, Change::Apply(policy.clone())),
            Due::Now
        );
        let first = store.admit().snapshot;

        let mut status = versioned(pod("a", "web"), "3");
        status["status"]["conditions"] = json!([{"type": "Ready", "status": "False"}]);
        assert_eq!(store.apply(Kind::Pod, Change::Apply(status)), Due::Not);
        let mut realized = versioned(policy, "4");
        realized["status"] = json!({"phase": "Realized", "observedGeneration": 1,
                                    "currentNodesRealized": 3, "desiredNodesRealized": 3});
        assert_eq!(
            store.apply(Kind::ClusterNetworkPolicy, Change::Apply(realized)),
            Due::Not
        );
        assert_eq!(store.unread(), 2);
        let same = |a: &Snapshot, b: &Snapshot| {
            a.objects.len() == b.objects.len()
                && a.objects
                    .iter()
                    .zip(&b.objects)
                    .all(|(a, b)| Arc::ptr_eq(&a.object, &b.object))
        };
        assert!(
            same(&first, &store.admit().snapshot),
            "the objects stay shared"
        );

        // A relist of the same objects: due (a list completed), shared.
        store.apply(Kind::Pod, Change::InitStart);
        store.apply(
            Kind::Pod,
            Change::InitApply(versioned(pod("a", "web"), "5")),
        );
        assert_eq!(store.apply(Kind::Pod, Change::InitDone), Due::Now);
        assert!(
            same(&first, &store.admit().snapshot),
            "a relist keeps them shared"
        );

        // A change the model keeps (a label): due, a new object.
        assert_eq!(
            store.apply(Kind::Pod, Change::Apply(versioned(pod("a", "db"), "6"))),
            Due::Now
        );
        assert!(!same(&first, &store.admit().snapshot));
        assert_eq!(store.unread(), 2);
    }

    #[test]
    fn synced_only_after_every_kind_listed() {
        let mut store = Store::new(KINDS);
        store.apply(Kind::Tier, Change::InitStart);
        store.apply(Kind::Tier, Change::InitApply(tier("t", 10)));
        assert_eq!(
            store.apply(Kind::Tier, Change::Apply(tier("u", 11))),
            Due::Not
        );
        store.apply(Kind::Tier, Change::InitDone);
        assert!(!store.synced());
        for kind in [Kind::ClusterNetworkPolicy, Kind::Pod] {
            store.apply(kind, Change::InitStart);
            store.apply(kind, Change::InitDone);
        }
        assert!(store.synced());
        // The list replaced what came before it.
        assert_eq!(names(&store.admit()), ["Tier t"]);
    }

    #[test]
    fn relist_replaces_the_kind() {
        let mut store = synced_store();
        store.apply(Kind::Pod, Change::Apply(pod("a", "web")));
        store.apply(Kind::Pod, Change::Apply(pod("b", "web")));
        store.apply(Kind::Pod, Change::InitStart);
        store.apply(Kind::Pod, Change::InitApply(pod("b", "db")));
        // Until the list is done the old objects stay.
        assert_eq!(store.len(), 2);
        assert_eq!(store.apply(Kind::Pod, Change::InitDone), Due::Now);
        assert_eq!(names(&store.admit()), ["Pod default/b"]);
    }

    #[test]
    fn invalid_objects_are_skipped_and_dependents_too() {
        let mut store = synced_store();
        store.apply(Kind::Pod, Change::Apply(pod("a", "web")));
        store.apply(Kind::Tier, Change::Apply(tier("ok", 10)));
        // Priority out of the custom range: the Tier is invalid.
        store.apply(Kind::Tier, Change::Apply(tier("bad", 300)));
        store.apply(
            Kind::ClusterNetworkPolicy,
            Change::Apply(acnp("p-ok", "ok")),
        );
        store.apply(
            Kind::ClusterNetworkPolicy,
            Change::Apply(acnp("p-bad", "bad")),
        );
        // Does not decode.
        let mut broken = acnp("p-broken", "ok");
        broken["spec"]["ingress"][0]["action"] = json!("Explode");
        store.apply(Kind::ClusterNetworkPolicy, Change::Apply(broken));
        let admitted = store.admit();
        assert_eq!(
            names(&admitted),
            ["Tier ok", "ClusterNetworkPolicy p-ok", "Pod default/a"]
        );
        let skipped: Vec<String> = admitted.skipped.iter().map(|p| p.to_string()).collect();
        assert_eq!(skipped.len(), 3, "{skipped:#?}");
        assert!(skipped[0].starts_with("kubernetes: ClusterNetworkPolicy p-broken: "));
        assert!(skipped.iter().any(|s| s.contains("Tier bad")));
        assert!(skipped
            .iter()
            .any(|s| s.contains("ClusterNetworkPolicy p-bad")));
        assert!(crate::validate::validate(&admitted.snapshot).is_empty());

        // Fixing the Tier brings its policy back; deleting the broken one
        // forgets its problem.
        store.apply(Kind::Tier, Change::Apply(tier("bad", 20)));
        store.apply(
            Kind::ClusterNetworkPolicy,
            Change::Delete(acnp("p-broken", "ok")),
        );
        let admitted = store.admit();
        assert!(admitted.skipped.is_empty(), "{:?}", admitted.skipped);
        assert_eq!(admitted.snapshot.objects.len(), 5);
    }

    #[test]
    fn pods_keep_only_modelled_fields() {
        let mut store = synced_store();
        let mut big = pod("a", "web");
        big["metadata"]["managedFields"] =
            json!([{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]);
        big["metadata"]["annotations"] = json!({"note": "x".repeat(1000)});
        big["metadata"]["ownerReferences"] = json!([{"kind": "ReplicaSet", "name": "rs"}]);
        store.apply(Kind::Pod, Change::Apply(big));
        let admitted = store.admit();
        let Object::Pod(p) = &*admitted.snapshot.objects[0].object else {
            panic!("not a pod")
        };
        assert_eq!(p.metadata.labels.get("app").unwrap(), "web");
        assert_eq!(p.ips(), ["10.1.0.2".parse::<std::net::IpAddr>().unwrap()]);
        // Unknown fields (resources, phase, image) are not kept anywhere.
        let debug = format!("{p:?}");
        assert!(!debug.contains("Running") && !debug.contains("limits"));
        assert!(!debug.contains("kubelet") && !debug.contains("ReplicaSet"));
        assert!(p.metadata.annotations.is_empty());
    }

    fn entity(name: &str) -> Value {
        json!({"apiVersion": "crd.antrea.io/v1alpha2", "kind": "ExternalEntity",
               "metadata": {"name": name, "namespace": "default", "labels": {"role": "vm"}},
               "spec": {"endpoints": [{"ip": "192.168.1.1"}]}})
    }

    fn namespace(name: &str, team: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": name, "labels": {"team": team}}})
    }

    fn annp(name: &str, namespace: &str, applied_to: Value) -> Value {
        json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "NetworkPolicy",
               "metadata": {"name": name, "namespace": namespace},
               "spec": {"priority": 1, "appliedTo": applied_to,
                        "ingress": [{"action": "Drop", "from": [{"ipBlock": {"cidr": "10.9.0.0/16"}}]}]}})
    }

    fn pod_in(name: &str, namespace: &str) -> Value {
        let mut pod = pod(name, "web");
        pod["metadata"]["namespace"] = json!(namespace);
        pod
    }

    /// In controller mode a namespaced policy whose appliedTo reaches no
    /// Namespace holding a local endpoint is held but not admitted, and
    /// its changes are due for no snapshot; it is admitted with the first
    /// local Pod of its Namespace, in that Pod's snapshot. A change that
    /// moves a policy out of reach is due (the snapshot drops it). In
    /// watch mode every policy is admitted. Mutations: `admit` not leaving
    /// policies out (the first `shop` admission fails), `apply` answering
    /// `Due::Not` from the new version alone (the `moved` case fails),
    /// `reaches` ignoring `applied_namespaces` (the ServiceAccount case
    /// fails), a Group change not bumping the Group version (the `group`
    /// case fails: the policy's reach without it is kept).
    #[test]
    fn namespaced_policies_of_namespaces_without_local_endpoints_are_left_out() {
        let kinds = [
            Kind::Namespace,
            Kind::Pod,
            Kind::ExternalEntity,
            Kind::Group,
            Kind::AntreaNetworkPolicy,
            Kind::K8sNetworkPolicy,
        ];
        let listed = |store: &mut Store| {
            for kind in kinds {
                store.apply(kind, Change::InitStart);
                store.apply(kind, Change::InitDone);
            }
        };
        let mut store = Store::new(kinds);
        store.span_to_local_endpoints();
        listed(&mut store);
        assert_eq!(
            store.apply(Kind::Pod, Change::Apply(pod("a", "web"))),
            Due::Now
        );
        let pods = json!([{"podSelector": {}}]);
        let k8s = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                         "metadata": {"name": "k", "namespace": "shop"},
                         "spec": {"podSelector": {}}});
        for (kind, policy) in [
            (Kind::AntreaNetworkPolicy, annp("p", "shop", pods.clone())),
            (Kind::K8sNetworkPolicy, k8s.clone()),
        ] {
            assert_eq!(store.apply(kind, Change::Apply(policy.clone())), Due::Not);
        }
        assert_eq!(
            store.apply(
                Kind::AntreaNetworkPolicy,
                Change::Apply(annp("q", "default", pods.clone()))
            ),
            Due::Now
        );
        // Reaching `default` through a ServiceAccount of it.
        let account =
            |namespace: &str| json!([{"serviceAccount": {"name": "x", "namespace": namespace}}]);
        assert_eq!(
            store.apply(
                Kind::AntreaNetworkPolicy,
                Change::Apply(annp("r", "shop", account("default")))
            ),
            Due::Now
        );
        let admitted = names(&store.admit());
        assert!(
            admitted.contains(&"NetworkPolicy.crd.antrea.io default/q".to_string()),
            "{admitted:?}"
        );
        assert!(
            admitted.contains(&"NetworkPolicy.crd.antrea.io shop/r".to_string()),
            "{admitted:?}"
        );
        assert!(
            !admitted
                .iter()
                .any(|n| n.ends_with("shop/p") || n.ends_with("shop/k")),
            "{admitted:?}"
        );
        // Moved out of reach: due, and dropped.
        assert_eq!(
            store.apply(
                Kind::AntreaNetworkPolicy,
                Change::Apply(annp("r", "shop", account("shop")))
            ),
            Due::Now,
            "moved"
        );
        assert!(!names(&store.admit()).iter().any(|n| n.ends_with("shop/r")));
        assert_eq!(
            store.apply(
                Kind::AntreaNetworkPolicy,
                Change::Delete(annp("p", "shop", pods.clone()))
            ),
            Due::Not
        );
        store.apply(
            Kind::AntreaNetworkPolicy,
            Change::Apply(annp("p", "shop", pods.clone())),
        );
        // Reaching `default` through a Group's Service once the Group
        // comes: the policy read before it is read again.
        assert_eq!(
            store.apply(
                Kind::AntreaNetworkPolicy,
                Change::Apply(annp("g", "shop", json!([{"group": "svc"}])))
            ),
            Due::Not
        );
        let group = json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "Group",
                           "metadata": {"name": "svc", "namespace": "shop"},
                           "spec": {"serviceReference": {"name": "web", "namespace": "default"}}});
        assert_eq!(store.apply(Kind::Group, Change::Apply(group)), Due::Now);
        assert!(
            names(&store.admit()).iter().any(|n| n.ends_with("shop/g")),
            "group"
        );
        // The first local Pod of `shop`: its snapshot holds the policies.
        assert_eq!(
            store.apply(Kind::Pod, Change::Apply(pod_in("b", "shop"))),
            Due::Now
        );
        let admitted = names(&store.admit());
        for name in ["shop/p", "shop/k", "shop/r"] {
            assert!(
                admitted.iter().any(|n| n.ends_with(name)),
                "{name}: {admitted:?}"
            );
        }
        assert_eq!(
            store.apply(
                Kind::AntreaNetworkPolicy,
                Change::Apply(annp("p", "shop", account("shop")))
            ),
            Due::Now
        );

        // Watch mode: every policy is admitted, every change due.
        let mut store = Store::new(kinds);
        listed(&mut store);
        assert_eq!(
            store.apply(
                Kind::AntreaNetworkPolicy,
                Change::Apply(annp("p", "shop", pods))
            ),
            Due::Now
        );
        assert_eq!(
            store.apply(Kind::K8sNetworkPolicy, Change::Apply(k8s)),
            Due::Now
        );
        assert_eq!(names(&store.admit()).len(), 2);
    }

    /// In controller mode a Namespace none of the Pods held (nor an
    /// ExternalEntity) lives in is due later; one they live in, and every
    /// Namespace in watch mode, at once. Mutations: `apply` answering
    /// `Due::Later` for every Namespace change (the `default` cases fail),
    /// or never (the `shop` cases fail); `holds_in` ignoring
    /// ExternalEntities (the last case fails).
    #[test]
    fn a_namespace_no_pod_held_lives_in_is_due_later_in_controller_mode() {
        let kinds = [Kind::Namespace, Kind::Pod, Kind::ExternalEntity];
        let mut store = Store::new(kinds);
        store.span_to_local_endpoints();
        for kind in kinds {
            store.apply(kind, Change::InitStart);
            assert_eq!(store.apply(kind, Change::InitDone), Due::Now, "a list");
        }
        // The Pods held live in `default`.
        assert_eq!(
            store.apply(Kind::Pod, Change::Apply(pod("a", "web"))),
            Due::Now
        );
        let shop = namespace("shop", "x");
        assert_eq!(
            store.apply(Kind::Namespace, Change::Apply(shop.clone())),
            Due::Later
        );
        assert_eq!(
            store.apply(Kind::Namespace, Change::Apply(namespace("shop", "y"))),
            Due::Later
        );
        assert_eq!(
            store.apply(Kind::Namespace, Change::Apply(namespace("shop", "y"))),
            Due::Not
        );
        assert_eq!(
            store.apply(Kind::Namespace, Change::Delete(shop)),
            Due::Later
        );
        assert_eq!(
            store.apply(Kind::Namespace, Change::Apply(namespace("default", "x"))),
            Due::Now
        );
        // Held, a deferred Namespace is admitted with the next snapshot.
        store.apply(Kind::Namespace, Change::Apply(namespace("shop", "z")));
        assert!(names(&store.admit()).contains(&"Namespace shop".to_string()));
        // An ExternalEntity's Namespace is read (its selections are the
        // agent's own) even without a Pod.
        assert_eq!(
            store.apply(Kind::Pod, Change::Delete(pod("a", "web"))),
            Due::Now
        );
        assert_eq!(
            store.apply(Kind::ExternalEntity, Change::Apply(entity("vm-1"))),
            Due::Now
        );
        assert_eq!(
            store.apply(Kind::Namespace, Change::Apply(namespace("default", "y"))),
            Due::Now
        );
        store.apply(Kind::ExternalEntity, Change::Delete(entity("vm-1")));
        assert_eq!(
            store.apply(Kind::Namespace, Change::Apply(namespace("default", "z"))),
            Due::Later
        );

        // Watch mode: every Namespace change is due at once.
        let mut store = Store::new(kinds);
        for kind in kinds {
            store.apply(kind, Change::InitStart);
            store.apply(kind, Change::InitDone);
        }
        assert_eq!(
            store.apply(Kind::Namespace, Change::Apply(namespace("shop", "x"))),
            Due::Now
        );
    }

    /// What the watch of an optional kind sends when its CRD is missing: an
    /// empty list. It lets the first snapshot out and, later, drops what
    /// the kind held.
    #[test]
    fn missing_crd_reads_as_an_empty_list() {
        let mut store = Store::new([Kind::Pod, Kind::ExternalEntity]);
        store.apply(Kind::Pod, Change::InitStart);
        store.apply(Kind::Pod, Change::InitDone);
        assert!(!store.synced());
        // Not installed: the watcher's own InitStart, then the empty list.
        for change in [Change::InitStart, Change::InitStart, Change::InitDone] {
            store.apply(Kind::ExternalEntity, change);
        }
        assert!(store.synced());
        assert!(store.admit().snapshot.objects.is_empty());
        // Installed: listed and watched like any kind.
        store.apply(Kind::ExternalEntity, Change::InitStart);
        store.apply(Kind::ExternalEntity, Change::InitApply(entity("vm-1")));
        assert_eq!(
            store.apply(Kind::ExternalEntity, Change::InitDone),
            Due::Now
        );
        assert_eq!(
            store.apply(Kind::ExternalEntity, Change::Apply(entity("vm-2"))),
            Due::Now
        );
        assert_eq!(
            names(&store.admit()),
            ["ExternalEntity default/vm-1", "ExternalEntity default/vm-2"]
        );
        // Removed: the empty list drops them.
        store.apply(Kind::ExternalEntity, Change::InitStart);
        assert_eq!(
            store.apply(Kind::ExternalEntity, Change::InitDone),
            Due::Now
        );
        assert!(store.is_empty());
    }

    #[test]
    fn warnings_of_admitted_objects_are_kept() {
        let mut store = synced_store();
        let mut policy = acnp("p", "application");
        policy["spec"]["ingress"][0]["from"] = json!([{"group": "partners"}]);
        store.apply(Kind::ClusterNetworkPolicy, Change::Apply(policy));
        let admitted = store.admit();
        assert!(admitted.skipped.is_empty(), "{:?}", admitted.skipped);
        assert_eq!(names(&admitted), ["ClusterNetworkPolicy p"]);
        let warnings: Vec<String> = admitted.warnings.iter().map(|p| p.to_string()).collect();
        assert_eq!(
            warnings,
            ["kubernetes: ClusterNetworkPolicy p: spec.ingress[0].from[0].group: ClusterGroup `partners` does not exist (yet): selects nothing until it is defined"]
        );
    }

    #[test]
    fn refusals_name_each_object_once_with_its_identity() {
        let mut store = synced_store();
        let mut bad = tier("bad", 300);
        bad["metadata"]["uid"] = json!("u-1");
        bad["metadata"]["generation"] = json!(3);
        bad["metadata"]["resourceVersion"] = json!("41");
        store.apply(Kind::Tier, Change::Apply(bad));
        store.apply(
            Kind::ClusterNetworkPolicy,
            Change::Apply(acnp("p-bad", "bad")),
        );
        let mut partial = acnp("p-partial", "application");
        partial["spec"]["ingress"][0]["from"] = json!([{"group": "a"}, {"group": "b"}]);
        store.apply(Kind::ClusterNetworkPolicy, Change::Apply(partial));
        let refused = store.admit().refused;
        let summary: Vec<(String, Reason, usize)> = refused
            .iter()
            .map(|r| (format!("{} {}", r.kind, r.name), r.reason, r.problems.len()))
            .collect();
        assert_eq!(
            summary,
            [
                ("Tier bad".into(), Reason::PolicySkipped, 1),
                (
                    "ClusterNetworkPolicy p-bad".into(),
                    Reason::PolicySkipped,
                    1
                ),
                (
                    "ClusterNetworkPolicy p-partial".into(),
                    Reason::PolicyPartiallyEnforced,
                    2
                ),
            ]
        );
        let tier = &refused[0];
        assert_eq!(
            tier.id,
            Identity {
                api_version: "crd.antrea.io/v1beta1".into(),
                api_kind: "Tier".into(),
                uid: "u-1".into(),
                generation: Some(3),
                resource_version: "41".into(),
            }
        );
        assert!(
            tier.message().starts_with("spec.priority: "),
            "{}",
            tier.message()
        );
        assert!(
            refused[1].message().contains("Tier"),
            "{}",
            refused[1].message()
        );
        assert!(refused[2]
            .message()
            .contains("ClusterGroup `a` does not exist"));
    }

    /// What the store keeps per object beside the object: the spellings of
    /// its type tollgate reads are borrowed, not copied; any other is kept
    /// as written, for the refusal that names it. A problem is not kept
    /// inline. A decoded Pod (150,000 in the controller) keeps no identity
    /// at all: no check reads it, so no refusal names it; one that does
    /// not decode keeps its own, and its refusal names its uid.
    ///
    /// Mutations: `Cow::Owned` for every spelling → the first assertion
    /// fails; `Result<Arc<Object>, Problem>` → the size; every identity
    /// kept → the decoded Pod's; none kept for a Pod that does not decode
    /// → its refusal's uid (tried: each fails).
    #[test]
    fn an_object_is_kept_without_what_nothing_reads() {
        let id = |stored: &Stored| stored.id.as_deref().cloned().unwrap();
        let (_, current) = decode(Kind::Tier, tier("t", 10));
        assert!(matches!(
            id(&current).api_version,
            Cow::Borrowed("crd.antrea.io/v1beta1")
        ));
        assert!(matches!(id(&current).api_kind, Cow::Borrowed("Tier")));
        let mut old = tier("t", 10);
        old["apiVersion"] = json!("crd.antrea.io/v1alpha1");
        let (_, old) = decode(Kind::Tier, old);
        assert!(matches!(
            id(&old).api_version,
            Cow::Borrowed("crd.antrea.io/v1alpha1")
        ));
        let mut unknown = tier("t", 10);
        unknown["apiVersion"] = json!("crd.antrea.io/v9");
        let (_, unknown) = decode(Kind::Tier, unknown);
        assert!(matches!(&id(&unknown).api_version, Cow::Owned(v) if v == "crd.antrea.io/v9"));
        assert!(unknown.object.is_err());
        assert!(
            std::mem::size_of::<Stored>()
                < std::mem::size_of::<Identity>() + std::mem::size_of::<Problem>()
        );

        let mut written = pod("a", "web");
        written["metadata"]["uid"] = json!("u-a");
        let (_, decoded) = decode(Kind::Pod, written.clone());
        assert!(decoded.object.is_ok());
        assert!(decoded.id.is_none());
        let mut broken = written;
        broken["spec"]["nodeName"] = json!(7);
        let mut store = synced_store();
        store.apply(Kind::Pod, Change::Apply(broken));
        let admitted = store.admit();
        assert_eq!(admitted.refused.len(), 1, "{:?}", admitted.refused);
        assert_eq!(admitted.refused[0].id.uid, "u-a");
        assert_eq!(admitted.refused[0].id.api_kind, "Pod");
    }

    #[test]
    fn unwatched_kind_is_ignored() {
        let mut store = Store::new([Kind::Tier]);
        assert_eq!(
            store.apply(Kind::Pod, Change::Apply(pod("a", "web"))),
            Due::Not
        );
        assert!(store.is_empty());
    }
}
