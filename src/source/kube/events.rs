//! Kubernetes Events on the objects this node skips or enforces only in
//! part (`events.k8s.io/v1`, reason `PolicySkipped` or
//! `PolicyPartiallyEnforced`, `reportingController: tollgate`,
//! `reportingInstance` and source host the node name), so that
//! `kubectl describe` shows the policy's author what tollgate made of it.
//!
//! The [`Ledger`] (pure) decides what to say: one Event per object, reason
//! and message, its `series.count` raised when a new version of the object
//! is still refused for the same reason, a new Event when the reason
//! changes, nothing while an object stays as it was, so a snapshot per Pod
//! change costs the API server nothing. [`Events`] hands the reports to one
//! task through a bounded queue: the watch never waits on the Event API; a
//! full queue drops the report (counted, and reported again [`RETRY`]
//! later); a failed request is counted and logged, not retried (an
//! agent without RBAC for Events would retry forever): the next new
//! version of the object reports again. It must never block or fail the watch, and never write anything
//! but Events.
#![allow(clippy::disallowed_methods)] // Event timestamps are wall-clock times.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{EventSource, ObjectReference};
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::mpsc;

use super::store::{Reason, Refusal};
use super::KubeCounters;

/// `reportingController` and source component of every Event.
pub const CONTROLLER: &str = "tollgate";
/// Reports waiting for the Event API at most; more are dropped.
pub const QUEUE: usize = 256;
/// How long after a report was dropped the refusals are reported again.
pub const RETRY: std::time::Duration = std::time::Duration::from_secs(1);
/// The API server refuses a longer `note`.
const MAX_NOTE: usize = 1024;
/// … a longer `reportingInstance`.
const MAX_INSTANCE: usize = 128;
/// … a longer object name; the Event's is the object's, a dot and 16 hex
/// digits at most.
const MAX_NAME_PREFIX: usize = 253 - 17;
/// Where Events on cluster-scoped objects go (as the kubelet's on Nodes).
const CLUSTER_EVENTS_NAMESPACE: &str = "default";

/// Which object an Event is about.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Subject {
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    pub uid: String,
}

impl Subject {
    fn of(refusal: &Refusal) -> Subject {
        Subject {
            kind: refusal.kind.clone(),
            namespace: refusal.namespace.clone(),
            name: refusal.name.clone(),
            uid: refusal.id.uid.clone(),
        }
    }
}

/// What to tell the API server.
#[derive(Clone, Debug, PartialEq)]
pub enum Report {
    /// Refused for a reason not reported yet: a new Event.
    New(Refusal),
    /// A new version of the object is refused for the same reason: the
    /// Event's count goes up.
    Again(Refusal),
    /// No longer refused: the next refusal starts a new Event.
    Resolved(Subject),
}

/// What was reported last for each refused object.
#[derive(Debug, Default)]
pub struct Ledger {
    reported: BTreeMap<Subject, Reported>,
}

#[derive(Debug)]
struct Reported {
    reason: Reason,
    message: String,
    resource_version: String,
}

impl Ledger {
    /// The reports that bring the API server from what was reported to
    /// `refused` (the objects refused in the latest snapshot).
    pub fn update(&mut self, refused: &[Refusal]) -> Vec<Report> {
        let mut reports = Vec::new();
        let mut now = BTreeMap::new();
        for refusal in refused {
            let subject = Subject::of(refusal);
            let message = refusal.message();
            let report = match self.reported.remove(&subject) {
                Some(last) if last.reason == refusal.reason && last.message == message => {
                    (last.resource_version != refusal.id.resource_version)
                        .then(|| Report::Again(refusal.clone()))
                }
                _ => Some(Report::New(refusal.clone())),
            };
            reports.extend(report);
            now.insert(
                subject,
                Reported {
                    reason: refusal.reason,
                    message,
                    resource_version: refusal.id.resource_version.clone(),
                },
            );
        }
        let gone = std::mem::replace(&mut self.reported, now);
        reports.extend(gone.into_keys().map(Report::Resolved));
        reports
    }

    /// Forgets what was reported on `subject`: its report never reached
    /// the API server, so the next update reports it anew.
    pub fn forget(&mut self, subject: &Subject) {
        self.reported.remove(subject);
    }
}

/// The Event publisher of one node: a ledger and the queue to the task
/// that talks to the API server.
pub struct Events {
    ledger: Ledger,
    queue: mpsc::Sender<Report>,
    counters: Arc<KubeCounters>,
}

impl Events {
    /// Starts the publishing task on the current tokio runtime; it ends
    /// when the `Events` is dropped.
    pub fn spawn(client: kube::Client, node: String, counters: Arc<KubeCounters>) -> Events {
        let (queue, reports) = mpsc::channel(QUEUE);
        tokio::spawn(publish(client, node, reports, Arc::clone(&counters)));
        Events {
            ledger: Ledger::default(),
            queue,
            counters,
        }
    }

