//! The simulated cluster: N Nodes, P Pods (Pod i on Node i mod N, in
//! Namespace i / 100, app (i mod 100) / 10: ten apps of ten Pods in each
//! Namespace), and two families of policies:
//! - local: in each Namespace, an Antrea NetworkPolicy for each of the
//!   apps 0..LOCAL_APPS applied to `app-a` and allowing ingress from
//!   `app-(a+1)` of the same Namespace, dropping the rest (a Node needs
//!   a few dozen small groups);
//! - wide: one ClusterNetworkPolicy applied to `app-9` in the Namespaces
//!   labelled `role=edge` (every 50th: ingress controllers, monitoring)
//!   allowing ingress from every Pod of the cluster, dropping the rest.
//!
//! Owns the objects' JSON and the fresh addresses; never talks to the
//! server (the churn does, `churn.rs`).

use serde_json::{json, Value};

/// Pods of one Namespace.
pub const PODS_PER_NAMESPACE: usize = 100;
/// Apps of one Namespace (ten Pods each).
pub const APPS: usize = 10;
/// Apps of a Namespace with a local policy.
pub const LOCAL_APPS: usize = 3;
/// The app of the edge Namespaces the wide policy applies to.
pub const EDGE_APP: usize = 9;
/// Every EDGE_EVERY-th Namespace is an edge one.
pub const EDGE_EVERY: usize = 50;

#[derive(Clone, Copy, Debug)]
pub struct Size {
    pub nodes: usize,
    pub pods: usize,
}

impl Size {
    pub fn namespaces(&self) -> usize {
        self.pods.div_ceil(PODS_PER_NAMESPACE).max(1)
    }

    pub fn namespace_of(&self, i: usize) -> usize {
        i / PODS_PER_NAMESPACE
    }

    pub fn node_of(&self, i: usize) -> usize {
        i % self.nodes
    }

    pub fn app_of(&self, i: usize) -> usize {
        (i % PODS_PER_NAMESPACE) / (PODS_PER_NAMESPACE / APPS)
    }

    /// Whether Pod `i` is one the wide policy applies to.
    pub fn is_edge(&self, i: usize) -> bool {
        self.namespace_of(i).is_multiple_of(EDGE_EVERY) && self.app_of(i) == EDGE_APP
    }
}

pub fn node_name(n: usize) -> String {
    format!("node-{n}")
}

pub fn namespace_name(n: usize) -> String {
    format!("ns-{n}")
}

pub fn pod_name(i: usize) -> String {
    format!("pod-{i}")
}

/// The n-th fresh address (10.0.0.1 on): never given twice in one run,
/// so an address tags the write that gave it.
pub fn address(n: u32) -> String {
    let n = n + 1;
    format!("10.{}.{}.{}", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff)
}

pub fn node(n: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": node_name(n), "labels": {"kubernetes.io/hostname": node_name(n)}},
           "status": {"addresses": [{"type": "InternalIP",
                                     "address": format!("172.16.{}.{}", n / 256, n % 256)}]}})
}

/// Node `n`'s status report number `beat` (the kubelet's, every 5 min by
/// default): the Node as [`node`] writes it with its `Ready` condition's
/// heartbeat time, the only field that changes.
pub fn node_report(n: usize, beat: usize) -> Value {
    let mut node = node(n);
    let at = beat * 300;
    let time = format!(
        "2026-01-01T{:02}:{:02}:{:02}Z",
        at / 3600 % 24,
        at / 60 % 60,
        at % 60
    );
    node["status"]["conditions"] = json!([{"type": "Ready", "status": "True",
        "reason": "KubeletReady", "lastHeartbeatTime": time}]);
    node
}

/// Namespace `n`; `env` is the label the churn changes (no policy reads it).
pub fn namespace(n: usize, env: &str) -> Value {
    let mut labels = json!({"kubernetes.io/metadata.name": namespace_name(n),
                            "team": format!("t{}", n % 10), "env": env});
    if n.is_multiple_of(EDGE_EVERY) {
        labels["role"] = json!("edge");
    }
    json!({"apiVersion": "v1", "kind": "Namespace",
           "metadata": {"name": namespace_name(n), "labels": labels}})
}

/// Pod `i` with `app`, address `ip` and `restarts` (the status the
/// churn's status writes change).
pub fn pod(size: &Size, i: usize, app: usize, ip: &str, restarts: u64) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": pod_name(i), "namespace": namespace_name(size.namespace_of(i)),
                        "labels": {"app": format!("app-{app}")}},
           "spec": {"nodeName": node_name(size.node_of(i)), "serviceAccountName": "default",
                    "containers": [{"name": "main", "image": "nginx"}]},
           "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                      "containerStatuses": [{"name": "main", "ready": true, "restartCount": restarts}]}})
}

/// The local policy of app `app` in Namespace `n`, allowing from `from`.
pub fn local_policy(n: usize, app: usize, from: usize) -> Value {
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "NetworkPolicy",
           "metadata": {"name": format!("app-{app}"), "namespace": namespace_name(n)},
           "spec": {"priority": 5, "tier": "application",
                    "appliedTo": [{"podSelector": {"matchLabels": {"app": format!("app-{app}")}}}],
                    "ingress": [{"action": "Allow",
                                 "from": [{"podSelector": {"matchLabels": {"app": format!("app-{from}")}}}]},
                                {"action": "Drop"}]}})
}

/// The wide policy: the edge apps allow ingress from every Pod.
pub fn wide_policy() -> Value {
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
           "metadata": {"name": "edge-from-everyone"},
           "spec": {"priority": 5, "tier": "application",
                    "appliedTo": [{"podSelector": {"matchLabels": {"app": format!("app-{EDGE_APP}")}},
                                   "namespaceSelector": {"matchLabels": {"role": "edge"}}}],
                    "ingress": [{"action": "Allow", "from": [{"namespaceSelector": {}}]},
                                {"action": "Drop"}]}})
}

/// The policy side: Namespaces, then every policy.
pub fn policies(size: &Size) -> Vec<Value> {
    let mut out: Vec<Value> = (0..size.namespaces()).map(|n| namespace(n, "a")).collect();
    for n in 0..size.namespaces() {
        for app in 0..LOCAL_APPS {
            out.push(local_policy(n, app, (app + 1) % APPS));
        }
    }
    out.push(wide_policy());
    out
}

/// The Node whose Pods include an edge one (its agent holds the group of
/// every Pod), and one with none (only local groups): the two Nodes of the
/// measured agents.
pub fn measured_nodes(size: &Size) -> (usize, usize) {
    let mut edge = vec![false; size.nodes];
    for i in 0..size.pods {
        if size.is_edge(i) {
            edge[size.node_of(i)] = true;
        }
    }
    let wide = edge.iter().position(|e| *e).expect("an edge Pod");
    let local = edge
        .iter()
        .position(|e| !*e)
        .expect("a Node without edge Pods");
    (wide, local)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_measured_nodes_host_an_edge_pod_and_none() {
        let size = Size {
            nodes: 20,
            pods: 600,
        };
        let (wide, local) = measured_nodes(&size);
        let hosts_edge = |n: usize| (0..size.pods).any(|i| size.node_of(i) == n && size.is_edge(i));
        assert!(hosts_edge(wide) && !hosts_edge(local));
        assert_eq!(size.namespaces(), 6);
        assert_ne!(address(0), address(1 << 16));
    }
}
