//! The operator's commands against a running agent: `tollgate trace`
//! without `--policies` asks the agent, so it knows the FQDN addresses the
//! agent has learned (the offline trace cannot), resolves endpoint names
//! (a Pod's, `node:NAME`) and named ports against the agent's inventory,
//! and names the rule the wire enforces; `tollgate get endpoints` lists the
//! live endpoints with their policies. A flow the agent's
//! `datapath.privileged` accepts is traced as such, and the shipped kind
//! of entry (SSH from anywhere) privileges the Node's own port, never a
//! routed Pod's.
//!
//! The docs' live examples (blocks marked `<!-- readme-live: NAME -->`,
//! each once in README.md or a file under docs/) are this test's
//! `status`, `get endpoints` and `trace -v` output, compared after masking
//! what changes from run to run (every number, addresses included, the
//! commit, runs of spaces); `UPDATE_README=1` writes the fresh output into
//! the file that holds each block.
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
    lab.serve_tcp("node", 8080, Service::Http);
    // The operator's exception: port 81 of the server, ahead of policy,
    // for traffic routed through the node (`hooks: [forward]`).
    let privileged = format!(
        "datapath.privileged=[{{cidr: {server}/32, protocol: TCP, port: 81, hooks: [forward]}}]"
    );
    let options = lab
        .agent_options()
        .node_name("ops")
        .queues(1)
        .args(&["--set", &privileged]);
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
    // `observe -n apps -p client` shows the Pod's decisions by name, and
    // only those; another Pod or Namespace asks for none of them.
    // Mutation: `ObserveFilter::matches` ignoring `pod` — the web Pod's
    // answer holds the client's lines.
    let observed = |filter: &[&str]| {
        let out = tollgate(&[&["observe", "--socket", &socket][..], filter].concat());
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let client_lines = poll_until(AGENT_WAIT, || {
        let text = observed(&["-n", "apps", "-p", "client"]);
        text.lines()
            .any(|l| {
                l.contains(" apps/client:") && l.contains(&format!(" -> {server}:80 TCP Allow "))
            })
            .then_some(text)
    })
    .unwrap_or_else(|| panic!("{}", observed(&[])));
    assert!(
        client_lines.lines().all(|l| l.contains(" apps/client")),
        "{client_lines}"
    );
    let web_lines = observed(&["-n", "apps", "-p", "web"]);
    assert!(!web_lines.contains("apps/client"), "{web_lines}");
    assert_eq!(observed(&["-n", "elsewhere"]), "");
    // The same trace as text with -v: every rule consulted, why the
    // first did not match, the FQDN.
    let verbose_args = [&to_api[..], &["-v"]].concat();
    let out = tollgate(&[&["trace", "--socket", &socket][..], &verbose_args].concat());
    let verbose = String::from_utf8_lossy(&out.stdout).into_owned();
    let pod = lab.addr("pod");
    assert_eq!(
        verbose.lines().collect::<Vec<_>>(),
        [
            "verdict: Allow".to_string(),
            format!("  flow: TCP {pod}:40000 (apps/client) -> {server}:80"),
            "  Egress [apps/client]: Allow by AntreaClusterNetworkPolicy:client-egress rule api (tier securityops)".into(),
            "    1. AntreaClusterNetworkPolicy:client-egress rule dns (tier securityops): no match (Allow)".into(),
            // Why it did not match.
            "       protocol TCP: the rule takes UDP/53".into(),
            "    2. AntreaClusterNetworkPolicy:client-egress rule api (tier securityops): matched (Allow)".into(),
            "  Ingress [not an endpoint of this node]: no policy applies".into(),
            "    no rule consulted".into(),
            "  FQDN: the destination is an address of *.ops.test".into(),
        ],
        "{verbose}"
    );
    let mut live_examples = vec![(
        "trace-verbose",
        format!("tollgate trace {}", verbose_args.join(" ")),
        verbose,
    )];
    // get fqdn from outside the node's namespace (the test's own, where
    // no tollgate set exists): the agent reads its sets, names each by
    // its selector for the Pod asked for, and says how it learned the
    // address. Mutation: `get fqdn` reading the caller's namespace's sets
    // (`crate::datapath::learned_sets()` in commands/get.rs) — no row.
    let out = tollgate(&[
        "get", "fqdn", "--socket", &socket, "-n", "apps", "-p", "client",
    ]);
    assert!(out.status.success(), "{out:?}");
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
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

    // The Node by name: the agent's own addresses, the first IPv4 one
    // that of the client's link; the client's egress drops it, as the
    // wire does.
    let node = [
        "--src",
        "apps/client",
        "--dst",
        "node:ops",
        "--protocol",
        "tcp",
        "--dst-port",
        "8080",
    ];
    let v = json(&live(&node));
    assert_eq!(v["dst"]["address"], lab.node_addr("pod").to_string(), "{v}");
    assert_eq!(v["dst"]["name"], "node:ops", "{v}");
    assert_eq!(
        (v["verdict"].as_str(), v["egress"]["rule"].as_str()),
        (Some("Drop"), Some("drop-rest"))
    );
    assert_eq!(v["ingress"]["endpoint"], "ops", "{v}");
    assert_eq!(exit(&node), Some(1));
    lab.assert_tcp("pod", (lab.node_addr("pod"), 8080), TcpOutcome::TimedOut);

    // The agent's configuration: a privileged entry accepts what policy
    // drops; the live trace says so (offline has no such configuration).
    let port81 = [&to_api[..6], &["--dst-port", "81"]].concat();
    let v = json(&live(&port81));
    assert_eq!(v["verdict"], "Allow", "{v}");
    assert_eq!(v["privileged"], format!("{server}/32,tcp/81 on forward"));
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
    live_examples.push((
        "get-endpoints",
        "tollgate get endpoints -n apps".into(),
        text.into_owned(),
    ));

    // status once the first drift check has read the verdict cache's
    // counters (its line is there from then on).
    let status = poll_until(Duration::from_secs(30), || {
        let out = tollgate(&["status", "--socket", &socket]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.contains("\nverdict cache: ").then_some(text)
    })
    .expect("the verdict cache line in status");
    for expected in [
        "node:               ops\n",
        "policy source:      complete snapshot\n",
        "datapath:           in sync\n",
        "\nQUEUE ",
        " HEALTH ",
        " dns ",
        " L7 queue ",
    ] {
        assert!(
            status.contains(expected),
            "{expected:?} missing in\n{status}"
        );
    }
    live_examples.push(("status", "tollgate status".into(), status));
    readme_live(&live_examples);
    agent.stop();
}

/// The shipped kind of privileged entry, SSH from anywhere (as
/// `docker/base/configmap.yaml` writes it, no `hooks`), privileges the Node's
/// own SSH port and nothing routed: a Pod's connection to port 22 of
/// another Pod is dropped by the policy that denies it, while the Node's
/// port 22 stays reachable through a Node deny-all. The live trace agrees.
/// (The client Pod has no policy of its own, so it is no enforced
/// endpoint and the entry takes it like any host; an enforced Pod meets
/// its own policy and the Node's: `privileged::` tests that.)
#[test]
fn privileged_ssh_covers_the_node_not_routed_pods() {
    let Some(lab) = Lab::builder("privileged_ssh_covers_the_node_not_routed_pods")
        .peer("pod")
        .peer("web")
        .build()
    else {
        return;
    };
    let (pod, web) = (lab.addr("pod"), lab.addr("web"));
    for (role, port) in [("web", 22), ("node", 22), ("node", 2222)] {
        lab.serve_tcp(role, port, Service::Echo);
    }
    // Before any policy, the Pod reaches web's SSH port: the link the
    // later denial is seen on works (audit 3, L3).
    lab.assert_tcp("pod", (web, 22), TcpOutcome::Connected);
    lab.write_policy(
        "ssh.yaml",
        &format!(
            "apiVersion: v1
kind: Pod
metadata: {{name: client, namespace: apps, labels: {{app: client}}}}
spec: {{nodeName: ops}}
status: {{podIP: {pod}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: web, namespace: apps, labels: {{app: web}}}}
spec: {{nodeName: ops}}
status: {{podIP: {web}}}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: web-lockdown}}
spec:
  priority: 1
  tier: securityops
  appliedTo: [{{podSelector: {{matchLabels: {{app: web}}}}}}]
  ingress:
  - {{name: drop-all, action: Drop, from: [{{ipBlock: {{cidr: 0.0.0.0/0}}}}]}}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: node-lockdown}}
