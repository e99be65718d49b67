//! Kubernetes mode, Antrea parity: a policy that names a ClusterGroup or
//! Group not created yet is admitted (Antrea admits it) and selects nothing;
//! when the group arrives through the watch, the policy starts to enforce
//! with no change to the policy itself.
#![allow(clippy::disallowed_methods)] // the test waits on the clock for the watcher.

use std::net::IpAddr;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tollgate::compile::{compile, LocalNode};
use tollgate::fqdn::NoFqdn;
use tollgate::packet::flow::{Flow, Transport, Verdict};
use tollgate::ruleset::Ruleset;
use tollgate::source::kube::{Admitted, Connection, KubeSource, Latest};
use tollgate::telemetry::Metrics;

use tollgate_fake_api::FakeApi;

const NODE: &str = "node-p";

fn pod(name: &str, app: &str, ip: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "shop", "labels": {"app": app}},
           "spec": {"nodeName": NODE, "containers": [{"name": "c", "ports": [{"containerPort": 80}]}]},
           "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}})
}

/// Drops traffic from the `clients` ClusterGroup to the `web` ClusterGroup;
/// neither exists when the policy arrives.
fn acnp_between_groups() -> Value {
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
           "metadata": {"name": "web-from-clients"},
           "spec": {"priority": 5, "tier": "SecurityOps",
                    "appliedTo": [{"group": "web"}],
                    "ingress": [{"action": "Drop", "from": [{"group": "clients"}]}]}})
}

/// An Antrea NetworkPolicy in `shop` applied to the Group `db`, not created yet.
fn annp_on_group() -> Value {
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "NetworkPolicy",
           "metadata": {"name": "db-isolation", "namespace": "shop"},
           "spec": {"priority": 5, "appliedTo": [{"group": "db"}],
                    "ingress": [{"action": "Drop", "from": [{"ipBlock": {"cidr": "10.98.0.0/16"}}]}]}})
}

fn cluster_group(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterGroup",
           "metadata": {"name": name}, "spec": spec})
}

fn local() -> LocalNode {
    LocalNode {
        name: NODE.into(),
        labels: Default::default(),
        addresses: vec![],
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn tcp_verdict(ruleset: &Ruleset, src: &str, dst: &str) -> Verdict {
    let flow = Flow {
        src: ip(src),
        dst: ip(dst),
        transport: Transport::Tcp {
            src_port: 40000,
            dst_port: 80,
        },
        local: None,
    };
    ruleset.classify(&flow, &NoFqdn).verdict
}

struct Harness {
    api: FakeApi,
    latest: Latest,
    // Dropped before the server so the watchers stop first.
    source: Option<KubeSource>,
    notified: mpsc::Receiver<()>,
}

impl Harness {
    fn start(api: FakeApi) -> Harness {
        let config = kube::Config::new(api.url().parse().unwrap());
        let (tx, notified) = mpsc::channel();
        let source = KubeSource::spawn(
            Connection::Config(Box::new(config)),
            Arc::new(Metrics::new()),
            move || {
                let _ = tx.send(());
            },
        )
        .expect("kubernetes source starts");
        Harness {
            api,
            latest: source.latest(),
            source: Some(source),
            notified,
        }
    }

    /// Waits (at most 20 s) for a published snapshot that satisfies `ok`.
    fn wait_for(&self, what: &str, ok: impl Fn(&Admitted, &Ruleset) -> bool) -> Ruleset {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(admitted) = self.latest.get() {
                let ruleset = compile(&admitted.snapshot, &local());
                if ok(&admitted, &ruleset) {
                    return ruleset;
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "timed out waiting for {what}; skipped: {:#?}",
                self.latest.get().map(|a| a.skipped.clone())
            );
            let _ = self
                .notified
                .recv_timeout(left.min(Duration::from_millis(500)));
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.source.take();
    }
}

#[test]
fn a_policy_before_its_groups_enforces_when_they_arrive() {
    let api = FakeApi::start("127.0.0.1:0");
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}));
    api.apply(pod("web-1", "web", "10.3.0.2"));
    api.apply(pod("db-1", "db", "10.3.0.3"));
    // The policies arrive first, naming groups that do not exist yet.
    api.apply(acnp_between_groups());
    api.apply(annp_on_group());
    let h = Harness::start(api);

    let ruleset = h.wait_for("policies admitted without their groups", |a, r| {
        a.snapshot.objects.len() == 5 && r.policies().len() == 2
    });
    assert!(h.latest.get().unwrap().skipped.is_empty());
    assert!(ruleset.enforced().endpoints.is_empty(), "no group, no Pod");
    assert_eq!(
        tcp_verdict(&ruleset, "10.99.1.1", "10.3.0.2"),
        Verdict::Allow
    );

    // The appliedTo group arrives: web-1 is enforced, but the peer group is
    // still missing, so nothing is dropped yet.
    h.api.apply(cluster_group(
        "web",
        json!({"podSelector": {"matchLabels": {"app": "web"}}}),
    ));
    let ruleset = h.wait_for("appliedTo group arrived", |_, r| {
        r.enforced().endpoints == [ip("10.3.0.2")]
    });
    assert_eq!(
        tcp_verdict(&ruleset, "10.99.1.1", "10.3.0.2"),
        Verdict::Allow
    );

    // The peer group arrives: traffic from it to web-1 is dropped.
    h.api.apply(cluster_group(
        "clients",
        json!({"ipBlocks": [{"cidr": "10.99.0.0/16"}]}),
    ));
    let ruleset = h.wait_for("peer group arrived", |_, r| {
        tcp_verdict(r, "10.99.1.1", "10.3.0.2") == Verdict::Drop
    });
    assert_eq!(
        tcp_verdict(&ruleset, "10.97.1.1", "10.3.0.2"),
        Verdict::Allow
    );

    // The namespaced Group arrives: the Antrea NetworkPolicy applies to db-1.
    h.api.apply(
        json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "Group",
                       "metadata": {"name": "db", "namespace": "shop"},
                       "spec": {"podSelector": {"matchLabels": {"app": "db"}}}}),
    );
    let ruleset = h.wait_for("Group arrived", |_, r| {
        r.enforced().endpoints == [ip("10.3.0.2"), ip("10.3.0.3")]
    });
    assert_eq!(
        tcp_verdict(&ruleset, "10.98.0.9", "10.3.0.3"),
        Verdict::Drop
    );
    assert!(h.latest.get().unwrap().skipped.is_empty());
}
