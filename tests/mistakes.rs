//! No silent mistakes, through the real binary (no root): what is valid but
//! selects nothing or leaves the order to chance is warned about by
//! `validate`; misspelt kinds, versions, names and YAML say what was meant
//! or where; the offline commands read files within the agent's limits,
//! set as the agent takes them. The agent's side (the same warnings logged
//! on each reload and listed by `status`) is tested in
//! `tests/netns/warnings.rs`.
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

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const INVENTORY: &str = "apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {app: web}}
spec: {nodeName: n1}
status: {podIP: 10.1.0.2}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: shop, labels: {app: client, role: dev}}
spec: {nodeName: n1}
status: {podIP: 10.1.0.3}
";

/// An ACNP of Tier application at priority 5 on `app: web`, one ingress
/// rule with `action` from Pods labelled `peer`.
fn acnp(name: &str, applied: &str, action: &str, peer: &str) -> String {
    format!(
        "---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: {name}}}
spec:
  priority: 5
  tier: application
  appliedTo: [{{podSelector: {{matchLabels: {applied}}}}}]
  ingress:
  - {{name: {name}-in, action: {action}, from: [{{podSelector: {{matchLabels: {peer}}}}}]}}
"
    )
}

fn directory(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

#[test]
fn validate_names_label_key_typos_in_peers_and_applied_to_with_the_nearest_key() {
    let policies = format!(
        "{}{}",
        acnp("peer-typo", "{app: web}", "Allow", "{apps: client}"),
        acnp("applied-typo", "{ap: web}", "Allow", "{app: client}")
    );
    let dir = directory(&[("inventory.yaml", INVENTORY), ("p.yaml", &policies)]);
    let out = tollgate(&["validate", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let file = dir.path().join("p.yaml");
    let file = file.display();
    assert_eq!(
        stderr(&out).lines().collect::<Vec<_>>(),
        [
            format!("warning: {file}: ClusterNetworkPolicy peer-typo: spec.ingress[0].from[0].podSelector.matchLabels.apps: label key `apps` is on no Pod of the inventory: the selector selects no Pod (did you mean `app`?)"),
            format!("warning: {file}: ClusterNetworkPolicy applied-typo: spec.appliedTo[0].podSelector.matchLabels.ap: label key `ap` is on no Pod of the inventory: the selector selects no Pod (did you mean `app`?)"),
            format!("warning: {file}: ClusterNetworkPolicy applied-typo: spec: selects no endpoint of the inventory (appliedTo or podSelector matches no Pod, Node or ExternalEntity)"),
        ]
    );
}

#[test]
fn validate_names_the_endpoints_and_rules_two_policies_leave_in_no_order() {
    let policies = format!(
        "{}{}",
        acnp("allow-clients", "{app: web}", "Allow", "{app: client}"),
        acnp("drop-dev", "{app: web}", "Drop", "{role: dev}")
    );
    let dir = directory(&[("inventory.yaml", INVENTORY), ("p.yaml", &policies)]);
    let out = tollgate(&["validate", dir.path().to_str().unwrap()]);
    let file = dir.path().join("p.yaml");
    assert_eq!(
        stderr(&out),
        format!(
            "warning: {0}: ClusterNetworkPolicy drop-dev: spec.ingress[0]: same Tier `application`, priority 5 and rule index as rule ingress[0] `allow-clients-in` of AntreaClusterNetworkPolicy:allow-clients ({0}), on shop/web: the rules can match the same traffic with different actions (Drop and Allow), in an order Antrea leaves undefined (tollgate evaluates allow-clients's first)\n",
            file.display()
        )
    );
    // Priorities apart: ordered, nothing to say.
    let ordered = policies.replacen("priority: 5", "priority: 4", 1);
    let dir = directory(&[("inventory.yaml", INVENTORY), ("p.yaml", &ordered)]);
    let out = tollgate(&["validate", dir.path().to_str().unwrap()]);
    assert_eq!(stderr(&out), "");
}

#[test]
fn misspelt_kinds_unknown_versions_and_yaml_syntax_say_what_and_where() {
    let dir = directory(&[
        ("a.yaml", "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolcy\nmetadata: {name: x}\n"),
        ("b.yaml", "apiVersion: crd.antrea.io/v1beta3\nkind: Group\nmetadata: {name: g, namespace: shop}\n"),
        ("c.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels: {app: web\n"),
    ]);
    let out = tollgate(&["validate", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let at = |name: &str| dir.path().join(name).display().to_string();
    assert_eq!(
        stdout(&out),
        format!(
            "{}: document x: kind: crd.antrea.io/v1beta1 ClusterNetworkPolcy is not a kind tollgate reads: did you mean ClusterNetworkPolicy?\n\
             {}: document shop/g: kind: crd.antrea.io/v1beta3 Group is not a kind tollgate reads: tollgate reads Group as crd.antrea.io/v1beta1, crd.antrea.io/v1alpha1, crd.antrea.io/v1alpha3\n\
             {}: line 5, column 11: YAML syntax: unclosed bracket '{{'\n5 |   labels: {{app: web\n  |           ^\n",
            at("a.yaml"),
            at("b.yaml"),
            at("c.yaml"),
        )
    );
}

#[test]
fn trace_and_get_suggest_the_nearest_endpoint_name() {
    let trace = tollgate(&[
        "trace",
        "--policies",
        "rules/",
        "--src",
        "frontend/clinet1",
        "--dst",
        "10.99.3.2",
        "--protocol",
        "tcp",
        "--dst-port",
        "80",
    ]);
    assert_eq!(trace.status.code(), Some(2));
    assert!(
        stderr(&trace).ends_with("did you mean \"frontend/client1\"?\n"),
        "{}",
        stderr(&trace)
    );
    let get = tollgate(&[
        "get",
        "endpoints",
        "--policies",
        "rules/",
        "-n",
        "frontend",
        "-p",
        "clinet1",
    ]);
    assert_eq!(
        stderr(&get),
        "warning: no endpoint frontend/clinet1 on this node (did you mean `frontend/client1`?)\n"
    );
    let get = tollgate(&["get", "policies", "--policies", "rules/", "-n", "frontnd"]);
    assert_eq!(stderr(&get), "", "-n alone lists the Namespace's policies");
    let get = tollgate(&["get", "endpoints", "--policies", "rules/", "-n", "frontnd"]);
    assert_eq!(
        stderr(&get),
        "warning: no endpoint in Namespace frontnd on this node (did you mean `frontend`?)\n"
    );
}

/// A file over the default 4 MiB: the agent reads it with a larger
/// `policyFiles.maxFileBytes`, and so do `validate`, `trace` and `get`
/// when given the same settings (`--set` or `--config`).
#[test]
fn offline_commands_take_the_agents_limits_and_the_error_names_the_setting() {
    let mut big = String::from(INVENTORY);
    // Padding comments: a cluster export this size is ordinary.
    let line = format!("# {}\n", "x".repeat(1022));
    while big.len() <= 5 << 20 {
        big.push_str(&line);
    }
    let dir = directory(&[("export.yaml", &big)]);
    let path = dir.path().to_str().unwrap();
    let out = tollgate(&["validate", path]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out)
            .contains("more than the limit of 4194304 bytes per file (policyFiles.maxFileBytes)"),
        "{}",
        stdout(&out)
    );
    let set = [
        "--set",
        "policyFiles.maxFileBytes=8388608",
        "--set",
        "policyFiles.maxTotalBytes=16777216",
    ];
    let out = tollgate(&[&["validate", path][..], &set].concat());
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let config = dir.path().join("config.yaml.conf");
    std::fs::write(&config, "policyFiles:\n  maxFileBytes: 8388608\n").unwrap();
    let with_config = ["--config", config.to_str().unwrap()];
    let trace = [
        "trace",
        "--policies",
        path,
        "--src",
        "shop/client",
        "--dst",
        "shop/web",
        "--protocol",
        "tcp",
        "--dst-port",
        "80",
    ];
    let out = tollgate(&[&trace[..], &with_config].concat());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("verdict: Allow"),
        "{}",
        stdout(&out)
    );
    let get = ["get", "endpoints", "--policies", path, "--node-name", "n1"];
    let out = tollgate(&[&get[..], &set].concat());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("shop/web"), "{}", stdout(&out));
    // A wrong key is the configuration's error, as `run` says it.
    let out = tollgate(&["validate", path, "--set", "policyFiles.maxFileByte=1"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("maxFileByte"), "{}", stderr(&out));
    assert!(Path::new(path).exists());
}