spec:
  priority: 2
  tier: securityops
  appliedTo: [{{nodeSelector: {{}}}}]
  ingress:
  - {{name: drop-all, action: Drop, from: [{{ipBlock: {{cidr: 0.0.0.0/0}}}}]}}
"
        ),
    );
    let options = lab.agent_options().node_name("ops").queues(1).args(&[
        "--set",
        "datapath.privileged=[{cidr: 0.0.0.0/0, protocol: TCP, port: 22}, {cidr: '::/0', protocol: TCP, port: 22}]",
    ]);
    let socket = options.status_socket.display().to_string();
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);

    let node = lab.node_addr("pod");
    lab.assert_tcp("pod", (node, 22), TcpOutcome::Connected);
    lab.assert_tcp("pod", (node, 2222), TcpOutcome::TimedOut);
    lab.assert_tcp("pod", (web, 22), TcpOutcome::TimedOut);
    // Nothing privileged on the forward hook.
    let state = lab.firewall_state("node");
    assert!(
        !state
            .rules()
            .any(|r| r.starts_with("-A TOLLGATE-FORWARD") && r.contains("--dport 22")),
        "a privileged rule on FORWARD:\n{state}"
    );

    let trace = |dst: &str| {
        json(&tollgate(&[
            "trace",
            "--socket",
            &socket,
            "-o",
            "json",
            "--src",
            "apps/client",
            "--dst",
            dst,
            "--protocol",
            "tcp",
            "--dst-port",
            "22",
        ]))
    };
    let routed = trace("apps/web");
    assert_eq!(routed["verdict"], "Drop", "{routed}");
    assert_eq!(
        routed["ingress"]["policy"],
        "AntreaClusterNetworkPolicy:web-lockdown"
    );
    assert!(routed.get("privileged").is_none(), "{routed}");
    let own = trace("node:ops");
    assert_eq!(own["verdict"], "Allow", "{own}");
    assert_eq!(own["privileged"], "0.0.0.0/0,tcp/22", "{own}");
    assert_eq!(
        own["ingress"]["policy"],
        "AntreaClusterNetworkPolicy:node-lockdown"
    );
    agent.stop();
}

