//! The operator's commands against a running agent: `tollgate trace`
//! without `--policies` asks the agent, so it knows the FQDN addresses the
//! agent has learned (the offline trace cannot), resolves endpoint names
//! and named ports against the agent's inventory, and names the rule the
//! wire enforces; `tollgate get endpoints` lists the live endpoints with
//! their policies. A flow the agent's `datapath.privileged` accepts is
//! traced as such.
//!
//! Topology (lab links): pod `apps/client` 10.I.1.2, pod `apps/web`
//! 10.I.2.2 (container port `http` = 8080; 8081 unnamed), server 10.I.3.2
//! (DNS on 53, HTTP on 80: `api.ops.test`, and on 81, privileged), all
//! routed through the node
//! `ops`, where the agent runs.

use std::net::IpAddr;
use std::process::{Command, Output};
use std::time::Duration;

use hickory_proto::rr::RecordType;

use crate::harness::{poll_until, DnsRecord, Lab, Resolution, Service, TcpOutcome, AGENT_WAIT};

const NAME: &str = "api.ops.test";

/// Inventory and policies: the client may ask the server for DNS, reach
/// `*.ops.test` on port 80 and the web Pod; the rest of its egress is
/// dropped. The web Pod takes the client on its `http` port only.
fn policies(lab: &Lab) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: client, namespace: apps, labels: {{app: client}}}}
spec: {{nodeName: ops}}
status:
  podIP: {client4}
  podIPs: [{{ip: {client4}}}, {{ip: '{client6}'}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: web, namespace: apps, labels: {{app: web}}}}
spec:
  nodeName: ops
  containers: [{{name: web, ports: [{{name: http, containerPort: 8080}}]}}]
status:
  podIP: {web4}
  podIPs: [{{ip: {web4}}}, {{ip: '{web6}'}}]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: client-egress}}
spec:
  priority: 5
  tier: securityops
  appliedTo: [{{podSelector: {{matchLabels: {{app: client}}}}}}]
  egress:
  - name: dns
    action: Allow
    to: [{{ipBlock: {{cidr: {server}/32}}}}]
    ports: [{{protocol: UDP, port: 53}}]
  - name: api
    action: Allow
    to: [{{fqdn: '*.ops.test'}}]
    ports: [{{protocol: TCP, port: 80}}]
  - name: to-web
    action: Allow
    to: [{{podSelector: {{matchLabels: {{app: web}}}}}}]
  - name: drop-rest
    action: Drop
    to: [{{ipBlock: {{cidr: 0.0.0.0/0}}}}, {{ipBlock: {{cidr: '::/0'}}}}]
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
    ports: [{{protocol: TCP, port: http}}]
  - name: other-ports
    action: Drop
    from: [{{podSelector: {{matchLabels: {{app: client}}}}}}]
",
        client4 = lab.addr("pod"),
        client6 = lab.addr6("pod"),
        web4 = lab.addr("web"),
        web6 = lab.addr6("web"),
        server = lab.addr("server"),
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

