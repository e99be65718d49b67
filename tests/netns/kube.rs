//! Kubernetes mode end to end: `tollgate run --kubernetes` reads from the
//! fake API server (`tests/fake_api`, in the node namespace; no real
//! apiserver, TLS, token or RBAC) and enforces on the wire a policy added
//! through it, following a Pod's label changes out of and back into it.

use std::net::{IpAddr, SocketAddr, TcpListener};

use serde_json::{json, Value};

use crate::harness::{Lab, TcpOutcome};
use tollgate_fake_api::FakeApi;

fn pod(name: &str, app: &str, ip: IpAddr) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "prod", "labels": {"app": app}},
           "spec": {"nodeName": "node",
                    "containers": [{"name": "main", "ports": [{"name": "http", "containerPort": 8080}]}]},
           "status": {"podIP": ip.to_string(), "podIPs": [{"ip": ip.to_string()}]}})
}

fn drop_from(name: &str, app: &str, cidr: &str) -> Value {
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
           "metadata": {"name": name},
           "spec": {"priority": 5, "tier": "application",
                    "appliedTo": [{"podSelector": {"matchLabels": {"app": app}}}],
                    "ingress": [{"name": "drop-clients", "action": "Drop",
                                 "from": [{"ipBlock": {"cidr": cidr}}]}]}})
}

#[test]
fn kubernetes_policy_and_label_change_via_fake_api_server() {
    let Some(lab) = Lab::builder("kubernetes_policy_and_label_change_via_fake_api_server")
        .peer("client")
        .peer("server")
        .build()
    else {
        return;
    };
    lab.serve_tcp("server", 8080, crate::harness::Service::Echo);
    // The API server listens on the node namespace's loopback, where the
    // agent runs.
    let listener = lab
        .node()
        .enter(|| TcpListener::bind("127.0.0.1:0").expect("bind in node namespace"));
    let api = FakeApi::serve(listener);
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}}));
    api.apply(pod("web", "web", lab.addr("server").into()));
    api.apply(pod("client", "client", lab.addr("client").into()));
    let kubeconfig = lab.dir().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();

    let mut options = lab.agent_options();
    options.kubeconfig = Some(kubeconfig);
    let mut agent = lab.start_agent(options);
    // Generation 1: the first complete snapshot from the API server
    // (nothing is decided before it).
    agent.wait_generation(1);
    let web = SocketAddr::new(lab.addr("server").into(), 8080);
    lab.assert_tcp("client", web, TcpOutcome::Connected);

    api.apply(drop_from("drop-clients", "web", &lab.subnet("client")));
    agent.wait_generation(2);
    lab.assert_tcp("client", web, TcpOutcome::TimedOut);

    // Relabelled, the Pod leaves the policy...
    api.apply(pod("web", "other", lab.addr("server").into()));
    agent.wait_generation(3);
    lab.assert_tcp("client", web, TcpOutcome::Connected);

    // ...and comes back under it.
    api.apply(pod("web", "web", lab.addr("server").into()));
    agent.wait_generation(4);
    lab.assert_tcp("client", web, TcpOutcome::TimedOut);

    // Deleting the policy through the API server lifts it.
    api.delete(&drop_from("drop-clients", "web", &lab.subnet("client")));
    agent.wait_generation(5);
    lab.assert_tcp("client", web, TcpOutcome::Connected);
    assert!(agent.log().contains("kubernetes snapshot"));
    agent.stop();
}