const LIVE_MARKER: &str = "<!-- readme-live: ";

/// `README.md` and every Markdown file under `docs/`: where the live
/// blocks may be.
fn doc_files() -> Vec<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    let mut todo = vec![root.join("docs")];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Compares each `(name, command, output)` with the docs' block marked
/// `<!-- readme-live: name -->` (in `README.md` or a file under `docs/`),
/// which holds `$ command` and the output, after [`mask`]ing both; with
/// `UPDATE_README` set, writes the fresh output there instead.
fn readme_live(examples: &[(&str, String, String)]) {
    let mut docs: Vec<(std::path::PathBuf, Vec<String>)> = doc_files()
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let lines = text.lines().map(str::to_string).collect();
            (path, lines)
        })
        .collect();
    let update = std::env::var_os("UPDATE_README").is_some();
    let mut stale = Vec::new();
    let mut changed = std::collections::BTreeSet::new();
    for (name, command, output) in examples {
        let marker = format!("{LIVE_MARKER}{name} -->");
        let found: Vec<(usize, usize)> = docs
            .iter()
            .enumerate()
            .flat_map(|(f, (_, lines))| {
                let marker = &marker;
                lines
                    .iter()
                    .enumerate()
                    .filter(move |(_, l)| l.trim() == marker)
                    .map(move |(at, _)| (f, at))
            })
            .collect();
        let [(file, at)] = found[..] else {
            panic!(
                "{} blocks marked {marker} in the docs, not one",
                found.len()
            );
        };
        let (path, lines) = &mut docs[file];
        let shown = path
            .strip_prefix(env!("CARGO_MANIFEST_DIR"))
            .unwrap_or(path)
            .display()
            .to_string();
        let open = at + 1;
        assert!(
            lines[open].trim_start().starts_with("```"),
            "{shown}:{}: no fence",
            open + 1
        );
        let close = (open + 1..lines.len())
            .find(|&j| lines[j].trim_start().starts_with("```"))
            .expect("the block is closed");
        let current = lines[open + 1..close].join("\n") + "\n";
        let fresh = format!("$ {command}\n{output}");
        if mask(&current) != mask(&fresh) {
            stale.push(format!(
                "{shown}:{}: {name}\n--- docs\n{current}+++ agent\n{fresh}",
                open + 1
            ));
        }
        if update {
            lines.splice(open + 1..close, fresh.lines().map(str::to_string));
            changed.insert(file);
        }
    }
    if update {
        for file in changed {
            let (path, lines) = &docs[file];
            std::fs::write(path, lines.join("\n") + "\n").unwrap();
        }
        return;
    }
    assert!(
        stale.is_empty(),
        "live examples in the docs differ from the agent's output (UPDATE_README=1 rewrites them):\n{}",
        stale.join("\n")
    );
}

