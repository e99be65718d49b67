//! `tollgate diff live DIR` and `tollgate get matrix` against a running
//! agent: the agent hands over the snapshot its ruleset was compiled from
//! (inventory, named ports and its Node included), so the live side
//! compares as the directory it was read from; the change `diff` reports
//! is the one the wire shows once the new policies land.
//!
//! Topology (lab links): pod `apps/client` 10.I.1.2, pod `apps/web`
//! 10.I.2.2 (container port `http` = 8080; 8081 unnamed), both routed
//! through the node `review`, where the agent runs with the verdict cache
//! off (every probe is decided by the agent).

use std::process::{Command, Output};

use crate::harness::{Lab, Service, TcpOutcome};

/// The client reaches the web Pod on its `http` port; with `open_8081`
/// on 8081 too; the web Pod's other ingress from the client is dropped.
fn policies(lab: &Lab, open_8081: bool) -> String {
    let extra = if open_8081 {
        ", {protocol: TCP, port: 8081}"
    } else {
        ""
    };
    format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: client, namespace: apps, labels: {{app: client}}}}
spec: {{nodeName: review}}
status:
  podIP: {client4}
  podIPs: [{{ip: {client4}}}, {{ip: '{client6}'}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: web, namespace: apps, labels: {{app: web}}}}
spec:
  nodeName: review
  containers: [{{name: web, ports: [{{name: http, containerPort: 8080}}]}}]
status:
  podIP: {web4}
  podIPs: [{{ip: {web4}}}, {{ip: '{web6}'}}]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: web-ingress}}
spec:
  priority: 6
  tier: securityops
  appliedTo: [{{podSelector: {{matchLabels: {{app: web}}}}}}]
  ingress:
  - name: http-port
    action: Allow
    from: [{{podSelector: {{matchLabels: {{app: client}}}}}}]
    ports: [{{protocol: TCP, port: http}}{extra}]
  - name: other-ports
    action: Drop
    from: [{{podSelector: {{matchLabels: {{app: client}}}}}}]
",
        client4 = lab.addr("pod"),
        client6 = lab.addr6("pod"),
        web4 = lab.addr("web"),
        web6 = lab.addr6("web"),
    )
}

fn tollgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .output()
        .expect("run tollgate")
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Mutation: the agent's snapshot answer leaving out the Pods
/// (`AgentStatus::snapshot` filtering `Object::Pod`) makes `diff live`
/// against the agent's own directory report changes: the test fails.
#[test]
fn diff_live_compares_the_agents_snapshot_and_the_wire_agrees() {
    let Some(lab) = Lab::builder("diff_live_compares_the_agents_snapshot_and_the_wire_agrees")
        .peer("pod")
        .peer("web")
        .ipv6()
        .build()
    else {
        return;
    };
    let (web4, web6) = (lab.addr("web"), lab.addr6("web"));
    lab.serve_tcp("web", 8080, Service::Http);
    lab.serve_tcp("web", 8081, Service::Http);
    lab.write_policy("review.yaml", &policies(&lab, false));
    let options = lab
        .agent_options()
        .node_name("review")
        .queues(1)
        .args(&["--verdict-cache", "off"]);
    let socket = options.status_socket.display().to_string();
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);
    lab.assert_tcp("pod", (web4, 8080), TcpOutcome::Connected);
    lab.assert_tcp("pod", (web4, 8081), TcpOutcome::TimedOut);

    let dir = lab.policy_dir().display().to_string();
    let write = |name: &str, open: bool| {
        let path = lab.dir().join(name);
        std::fs::create_dir_all(&path).unwrap();
        std::fs::write(path.join("review.yaml"), policies(&lab, open)).unwrap();
        path.display().to_string()
    };
    let (same, new) = (write("same", false), write("new", true));

    // The agent's snapshot reads back as its directory: no change.
    let out = tollgate(&["diff", "--socket", &socket, "--exit-code", "live", &same]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // Live against the change: what the two directories give, one row.
    let live = json(&tollgate(&[
        "diff", "--socket", &socket, "-o", "json", "live", &new,
    ]));
    let offline = json(&tollgate(&[
        "diff",
        "--node-name",
        "review",
        "-o",
        "json",
        &dir,
        &new,
    ]));
    assert_eq!(live, offline);
    assert_eq!(
        live["summary"],
        serde_json::json!({"opened": 1, "closed": 0, "changed": 0}),
        "{live:#}"
    );
    let row = &live["changes"][0];
    assert_eq!(row["from"], serde_json::json!(["apps/client"]), "{row:#}");
    assert_eq!(row["to"], serde_json::json!(["apps/web"]));
    assert_eq!(row["protocol"], "TCP");
    assert_eq!(row["ports"], serde_json::json!(["8081"]));
    assert!(row.get("family").is_none(), "both families: {row:#}");
    assert_eq!(
        row["before"]["rule"],
        "AntreaClusterNetworkPolicy:web-ingress rule other-ports (tier securityops)"
    );
    assert_eq!(
        row["after"]["rule"],
        "AntreaClusterNetworkPolicy:web-ingress rule http-port (tier securityops)"
    );

    // The agent against itself, and its inventory under both directories.
    let out = tollgate(&["diff", "--socket", &socket, "--exit-code", "live", "live"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let with_live_inventory = json(&tollgate(&[
        "diff",
        "--socket",
        &socket,
        "--inventory",
        "live",
        "-o",
        "json",
        &dir,
        &new,
    ]));
    assert_eq!(with_live_inventory, live);

    // The live matrix is the directory's.
    let matrix = |source: &[&str]| {
        let args = [
            "get",
            "matrix",
            "--ports",
            "http,8081",
            "-n",
            "apps",
            "-o",
            "json",
        ];
        json(&tollgate(&[&args[..], source].concat()))
    };
    let live_matrix = matrix(&["--socket", &socket]);
    assert_eq!(
        live_matrix,
        matrix(&["--policies", &dir, "--node-name", "review"])
    );
    assert_eq!(
        live_matrix["rows"],
        serde_json::json!(["apps/client", "apps/web"])
    );
    assert_eq!(
        live_matrix["cells"][0][1],
        serde_json::json!(["Allow", "Drop"])
    );

    // The change lands: the wire opens what the diff said, both families.
    lab.write_policy("review.yaml", &policies(&lab, true));
    agent.wait_generation(2);
    lab.assert_tcp("pod", (web4, 8081), TcpOutcome::Connected);
    lab.assert_tcp("pod", (web6, 8081), TcpOutcome::Connected);
    let out = tollgate(&["diff", "--socket", &socket, "--exit-code", "live", &new]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