    /// Reports what changed since the last snapshot's refusals. Never
    /// waits: a report that does not fit in the queue is dropped and
    /// forgotten. Returns whether any was: the caller reports again later
    /// (see [`RETRY`]).
    pub fn report(&mut self, refused: &[Refusal]) -> bool {
        let mut dropped = false;
        for report in self.ledger.update(refused) {
            if let Err(error) = self.queue.try_send(report) {
                self.counters.events_dropped.fetch_add(1, Ordering::Relaxed);
                dropped = true;
                if let Report::New(r) | Report::Again(r) = error.into_inner() {
                    self.ledger.forget(&Subject::of(&r));
                }
            }
        }
        dropped
    }
}

/// The Event last created for a subject, to count repeats on.
struct Posted {
    namespace: String,
    name: String,
    count: i32,
}

async fn publish(
    client: kube::Client,
    node: String,
    mut reports: mpsc::Receiver<Report>,
    counters: Arc<KubeCounters>,
) {
    let mut posted: HashMap<Subject, Posted> = HashMap::new();
    let mut failing = false;
    while let Some(report) = reports.recv().await {
        let (refusal, again) = match report {
            Report::Resolved(subject) => {
                posted.remove(&subject);
                continue;
            }
            Report::New(refusal) => (refusal, false),
            Report::Again(refusal) => (refusal, true),
        };
        let subject = Subject::of(&refusal);
        let result = match posted.get_mut(&subject).filter(|_| again) {
            Some(last) => match count_again(&client, last).await {
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    // Expired (the API server keeps Events an hour): start
                    // a new one.
                    create(&client, &node, &refusal).await
                }
                other => other.map(|()| None),
            },
            None => create(&client, &node, &refusal).await,
        };
        match result {
            Ok(created) => {
                if let Some(created) = created {
                    posted.insert(subject, created);
                    counters.events_created.fetch_add(1, Ordering::Relaxed);
                } else {
                    counters.events_updated.fetch_add(1, Ordering::Relaxed);
                }
                if std::mem::take(&mut failing) {
                    tracing::info!("kubernetes events: the API server takes them again");
                }
            }
            Err(error) => {
                counters.events_failed.fetch_add(1, Ordering::Relaxed);
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(%error, object = %refusal.name, "kubernetes event not written (RBAC: create/patch on events.events.k8s.io); the policy's problem is still logged");
                } else {
                    tracing::debug!(%error, object = %refusal.name, "kubernetes event not written");
                }
            }
        }
    }
}

async fn create(
    client: &kube::Client,
    node: &str,
    refusal: &Refusal,
) -> Result<Option<Posted>, kube::Error> {
    let event = event(node, refusal, Timestamp::now());
    let namespace = event.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
    let created = api.create(&PostParams::default(), &event).await?;
    Ok(Some(Posted {
        namespace,
        name: created
            .metadata
            .name
            .or(event.metadata.name)
            .unwrap_or_default(),
        count: 1,
    }))
}

/// Raises the Event's `series.count` (2 on the first repeat, as the
/// Events API wants).
async fn count_again(client: &kube::Client, last: &mut Posted) -> Result<(), kube::Error> {
    let count = last.count.saturating_add(1);
    let series = EventSeries {
        count,
        last_observed_time: MicroTime(Timestamp::now()),
    };
    let patch = serde_json::json!({ "series": series });
    let api: Api<Event> = Api::namespaced(client.clone(), &last.namespace);
    api.patch(&last.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    last.count = count;
    Ok(())
}

/// The Event telling `refusal` on `node` at `now`.
pub fn event(node: &str, refusal: &Refusal, now: Timestamp) -> Event {
    let namespace = refusal
        .namespace
        .clone()
        .unwrap_or_else(|| CLUSTER_EVENTS_NAMESPACE.to_string());
    let what = match refusal.reason {
        Reason::PolicySkipped => "skipped (not enforced)",
        Reason::PolicyPartiallyEnforced => "enforced in part",
    };
    let note = truncate(
        format!("tollgate on node {node}: {what}: {}", refusal.message()),
        MAX_NOTE,
    );
    let mut prefix = refusal.name.clone();
    prefix.truncate(MAX_NAME_PREFIX); // Object names are ASCII.
    let instance = truncate(node.to_string(), MAX_INSTANCE);
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{prefix}.{:x}", now.as_nanosecond() as u64)),
            namespace: Some(namespace),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        action: Some("Enforce".into()),
        reason: Some(refusal.reason.as_str().into()),
        note: Some(note),
        type_: Some("Warning".into()),
        regarding: Some(ObjectReference {
            api_version: Some(refusal.id.api_version.to_string()),
            kind: Some(refusal.id.api_kind.to_string()),
            namespace: refusal.namespace.clone(),
            name: Some(refusal.name.clone()),
            uid: Some(refusal.id.uid.clone()).filter(|u| !u.is_empty()),
            resource_version: Some(refusal.id.resource_version.clone()).filter(|v| !v.is_empty()),
            ..ObjectReference::default()
        }),
        reporting_controller: Some(CONTROLLER.into()),
        reporting_instance: Some(instance.clone()),
        deprecated_source: Some(EventSource {
            component: Some(CONTROLLER.into()),
            host: Some(instance),
        }),
        ..Event::default()
    }
}