/// What stays the same from run to run: an IPv6 address (a run of hex
/// digits, dots and at least two colons: link-local ones change with every
/// interface) is `A`, every other number (times, counts, IPv4 addresses,
/// ports) `N`, the commit `C`; runs of spaces are one space and lines end
/// without them.
fn mask(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    // IPv6 addresses first.
    while let Some(start) = rest.find(|c: char| c.is_ascii_hexdigit() || c == ':') {
        let run = rest[start..]
            .find(|c: char| !(c.is_ascii_hexdigit() || c == ':' || c == '.'))
            .map_or(rest.len(), |n| start + n);
        let word_start = rest[..start]
            .chars()
            .next_back()
            .is_none_or(|c| !c.is_ascii_alphanumeric());
        out.push_str(&rest[..start]);
        let token = &rest[start..run];
        if word_start && token.matches(':').count() >= 2 {
            out.push('A');
        } else {
            out.push_str(token);
        }
        rest = &rest[run..];
    }
    out.push_str(rest);
    let text = std::mem::take(&mut out);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            while chars
                .peek()
                .is_some_and(|d| d.is_ascii_digit() || *d == '.')
            {
                chars.next();
            }
            out.push('N');
        } else if c == ' ' {
            while chars.peek() == Some(&' ') {
                chars.next();
            }
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out.lines()
        .map(|l| match l.find("(commit ") {
            Some(at) => format!("{}(commit C)", &l[..at]),
            None => l.trim_end().to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn masking_keeps_words_and_drops_numbers_commits_and_alignment() {
    assert_eq!(
        mask("version:  0.1.0 (commit 0079d4d)\nuptime:   12s\n100   3     2\n"),
        mask("version: 0.1.0 (commit unknown)\nuptime: 7s\n100 30 2   \n"),
    );
    assert_eq!(
        mask("10.104.1.2:40000 fd00:104:1::2,fe80::5c39:1fff:fe4c:f333 ::1"),
        "N:N A,A A"
    );
    assert_eq!(mask("node: ops, ad:be"), "node: ops, ad:be");
    assert_ne!(mask("verdict: Allow"), mask("verdict: Drop"));
}