#[test]
fn live_trace_and_endpoints_name_what_the_wire_enforces() {
    let Some(lab) = Lab::builder("live_trace_and_endpoints_name_what_the_wire_enforces")
        .peer("pod")
        .peer("web")
        .peer("server")
        .ipv6()
        .build()
    else {
        return;
    };
    let server = lab.addr("server");
    lab.serve_tcp("server", 80, Service::Http);
    lab.serve_tcp("web", 8080, Service::Http);
    lab.serve_tcp("web", 8081, Service::Http);
    lab.serve_dns(
        "server",
        53,
        vec![DnsRecord::address(NAME, IpAddr::V4(server), 300)],
    );
    lab.write_policy("ops.yaml", &policies(&lab));
    lab.serve_tcp("server", 81, Service::Http);
    let mut options = lab.agent_options().node_name("ops").queues(1);
    // The operator's exception: port 81 of the server, ahead of policy.
    options.privileged = vec![format!("{server}/32,tcp/81")];
    let socket = options.status_socket.display().to_string();
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);
    let dir = lab.policy_dir().display().to_string();
    let live = |flags: &[&str]| {
        let args = ["trace", "--socket", &socket, "-o", "json"];
        tollgate(&[&args[..], flags].concat())
    };
    let offline = |flags: &[&str]| {
        let args = [
            "trace",
            "--policies",
            &dir,
            "--node-name",
            "ops",
            "-o",
            "json",
        ];
        tollgate(&[&args[..], flags].concat())
    };
    let server_text = server.to_string();
    let to_api: [&str; 8] = [
        "--src",
        "apps/client",
        "--dst",
        &server_text,
        "--protocol",
        "tcp",
        "--dst-port",
        "80",
    ];

    // Nothing learned yet: live and offline agree with the wire (dropped).
    let before = json(&live(&to_api));
    assert_eq!(before["verdict"], "Drop", "{before}");
    assert_eq!(before["egress"]["rule"], "drop-rest");
    lab.assert_tcp("pod", (server, 80), TcpOutcome::TimedOut);

    // The client looks the name up; the agent learns the address from
    // the reply. Only the live trace knows it, and the wire agrees.
    let answer = lab.resolve(
        "pod",
        (server, 53),
        NAME,
        RecordType::A,
        Duration::from_secs(3),
    );
    assert!(
        matches!(&answer, Resolution::Addresses(a) if !a.is_empty()),
        "{answer:?}"
    );
    let learned = poll_until(AGENT_WAIT, || {
        let v = json(&live(&to_api));
        (v["verdict"] == "Allow").then_some(v)
    })
    .expect("the live trace allows the learned address");
    assert_eq!(learned["egress"]["rule"], "api", "{learned}");
    assert_eq!(learned["fqdn"][0], "*.ops.test", "{learned}");
    let consulted: Vec<&str> = learned["egress"]["consulted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["rule"].as_str().unwrap())
        .collect();
    assert_eq!(consulted, ["dns", "api"]);
    lab.assert_tcp("pod", (server, 80), TcpOutcome::Connected);
    // get fqdn in the node: the agent names the set by its selector for
    // the Pod asked for, and says how it learned the address.
    let table = lab.node().ok(&format!(
        "{} get fqdn --socket {socket} -n apps -p client",
        env!("CARGO_BIN_EXE_tollgate")
    ));
    let row = table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|words| words.get(2) == Some(&server_text.as_str()))
        .unwrap_or_else(|| panic!("{server} missing in\n{table}"));
    assert_eq!((row[0], row[4]), ("*.ops.test", "snooped"), "{table}");
    let web_only = lab.node().ok(&format!(
        "{} get fqdn --socket {socket} -n apps -p web",
        env!("CARGO_BIN_EXE_tollgate")
    ));
    assert_eq!(web_only.lines().count(), 1, "{web_only}");
    let unknowing = json(&offline(&to_api));
    assert_eq!(
        unknowing["verdict"], "Drop",
        "offline cannot know {unknowing}"
    );
    // --exit-code against the agent.
    let exit = |flags: &[&str]| {
        let args = ["trace", "--socket", &socket, "--exit-code"];
        tollgate(&[&args[..], flags].concat()).status.code()
    };
    assert_eq!(exit(&to_api), Some(0));

    // Named port: resolved on the destination Pod by the agent, both
    // families; the wire agrees on 8080 (http) and 8081.
    let pod6 = lab.addr6("pod").to_string();
    for (src, web) in [
        ("apps/client", IpAddr::from(lab.addr("web"))),
        (pod6.as_str(), lab.addr6("web").into()),
    ] {
        let by_name = [
            "--src",
            src,
            "--dst",
            "apps/web",
            "--protocol",
            "TCP",
            "--dst-port",
            "http",
        ];
        let v = json(&live(&by_name));
        assert_eq!(v["verdict"], "Allow", "{v}");
        assert_eq!(v["dstPort"], 8080);
        assert_eq!(v["dst"]["address"], web.to_string());
        assert_eq!(v["ingress"]["rule"], "http-port");
        assert_eq!(v["egress"]["rule"], "to-web");
        lab.assert_tcp("pod", (web, 8080), TcpOutcome::Connected);
        let other = [
            "--src",
            src,
            "--dst",
            "apps/web",
            "--protocol",
            "tcp",
            "--dst-port",
            "8081",
        ];
        let v = json(&live(&other));
        assert_eq!(v["verdict"], "Drop", "{v}");
        assert_eq!(v["ingress"]["rule"], "other-ports");
        assert_eq!(exit(&other), Some(1));
        lab.assert_tcp("pod", (web, 8081), TcpOutcome::TimedOut);
    }

    // The agent's configuration: a privileged entry accepts what policy
    // drops; the live trace says so (offline has no such configuration).
    let port81 = [&to_api[..6], &["--dst-port", "81"]].concat();
    let v = json(&live(&port81));
    assert_eq!(v["verdict"], "Allow", "{v}");
    assert_eq!(v["privileged"], format!("{server}/32,tcp/81"));
    assert_eq!(v["egress"]["rule"], "drop-rest", "what policy alone says");
    lab.assert_tcp("pod", (server, 81), TcpOutcome::Connected);
    assert_eq!(json(&offline(&port81))["verdict"], "Drop");

    // A name the agent does not know: its answer, exit 2.
    let out = live(&[
        "--src",
        "apps/nobody",
        "--dst",
        "apps/web",
        "--protocol",
        "icmp",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("\"apps/nobody\" is neither an address nor an endpoint"),
        "{stderr}"
    );

    // get endpoints from the agent: both Pods, their policies in order.
    let out = tollgate(&["get", "endpoints", "--socket", &socket, "-n", "apps"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let client = format!("{},{}", lab.addr("pod"), lab.addr6("pod"));
    let web = format!("{},{}", lab.addr("web"), lab.addr6("web"));
    assert_eq!(
        rows,
        [
            vec!["ENDPOINT", "KIND", "ADDRESSES", "POLICIES"],
            vec![
                "apps/client",
                "Pod",
                &client,
                "AntreaClusterNetworkPolicy:client-egress"
            ],
            vec![
                "apps/web",
                "Pod",
                &web,
                "AntreaClusterNetworkPolicy:web-ingress"
            ],
        ],
        "{text}"
    );
    let all = json(&tollgate(&[
        "get",
        "endpoints",
        "--socket",
        &socket,
        "-o",
        "json",
    ]));
    assert_eq!(all[0]["endpoint"], "ops", "{all}");
    assert_eq!(all[0]["kind"], "Node");
    // The offline answer for the same files is the same list.
    let files = json(&tollgate(&[
        "get",
        "endpoints",
        "--policies",
        &dir,
        "--node-name",
        "ops",
        "-o",
        "json",
    ]));
    assert_eq!(files.as_array().unwrap()[1..], all.as_array().unwrap()[1..]);
    agent.stop();
}