/// `text` cut to at most `max` bytes on a character boundary, marked
/// with `…` when cut.
fn truncate(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push('…');
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::kube::store::Identity;

    fn refusal(name: &str, reason: Reason, problem: &str, rv: &str) -> Refusal {
        Refusal {
            kind: "ClusterNetworkPolicy".into(),
            namespace: None,
            name: name.into(),
            id: Identity {
                api_version: "crd.antrea.io/v1beta1".into(),
                api_kind: "ClusterNetworkPolicy".into(),
                uid: format!("uid-{name}"),
                generation: Some(1),
                resource_version: rv.into(),
            },
            reason,
            problems: vec![problem.into()],
        }
    }

    fn kinds(reports: &[Report]) -> Vec<String> {
        reports
            .iter()
            .map(|r| match r {
                Report::New(r) => format!("new {} {}", r.name, r.message()),
                Report::Again(r) => format!("again {}", r.name),
                Report::Resolved(s) => format!("resolved {}", s.name),
            })
            .collect()
    }

    #[test]
    fn each_refusal_is_reported_once_counted_on_new_versions_and_renewed_on_a_new_reason() {
        let mut ledger = Ledger::default();
        let skip = Reason::PolicySkipped;
        let a = refusal("a", skip, "spec.tier: no such Tier", "10");
        assert_eq!(
            kinds(&ledger.update(std::slice::from_ref(&a))),
            ["new a spec.tier: no such Tier"]
        );
        // Snapshots caused by other objects: nothing to say.
        assert!(ledger.update(std::slice::from_ref(&a)).is_empty());
        assert!(ledger.update(std::slice::from_ref(&a)).is_empty());
        // Edited, still refused for the same reason: counted.
        let a2 = refusal("a", skip, "spec.tier: no such Tier", "11");
        assert_eq!(
            kinds(&ledger.update(std::slice::from_ref(&a2))),
            ["again a"]
        );
        // A different reason: a new Event.
        let a3 = refusal("a", skip, "spec.priority: out of range", "12");
        assert_eq!(
            kinds(&ledger.update(std::slice::from_ref(&a3))),
            ["new a spec.priority: out of range"]
        );
        // Now only partly enforced: a new Event too.
        let a4 = refusal(
            "a",
            Reason::PolicyPartiallyEnforced,
            "spec.priority: out of range",
            "12",
        );
        assert_eq!(kinds(&ledger.update(&[a4])).len(), 1);
        // Fixed: resolved, and a later refusal is new again.
        assert_eq!(kinds(&ledger.update(&[])), ["resolved a"]);
        assert_eq!(kinds(&ledger.update(&[a3])).len(), 1);
        // A forgotten report (dropped on the way) is sent again.
        let b = refusal("b", skip, "x", "1");
        ledger.update(std::slice::from_ref(&b));
        ledger.forget(&Subject::of(&b));
        assert_eq!(kinds(&ledger.update(&[b])), ["new b x"]);
    }

    #[test]
    fn the_event_names_the_object_the_reason_and_the_node() {
        let mut r = refusal("p", Reason::PolicySkipped, "spec.tier: no such Tier", "7");
        r.problems.push("x".repeat(2000));
        let now: Timestamp = "2026-11-24T05:00:00Z".parse().unwrap();
        let event = event("node-1", &r, now);
        assert_eq!(event.reason.as_deref(), Some("PolicySkipped"));
        assert_eq!(event.reporting_controller.as_deref(), Some("tollgate"));
        assert_eq!(event.reporting_instance.as_deref(), Some("node-1"));
        assert_eq!(event.metadata.namespace.as_deref(), Some("default"));
        let regarding = event.regarding.unwrap();
        assert_eq!(regarding.kind.as_deref(), Some("ClusterNetworkPolicy"));
        assert_eq!(regarding.uid.as_deref(), Some("uid-p"));
        let note = event.note.unwrap();
        assert!(
            note.starts_with(
                "tollgate on node node-1: skipped (not enforced): spec.tier: no such Tier; xxx"
            ),
            "{note}"
        );
        assert!(note.len() <= MAX_NOTE && note.ends_with('…'));
        // Names at the API server's limits stay within them.
        let mut long = refusal(&"p".repeat(253), Reason::PolicySkipped, "x", "7");
        long.namespace = Some("ns".into());
        let event = super::event(&"n".repeat(253), &long, now);
        assert!(event.metadata.name.unwrap().len() <= 253);
        assert!(event.reporting_instance.unwrap().len() <= MAX_INSTANCE);
        assert_eq!(event.metadata.namespace.as_deref(), Some("ns"));
    }
}
