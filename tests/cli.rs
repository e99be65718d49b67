//! The offline subcommands through the real binary: `validate` on every
//! example in `rules/` and on broken input, `trace` in text and JSON, and
//! `get policies` ordering, the exit codes of `tollgate run` on bad
//! arguments, configuration and policies, and `tollgate status` against an
//! agent that does not answer (no root needed).
#![allow(clippy::disallowed_methods)] // the tests run the tollgate binary.

use std::path::Path;
use std::process::{Command, Output};

fn tollgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run tollgate")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn every_rules_file_validates_alone_and_together() {
    let out = tollgate(&["validate", "rules/"]);
    assert!(out.status.success(), "{}", stdout(&out));
    assert!(stdout(&out).starts_with("valid: "), "{}", stdout(&out));
    for entry in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("rules")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") && !path.ends_with("inventory.yaml") {
            // Policies need the inventory only for compilation, not validation.
            let out = tollgate(&["validate", path.to_str().unwrap(), "rules/inventory.yaml"]);
            assert!(out.status.success(), "{}: {}", path.display(), stdout(&out));
        }
    }
}

#[test]
fn invalid_policies_exit_1_with_one_line_per_problem() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.yaml");
    std::fs::write(
        &file,
        "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: bad}\nspec:\n  priority: 0\n  tier: nosuchtier\n  appliedTo: [{podSelector: {}}]\n  ingress:\n  - action: Allow\n    from: [{ipBlock: {cidr: 10.0.0.0/24, except: [10.1.0.0/24]}}]\n",
    )
    .unwrap();
    let out = tollgate(&["validate", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    let prefix = format!("{}: ClusterNetworkPolicy bad: ", file.display());
    assert!(lines.iter().all(|l| l.starts_with(&prefix)), "{text}");
    assert!(text.contains("spec.tier:"), "{text}");
    assert!(text.contains("spec.priority:"), "{text}");
    assert!(
        text.contains("spec.ingress[0].from[0].ipBlock.except[0]:"),
        "{text}"
    );
}

#[test]
fn trace_names_the_deciding_rule_in_json() {
    let out = tollgate(&[
        "trace",
        "--policies",
        "rules/",
        "--src",
        "10.99.2.2",
        "--dst",
        "10.99.3.2",
        "--protocol",
        "tcp",
        "--dst-port",
        "80",
        "--output",
        "json",
    ]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["verdict"], "Reject");
    assert_eq!(
        v["ingress"]["policy"],
        "AntreaClusterNetworkPolicy:tenant-isolation"
    );
    assert_eq!(v["ingress"]["kind"], "AntreaClusterNetworkPolicy");
    assert_eq!(v["ingress"]["tier"], "securityops");
    assert_eq!(v["ingress"]["rule"], "reject-from-dev");
    assert_eq!(v["ingress"]["action"], "Reject");
    assert_eq!(v["egress"]["outcome"], "NotEnforced");
}

#[test]
fn trace_fqdn_and_pass_to_kubernetes_policy() {
    let fqdn = |name: &str| {
        let out = tollgate(&[
            "trace",
            "--policies",
            "rules/",
            "--src",
            "10.99.1.2",
            "--dst",
            "203.0.113.9",
            "--protocol",
            "tcp",
            "--dst-port",
            "80",
            "--fqdn",
            name,
            "--output",
            "json",
        ]);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    assert_eq!(fqdn("www.allowed.test")["verdict"], "Allow");
    assert_eq!(
        fqdn("www.allowed.test")["egress"]["rule"],
        "allow-allowed-test"
    );
    assert_eq!(fqdn("www.blocked.test")["verdict"], "Drop");

    let out = tollgate(&[
        "trace",
        "--policies",
        "rules/",
        "--src",
        "10.99.1.2",
        "--dst",
        "10.99.3.2",
        "--protocol",
        "tcp",
        "--dst-port",
        "8080",
    ]);
    let text = stdout(&out);
    assert!(text.starts_with("verdict: Allow"), "{text}");
    assert!(
        text.contains("K8sNetworkPolicy:backend/web-from-prod-clients"),
        "{text}"
    );
    assert!(
        text.contains("passed by AntreaClusterNetworkPolicy:tenant-isolation rule pass-from-prod"),
        "{text}"
    );
}

#[test]
fn trace_evaluates_http_requests_against_l7_rules() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy("rules/l7-http.yaml", dir.path().join("l7.yaml")).unwrap();
    std::fs::write(
        dir.path().join("pods.yaml"),
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: backend, labels: {env: prod}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: backend, labels: {app: web}}\nstatus: {podIP: 10.0.0.2}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: c, namespace: backend, labels: {app: client}}\nstatus: {podIP: 10.0.0.3}\n",
    )
    .unwrap();
    let run = |method: &str, path: &str| {
        let out = tollgate(&[
            "trace",
            "--policies",
            dir.path().to_str().unwrap(),
            "--src",
            "10.0.0.3",
            "--dst",
            "10.0.0.2",
            "--protocol",
            "tcp",
            "--dst-port",
            "80",
            "--http-method",
            method,
            "--http-host",
            "foo.bar.com",
            "--http-path",
            path,
            "--output",
            "json",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["verdict"].clone()
    };
    assert_eq!(run("GET", "/admin"), "Allow");
    assert_eq!(run("POST", "/api/v2/items"), "Allow");
    assert_eq!(run("POST", "/admin"), "Drop");
    assert_eq!(run("DELETE", "/api/v2/../admin"), "Drop");
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            stdout(out),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// `trace --policies rules/` with these flags.
fn trace(flags: &[&str]) -> Output {
    let args = ["trace", "--policies", "rules/"].iter().chain(flags);
    tollgate(&args.copied().collect::<Vec<_>>())
}

#[test]
fn trace_takes_endpoint_names_named_ports_and_protocols_in_any_case() {
    let by_name = trace(&[
        "--src",
        "untrusted/client2",
        "--dst",
        "backend/web",
        "--protocol",
        "TCP",
        "--dst-port",
        "http",
        "-o",
        "json",
    ]);
    assert!(
        by_name.status.success(),
        "{}",
        String::from_utf8_lossy(&by_name.stderr)
    );
    let v = json(&by_name);
    assert_eq!(v["verdict"], "Reject");
    assert_eq!(v["src"]["address"], "10.99.2.2");
    assert_eq!(v["src"]["name"], "untrusted/client2");
    assert_eq!(v["dst"]["address"], "10.99.3.2");
    assert_eq!(v["dstPort"], 80);
    assert_eq!(v["ingress"]["rule"], "reject-from-dev");
    // The same flow by address and number decides the same.
    let by_address = trace(&[
        "--src",
        "10.99.2.2",
        "--dst",
        "10.99.3.2",
        "--protocol",
        "tcp",
        "--dst-port",
        "80",
        "-o",
        "json",
    ]);
    assert_eq!(json(&by_address), v);
    // IPv6 when a side is given as an IPv6 address; the Node by name.
    let v6 = json(&trace(&[
        "--src",
        "fd00:99:2::2",
        "--dst",
        "backend/web",
        "--protocol",
        "Tcp",
        "--dst-port",
        "echo",
        "-o",
        "json",
    ]));
    assert_eq!(
        (v6["dst"]["address"].as_str(), v6["dstPort"].as_u64()),
        (Some("fd00:99:3::2"), Some(8080))
    );
    let node = json(&trace(&[
        "--src",
        "frontend/client1",
        "--dst",
        "node:tg-node",
        "--protocol",
        "icmp",
        "-o",
        "json",
    ]));
    assert_eq!(node["ingress"]["endpoint"], "tg-node");
    assert_eq!(node["ingress"]["rule"], "drop-ping");
    // IGMP is a protocol of its own.
    let igmp = json(&trace(&[
        "--src",
        "frontend/client1",
        "--dst",
        "224.0.0.1",
        "--protocol",
        "IGMP",
        "--igmp-type",
        "0x16",
        "-o",
        "json",
    ]));
    assert_eq!(igmp["protocol"], "IGMP");
}

/// Each rule consulted that did not match says why, under it.
#[test]
fn trace_verbose_lists_every_rule_consulted_in_order() {
    let flags = [
        "--src",
        "untrusted/client2",
        "--dst",
        "backend/web",
        "--protocol",
        "tcp",
        "--dst-port",
        "80",
    ];
    let out = trace(&[&flags[..], &["--verbose"]].concat());
    let text = stdout(&out);
    let consulted: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("    "))
        .map(str::trim)
        .collect();
    assert_eq!(
        consulted,
        [
            "no rule consulted",
            "1. AntreaNetworkPolicy:backend/web-read-only-and-api rule allow-read-and-api (tier securityops): no match (Allow)",
            "source 10.99.2.2 is none of the rule's peers: 2 selected addresses (10.99.1.2, fd00:99:1::2)",
            "2. AntreaClusterNetworkPolicy:tenant-isolation rule pass-from-prod (tier securityops): no match (Pass)",
            "source 10.99.2.2 is none of the rule's peers: 4 selected addresses (10.99.1.2, 10.99.3.2, fd00:99:1::2, ...)",
            "3. AntreaClusterNetworkPolicy:tenant-isolation rule reject-from-dev (tier securityops): matched (Reject)",
            "isolated by K8sNetworkPolicy:backend/web-from-prod-clients: past the Antrea tiers, only their rules allow",
        ],
        "{text}"
    );
    assert!(
        text.contains(
            "  flow: TCP 10.99.2.2:40000 (untrusted/client2) -> 10.99.3.2:80 (backend/web)\n"
        ),
        "{text}"
    );
    // Without --verbose only the deciding rule; JSON always carries all.
    assert!(!stdout(&trace(&flags)).contains("1. "));
    let v = json(&trace(&[&flags[..], &["-o", "json"]].concat()));
    let consulted = v["ingress"]["consulted"].as_array().unwrap();
    assert_eq!(consulted.len(), 3);
    assert_eq!(consulted[2]["matched"], true);
    assert_eq!(consulted[1]["action"], "Pass");
}

#[test]
fn trace_exit_codes_for_scripts() {
    let code = |flags: &[&str]| trace(flags).status.code();
    let flow = |dst: &'static str, port: &'static str| {
        [
            "--src",
            "frontend/client1",
            "--dst",
            dst,
            "--protocol",
            "tcp",
            "--dst-port",
            port,
        ]
    };
    let allowed = flow("backend/web", "80");
    let denied = flow("10.99.9.9", "80");
    assert_eq!(code(&[&allowed[..], &["--exit-code"]].concat()), Some(0));
    assert_eq!(code(&[&denied[..], &["--exit-code"]].concat()), Some(1));
    // Without --exit-code a denied flow is a successful answer.
    assert_eq!(code(&denied), Some(0));
    // Errors are 2: an unknown name, a port the destination does not
    // name, IGMP over IPv6, invalid policies.
    for (flags, message) in [
        (
            flow("backend/nobody", "80"),
            "\"backend/nobody\" is neither an address nor an endpoint",
        ),
        (
            flow("backend/web", "nosuchport"),
            "the destination backend/web has no container port named \"nosuchport\" for TCP",
        ),
    ] {
        let out = trace(&[&flags[..], &["--exit-code"]].concat());
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(message), "{stderr}");
        assert!(stdout(&out).is_empty());
    }
    let igmp6 = [
        "--src",
        "fd00::1",
        "--dst",
        "ff02::1",
        "--protocol",
        "igmp",
        "--exit-code",
    ];
    assert_eq!(code(&igmp6), Some(2));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.yaml"), "kind: Nope\n").unwrap();
    let out = tollgate(&[
        "trace",
        "--policies",
        dir.path().to_str().unwrap(),
        "--src",
        "10.0.0.1",
        "--dst",
        "10.0.0.2",
        "--protocol",
        "icmp",
        "--exit-code",
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        tollgate(&[
            "trace",
            "--policies",
            "rules/",
            "--src",
            "10.0.0.1",
            "--dst",
            "10.0.0.2",
            "--protocol",
            "gre"
        ])
        .status
        .code(),
        Some(2)
    );
    // The Node's identity is the agent's when it is asked.
    let out = tollgate(&[
        "trace",
        "--socket",
        "/nonexistent.sock",
        "--node-name",
        "x",
        "--src",
        "10.0.0.1",
        "--dst",
        "10.0.0.2",
        "--protocol",
        "icmp",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the agent traces as its own Node"));
}

#[test]
fn get_filters_by_namespace_and_pod_in_every_format() {
    let get = |args: &[&str]| {
        let args = ["get"].iter().chain(args).chain(&["--policies", "rules/"]);
        let out = tollgate(&args.copied().collect::<Vec<_>>());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    let first_column = |out: &Output| -> Vec<String> {
        stdout(out)
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().next().unwrap().to_string())
            .collect()
    };
    // The policies applied to backend/web, in evaluation order.
    let web = get(&["policies", "-n", "backend", "-p", "web"]);
    assert_eq!(
        first_column(&web),
        [
            "AntreaNetworkPolicy:backend/web-read-only-and-api",
            "AntreaClusterNetworkPolicy:tenant-isolation",
            "K8sNetworkPolicy:backend/web-from-prod-clients",
            "AntreaClusterNetworkPolicy:prod-default-deny",
        ]
    );
    // A long list is summarised in the table, whole in wide and JSON.
    let table = stdout(&get(&["policies"]));
    assert!(
        table.contains(" 4: allow-dns,allow-cluster,allow-allowed-test,...\n"),
        "{table}"
    );
    let wide = stdout(&get(&["policies", "-o", "wide"]));
    assert!(
        wide.contains(" allow-dns,allow-cluster,allow-allowed-test,"),
        "{wide}"
    );
    assert!(!wide.contains(",..."), "{wide}");
    let all: serde_json::Value =
        serde_json::from_slice(&get(&["policies", "-o", "json"]).stdout).unwrap();
    let egress = all
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["policy"]["name"] == "client-egress")
        .unwrap();
    assert_eq!(egress["ruleNames"].as_array().unwrap().len(), 4);
    assert_eq!(egress["appliedTo"][0], "frontend/client1");
    assert_eq!(egress["tierPriority"], 250);
    let yaml = stdout(&get(&[
        "policies", "-n", "backend", "-p", "web", "-o", "yaml",
    ]));
    assert!(
        yaml.starts_with("- policy:\n    kind: AntreaNetworkPolicy\n"),
        "{yaml}"
    );
    // Endpoints: the Node, then the local Pods by Namespace and name, with
    // their policies.
    let endpoints = get(&["endpoints"]);
    assert_eq!(
        first_column(&endpoints),
        [
            "tg-node",
            "backend/web",
            "frontend/client1",
            "infra/dns",
            "untrusted/client2"
        ]
    );
    let text = stdout(&endpoints);
    assert!(text.contains("tg-node           Node 10.99.1.1              AntreaClusterNetworkPolicy:node-protection\n"), "{text}");
    assert!(
        text.contains(" 4: AntreaNetworkPolicy:backend/web-read-only-and-api,"),
        "{text}"
    );
    let backend: serde_json::Value =
        serde_json::from_slice(&get(&["endpoints", "-n", "backend", "-o", "json"]).stdout).unwrap();
    assert_eq!(backend.as_array().unwrap().len(), 1);
    assert_eq!(backend[0]["endpoint"], "backend/web");
    assert_eq!(backend[0]["addresses"][1], "fd00:99:3::2");
    assert_eq!(backend[0]["policies"].as_array().unwrap().len(), 4);
    let nothing = get(&["endpoints", "-n", "backend", "-p", "nobody"]);
    assert_eq!(stdout(&nothing), "ENDPOINT KIND ADDRESSES POLICIES\n");
}

#[test]
fn get_policies_sorts_by_effective_priority() {
    let out = tollgate(&[
        "get",
        "policies",
        "--policies",
        "rules/",
        "--sort-by",
        "effectivePriority",
    ]);
    assert!(out.status.success());
    let text = stdout(&out);
    let sources: Vec<&str> = text
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(
        sources,
        [
            "AntreaClusterNetworkPolicy:node-protection",
            "AntreaNetworkPolicy:backend/web-read-only-and-api",
            "AntreaClusterNetworkPolicy:tenant-isolation",
            "ClusterNetworkPolicy:egress-allowlist",
            "AntreaClusterNetworkPolicy:client-egress",
            "K8sNetworkPolicy:backend/web-from-prod-clients",
            "AntreaClusterNetworkPolicy:prod-default-deny",
        ]
    );
}

#[test]
fn status_without_an_agent_and_bad_log_level_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("none.sock");
    for args in [
        vec!["status", "--socket", socket.to_str().unwrap()],
        vec!["get", "policies", "--socket", socket.to_str().unwrap()],
        vec!["get", "endpoints", "--socket", socket.to_str().unwrap()],
        vec![
            "trace",
            "--socket",
            socket.to_str().unwrap(),
            "--src",
            "a/b",
            "--dst",
            "10.0.0.1",
            "--protocol",
            "icmp",
            "--exit-code",
        ],
    ] {
        let out = tollgate(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("is `tollgate run` running?"), "{stderr}");
    }
    let out = tollgate(&[
        "run",
        "--policies",
        dir.path().to_str().unwrap(),
        "--log-level",
        "tollgate=loud",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--log-level"));
}

#[test]
fn status_of_an_agent_that_never_answers_says_so_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("stuck.sock");
    // Bound but never accepting, as a stuck agent's socket is.
    let _stuck = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let started = std::time::Instant::now();
    let out = tollgate(&["status", "--socket", socket.to_str().unwrap()]);
    assert!(started.elapsed() < std::time::Duration::from_secs(8));
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let expected = format!(
        "status socket {}: no answer within 5s (the agent is stuck or overloaded)",
        socket.display()
    );
    assert!(stderr.contains(&expected), "{stderr}");
}

#[test]
fn run_needs_exactly_one_policy_source() {
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().to_str().unwrap();
    for args in [
        vec!["run"],
        vec!["run", "--policies", policies, "--kubernetes"],
        vec!["run", "--policies", policies, "--kubeconfig", "/k"],
    ] {
        let out = tollgate(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("--policies") || stderr.contains("--kube"),
            "{stderr}"
        );
    }
}

#[test]
fn invalid_config_exits_with_status_2() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, "failMode: sideways\n").unwrap();
    let out = tollgate(&[
        "run",
        "--policies",
        dir.path().to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("config.yaml"), "{stderr}");
}

#[test]
fn invalid_policies_at_start_exit_with_status_1() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("policy.yaml"),
        "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: protect-node
spec:
  priority: 5
  tier: securityops
  appliedTo:
    - nodeSelector:
        matchLabels:
          role: smoke
  ingress:
    - action: Maybe
      from:
        - ipBlock:
            cidr: 10.78.0.0/24
      ports:
        - protocol: TCP
          port: 81
          endPort: 82
",
    )
    .unwrap();
    let out = tollgate(&["run", "--policies", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("policies are invalid") && stderr.contains("policy.yaml"),
        "{stderr}"
    );
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn validate_warns_on_empty_directories_missing_inventory_and_policies_selecting_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap().to_string();
    let out = tollgate(&["validate", &path]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!(
            "warning: {path}: no objects found: no policy applies, every connection is allowed\n"
        )
    );

    let policies = dir.path().join("policies.yaml");
    std::fs::write(
        &policies,
        "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: nobody}\nspec:\n  priority: 5\n  tier: application\n  appliedTo: [{podSelector: {matchLabels: {app: nosuchapp}}}]\n  ingress: [{action: Drop, from: [{ipBlock: {cidr: 10.0.0.0/8}}]}]\n---\napiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: web}\nspec:\n  priority: 5\n  tier: application\n  appliedTo: [{podSelector: {matchLabels: {app: web}}}]\n  ingress: [{action: Drop, from: [{ipBlock: {cidr: 10.0.0.0/8}}]}]\n---\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: elsewhere, namespace: shop}\nspec:\n  podSelector: {matchLabels: {app: db}}\n  policyTypes: [Ingress]\n",
    )
    .unwrap();
    let out = tollgate(&["validate", &path]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!("warning: {path}: no inventory (no Pod, Namespace or Node): appliedTo and peer selectors cannot be checked\n")
    );
    // A policy file validated alone needs no inventory: no warning.
    let out = tollgate(&["validate", policies.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");

    std::fs::write(
        dir.path().join("inventory.yaml"),
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: web-1, namespace: shop, labels: {app: web}}\nspec: {nodeName: node-a, containers: [{name: c}]}\nstatus: {podIPs: [{ip: 10.1.0.5}]}\n",
    )
    .unwrap();
    let out = tollgate(&["validate", &path]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let warnings = stderr(&out);
    let lines: Vec<&str> = warnings.lines().collect();
    let origin = policies.display();
    assert_eq!(
        lines,
        [
            format!("warning: {origin}: ClusterNetworkPolicy nobody: spec: selects no endpoint of the inventory (appliedTo or podSelector matches no Pod, Node or ExternalEntity)"),
            format!("warning: {origin}: NetworkPolicy.networking.k8s.io shop/elsewhere: spec: selects no endpoint of the inventory (appliedTo or podSelector matches no Pod, Node or ExternalEntity)"),
        ],
        "{warnings}"
    );
    assert!(
        stdout(&out).starts_with("valid: 5 object(s)"),
        "{}",
        stdout(&out)
    );

    // The examples of rules/ select something each: no warning.
    let out = tollgate(&["validate", "rules/"]);
    assert_eq!(stderr(&out), "", "{}", stderr(&out));
}

/// An ACNP naming a ClusterGroup that is not defined (yet) is valid, as
/// Antrea admits it, and enforced in part: `validate` exits 0 and says so
/// in a `warning:` line on stderr.
#[test]
fn validate_warns_on_a_reference_to_a_missing_cluster_group() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dangling.yaml");
    std::fs::write(
        &file,
        "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: to-db}\nspec:\n  priority: 5\n  tier: application\n  appliedTo: [{podSelector: {}}]\n  egress:\n  - action: Allow\n    to: [{group: db-servers}]\n",
    )
    .unwrap();
    let out = tollgate(&["validate", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let warnings = stderr(&out);
    let lines: Vec<&str> = warnings.lines().collect();
    assert_eq!(lines.len(), 1, "{warnings}");
    assert!(
        lines[0].starts_with("warning: ")
            && lines[0].contains("ClusterNetworkPolicy to-db")
            && lines[0].contains("spec.egress[0].to[0].group")
            && lines[0].contains("db-servers"),
        "{warnings}"
    );
    assert!(
        stdout(&out).starts_with("valid: 1 object(s)"),
        "{}",
        stdout(&out)
    );
}

/// Without `--policies` and `--socket`, `trace` asks the agent at the
/// default socket; with none there it says which path it tried, exit 2.
#[test]
fn trace_without_policies_asks_the_default_socket() {
    let default = tollgate::status::DEFAULT_SOCKET;
    if Path::new(default).exists() {
        eprintln!("{default} exists on this host: an agent may answer; not checked");
        return;
    }
    let out = tollgate(&[
        "trace",
        "--src",
        "10.0.0.1",
        "--dst",
        "10.0.0.2",
        "--protocol",
        "udp",
        "--dst-port",
        "53",
        "--exit-code",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = stderr(&out);
    assert!(
        stderr.contains(&format!("status socket {default}: "))
            && stderr.contains("is `tollgate run` running?"),
        "{stderr}"
    );
}

/// A Kubernetes deny-all has no rule: `trace -v` names it as the policy
/// isolating the endpoint, in text and JSON.
#[test]
fn trace_verbose_names_a_deny_all_that_isolates_without_rules() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("deny-all.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: db, namespace: bank, labels: {app: db}}\nstatus: {podIP: 10.1.0.5}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: app, namespace: bank, labels: {app: app}}\nstatus: {podIP: 10.1.0.6}\n---\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: deny-all, namespace: bank}\nspec:\n  podSelector: {}\n  policyTypes: [Ingress]\n",
    )
    .unwrap();
    let path = dir.path().to_str().unwrap();
    let flags = [
        "trace",
        "--policies",
        path,
        "--src",
        "bank/app",
        "--dst",
        "bank/db",
        "--protocol",
        "tcp",
        "--dst-port",
        "5432",
    ];
    let text = stdout(&tollgate(&[&flags[..], &["-v"]].concat()));
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        [
            "verdict: Drop",
            "  flow: TCP 10.1.0.6:40000 (bank/app) -> 10.1.0.5:5432 (bank/db)",
            "  Egress [bank/app]: no policy applies",
            "    no rule consulted",
            "  Ingress [bank/db]: Drop: isolated by K8sNetworkPolicy:bank/deny-all and no rule allows it",
            "    no rule consulted",
            "    isolated by K8sNetworkPolicy:bank/deny-all: past the Antrea tiers, only their rules allow",
        ],
        "{text}"
    );
    let v = json(&tollgate(&[&flags[..], &["-o", "json"]].concat()));
    assert_eq!(
        v["ingress"]["isolatedBy"],
        serde_json::json!(["K8sNetworkPolicy:bank/deny-all"])
    );
    assert_eq!(v["ingress"]["outcome"], "K8sDefaultDeny");
}
