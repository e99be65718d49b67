//! `tollgate diff` and `tollgate get matrix` through the real binary, on
//! the demo lab (`rules/`) and changed copies of it: every output format,
//! `--expand`, `--exit-code`/`--fail-on`, a git revision as a side,
//! `--inventory`; and the matrix in every format. The exactness of the
//! comparison itself is the core's property test (`review::tests`); the
//! live agent as a side is the netns `review` test.
#![allow(clippy::disallowed_methods)] // the tests run the tollgate binary and git.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn tollgate_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run tollgate")
}

fn tollgate(args: &[&str]) -> Output {
    tollgate_in(Path::new(env!("CARGO_MANIFEST_DIR")), args)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn rules() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("rules")
}

/// A copy of the lab in `dir/name`, `edit` applied to each file's text.
fn lab_copy(dir: &Path, name: &str, edit: impl Fn(&str, String) -> String) -> PathBuf {
    let to = dir.join(name);
    std::fs::create_dir_all(&to).unwrap();
    for entry in std::fs::read_dir(rules()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let file = path.file_name().unwrap().to_str().unwrap().to_string();
            let text = edit(&file, std::fs::read_to_string(&path).unwrap());
            std::fs::write(to.join(&file), text).unwrap();
        }
    }
    to
}

/// The lab with tenant isolation dropping instead of rejecting (2 rows
/// changed) and the untrusted Namespace under the egress allowlist
/// (closes the client's egress).
fn changed(dir: &Path) -> PathBuf {
    lab_copy(dir, "new", |file, text| match file {
        "tenant-isolation.yaml" => text.replace("action: Reject", "action: Drop"),
        "inventory.yaml" => text.replace(
            "  name: untrusted\n  labels: {env: dev, egress: open}",
            "  name: untrusted\n  labels: {env: dev, egress: allowlist}",
        ),
        _ => text,
    })
}

fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(out)))
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn the_json_contract_names_every_change_with_its_deciding_rules() {
    let dir = tempfile::tempdir().unwrap();
    let new = changed(dir.path());
    let report = json(&tollgate(&[
        "diff",
        path(&rules()),
        path(&new),
        "-o",
        "json",
    ]));
    let summary = &report["summary"];
    assert_eq!(summary["opened"], 0, "{report:#}");
    assert_eq!(summary["changed"], 2, "{report:#}");
    assert!(summary["closed"].as_u64().unwrap() > 0, "{report:#}");
    let changes = report["changes"].as_array().unwrap();
    assert_eq!(
        changes.len() as u64,
        summary["closed"].as_u64().unwrap() + 2
    );
    // Reject -> Drop of the client to the web server, both rules named.
    let web = changes
        .iter()
        .find(|c| c["to"] == serde_json::json!(["backend/web"]))
        .expect("a change to backend/web");
    assert_eq!(web["from"], serde_json::json!(["untrusted/client2"]));
    assert_eq!(web["protocol"], "any");
    assert_eq!(web["ports"], serde_json::json!([]));
    assert_eq!(web["before"]["verdict"], "Reject");
    assert_eq!(
        web["before"]["rule"],
        "AntreaClusterNetworkPolicy:tenant-isolation rule reject-from-dev (tier securityops)"
    );
    assert_eq!(web["after"]["verdict"], "Drop");
    assert_eq!(
        web["after"]["rule"],
        "ClusterNetworkPolicy:egress-allowlist rule deny-everything-else (tier Admin)"
    );
    assert_eq!(web["uncertain"], Value::Null);
    // DNS stays allowed; everything else to the DNS Pod closes.
    let dns: Vec<&Value> = changes
        .iter()
        .filter(|c| c["to"] == serde_json::json!(["infra/dns"]))
        .collect();
    assert!(dns.iter().all(|c| c["before"]["verdict"] == "Allow"
        && c["before"]["rule"].is_null()
        && c["after"]["verdict"] == "Drop"));
    let udp = dns.iter().find(|c| c["protocol"] == "UDP").unwrap();
    assert_eq!(udp["ports"], serde_json::json!(["1-52", "54-65535"]));
    // Every field of the contract is there.
    for change in changes {
        for key in [
            "from",
            "to",
            "protocol",
            "ports",
            "before",
            "after",
            "uncertain",
        ] {
            assert!(change.get(key).is_some(), "{key} missing: {change:#}");
        }
    }

    let expanded = json(&tollgate(&[
        "diff",
        path(&rules()),
        path(&new),
        "-o",
        "json",
        "--expand",
    ]));
    let rows = expanded["changes"].as_array().unwrap();
    assert!(rows.len() > changes.len());
    assert!(rows.iter().all(
        |c| c["from"].as_array().unwrap().len() == 1 && c["to"].as_array().unwrap().len() == 1
    ));
}

/// Every format carries the same rows: YAML the same document as JSON,
/// CSV a line per row, Markdown a table line per row, dot an edge per
/// pair, coloured by the direction of the change.
#[test]
fn every_output_format_carries_the_same_rows() {
    let dir = tempfile::tempdir().unwrap();
    let new = changed(dir.path());
    let run = |format: &str| tollgate(&["diff", path(&rules()), path(&new), "-o", format]);
    let report = json(&run("json"));
    let rows = report["changes"].as_array().unwrap().len();

    let yaml = run("yaml");
    assert!(yaml.status.success());
    let from_yaml: Value = serde_saphyr::from_str(&stdout(&yaml)).unwrap();
    assert_eq!(from_yaml, report);

    let csv = stdout(&run("csv"));
    let mut lines = csv.lines();
    assert!(lines
        .next()
        .unwrap()
        .starts_with("namespace,change,from,to,protocol,ports"));
    assert_eq!(lines.count(), rows, "{csv}");
    assert!(csv.contains(
        "backend,changed,untrusted/client2,backend/web,any,,,,Reject,AntreaClusterNetworkPolicy:tenant-isolation rule reject-from-dev (tier securityops),Drop,"
    ), "{csv}");

    let md = stdout(&run("md"));
    assert!(md.starts_with("### tollgate diff: 0 opened, "), "{md}");
    let table_rows = md
        .lines()
        .filter(|l| l.starts_with("| **") || l.starts_with("| changed"))
        .count();
    assert_eq!(table_rows, rows, "{md}");

    let dot = stdout(&run("dot"));
    assert!(dot.starts_with("digraph tollgate_diff {"), "{dot}");
    assert!(dot.contains("subgraph \"cluster_backend\""), "{dot}");
    assert!(
        dot.contains("\"untrusted/client2\" -> \"infra/dns\" [color=red"),
        "{dot}"
    );
    assert!(
        dot.contains("\"untrusted/client2\" -> \"backend/web\" [color=orange"),
        "{dot}"
    );

    let text = stdout(&run("text"));
    assert!(
        text.contains("Namespace backend:\n  changed untrusted/client2 -> backend/web  any"),
        "{text}"
    );
    assert!(
        text.ends_with(&format!("0 opened, {} closed, 2 changed\n", rows - 2)),
        "{text}"
    );

    let matrix = stdout(&run("matrix"));
    assert!(matrix.contains("R>D"), "{matrix}");
}

#[test]
fn exit_code_says_whether_the_change_counts() {
    let dir = tempfile::tempdir().unwrap();
    let new = changed(dir.path());
    let (old, new) = (path(&rules()).to_string(), path(&new).to_string());
    let code = |args: &[&str]| {
        let mut all = vec!["diff", "--exit-code"];
        all.extend_from_slice(args);
        tollgate(&all).status.code()
    };
    assert_eq!(code(&[&old, &old]), Some(0), "no change");
    assert_eq!(code(&[&old, &new]), Some(1), "changes");
    assert_eq!(code(&[&old, &new, "--fail-on", "any"]), Some(1));
    assert_eq!(code(&[&old, &new, "--fail-on", "closed"]), Some(1));
    assert_eq!(
        code(&[&old, &new, "--fail-on", "opened"]),
        Some(0),
        "nothing opens"
    );
    assert_eq!(
        code(&[&new, &old, "--fail-on", "opened"]),
        Some(1),
        "the reverse opens"
    );
    assert_eq!(code(&[&new, &old, "--fail-on", "closed"]), Some(0));
    // Errors are 2: a missing side, invalid policies.
    assert_eq!(code(&[&old, "/nonexistent"]), Some(2));
    let bad = lab_copy(dir.path(), "bad", |file, text| match file {
        "tenant-isolation.yaml" => text.replace("tier: securityops", "tier: nosuchtier"),
        _ => text,
    });
    assert_eq!(code(&[&old, path(&bad)]), Some(2));
    // Without --exit-code: 0 with changes, 1 for invalid policies.
    assert_eq!(tollgate(&["diff", &old, &new]).status.code(), Some(0));
    assert_eq!(tollgate(&["diff", &old, path(&bad)]).status.code(), Some(1));
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A revision is read with git, not from the working tree: the committed
/// lab against the edited working copy gives what the two directories
/// give, and a revision of the edit against itself nothing.
#[test]
fn a_git_revision_is_a_side() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    lab_copy(&repo, "policies", |_, text| text);
    std::fs::write(repo.join("policies/notes.txt"), "not a policy").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "lab"]);
    let edited = changed(&repo.join("x"));
    std::fs::remove_dir_all(repo.join("policies")).unwrap();
    std::fs::rename(&edited, repo.join("policies")).unwrap();

    let from_git = tollgate_in(
        &repo,
        &["diff", "git:HEAD:policies", "policies", "-o", "json"],
    );
    let from_dirs = tollgate(&[
        "diff",
        path(&rules()),
        path(&repo.join("policies")),
        "-o",
        "json",
    ]);
    assert_eq!(json(&from_git), json(&from_dirs));
    // From a subdirectory, PATH is relative to it.
    let from_sub = tollgate_in(
        &repo.join("policies"),
        &["diff", "git:HEAD:", ".", "-o", "json"],
    );
    assert_eq!(json(&from_sub), json(&from_dirs));

    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "edit"]);
    let none = tollgate_in(
        &repo,
        &["diff", "--exit-code", "git:HEAD:policies", "policies"],
    );
    assert_eq!(none.status.code(), Some(0), "{}", stdout(&none));
    let back = tollgate_in(
        &repo,
        &[
            "diff",
            "--exit-code",
            "git:HEAD~1:policies",
            "git:HEAD:policies",
        ],
    );
    assert_eq!(back.status.code(), Some(1));
    let missing = tollgate_in(&repo, &["diff", "git:nosuchrev:policies", "policies"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("git"));
}

/// `--inventory` takes both sides' endpoints from one place: a change of
/// the inventory alone is then no change, while the policy change stays.
#[test]
fn one_inventory_for_both_sides_compares_policies_only() {
    let dir = tempfile::tempdir().unwrap();
    let new = changed(dir.path());
    let (old, new) = (path(&rules()).to_string(), path(&new).to_string());
    let report = json(&tollgate(&[
        "diff",
        &old,
        &new,
        "--inventory",
        &old,
        "-o",
        "json",
    ]));
    assert_eq!(
        report["summary"],
        serde_json::json!({"opened": 0, "closed": 0, "changed": 2}),
        "{report:#}"
    );
    let report = json(&tollgate(&["diff", &old, &new, "-o", "json"]));
    assert!(report["summary"]["closed"].as_u64().unwrap() > 0);
    let same = tollgate(&["diff", "--exit-code", &old, &old, "--inventory", &new]);
    assert_eq!(same.status.code(), Some(0), "{}", stdout(&same));
}

/// The lab's matrix: the untrusted client is rejected by tenant
/// isolation, the frontend reaches the web server on 80 subject to L7
/// rules, the backend's isolation drops the rest; every format says so.
#[test]
fn get_matrix_shows_who_reaches_whom_in_every_format() {
    let lab = path(&rules()).to_string();
    let run = |args: &[&str]| {
        let mut all = vec!["get", "matrix", "--policies", &lab];
        all.extend_from_slice(args);
        let out = tollgate(&all);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout(&out)
    };
    let matrix: Value =
        serde_json::from_str(&run(&["--ports", "80,53/udp,icmp", "-o", "json"])).unwrap();
    assert_eq!(
        matrix["ports"],
        serde_json::json!(["TCP/80", "UDP/53", "ICMP"])
    );
    let at = |from: &str, to: &str| {
        let r = matrix["rows"]
            .as_array()
            .unwrap()
            .iter()
            .position(|n| n == from)
            .unwrap();
        let c = matrix["columns"]
            .as_array()
            .unwrap()
            .iter()
            .position(|n| n == to)
            .unwrap();
        matrix["cells"][r][c].clone()
    };
    assert_eq!(
        at("untrusted/client2", "backend/web"),
        serde_json::json!(["Reject", "Reject", "Reject"])
    );
    assert_eq!(at("frontend/client1", "backend/web")[0], "L7");
    assert_eq!(at("frontend/client1", "infra/dns")[1], "Allow");

    let table = run(&["--ports", "80", "-n", "backend"]);
    assert!(
        table.contains("TCP/80:\nFROM \\ TO   backend/web\nbackend/web D\n"),
        "{table}"
    );
    let md = run(&["--ports", "80", "-o", "md"]);
    assert!(md.contains("**TCP/80**"), "{md}");
    assert!(
        md.contains("| untrusted/client2 | R | R | A | A | A |"),
        "{md}"
    );
    let csv = run(&["--ports", "80", "-o", "csv"]);
    assert!(csv.starts_with("from,to,port,verdict\n"), "{csv}");
    assert!(
        csv.contains("untrusted/client2,backend/web,TCP/80,R\n"),
        "{csv}"
    );
    let dot = run(&["--ports", "80", "-o", "dot"]);
    assert!(
        dot.contains("\"frontend/client1\" -> \"backend/web\" [label=\"TCP/80\"]"),
        "{dot}"
    );
    assert!(
        !dot.contains("\"untrusted/client2\" -> \"backend/web\""),
        "{dot}"
    );
    let grouped = run(&["--ports", "80", "--group-by", "app", "-o", "csv"]);
    assert!(
        grouped.contains("untrusted/app=client,backend/app=web,TCP/80,R\n"),
        "{grouped}"
    );
    let bad = tollgate(&["get", "matrix", "--policies", &lab, "--ports", "80/xyz"]);
    assert_eq!(bad.status.code(), Some(2));
}

/// A policy put in dry-run stops deciding enforced traffic: the diff
/// shows what enforcement does without it (tenant isolation's Reject
/// gives way to the Drop of the isolation below), and promoting it back
/// the reverse.
/// Mutation: the review's rule contents ignoring `dry_run` (keys.rs) make
/// both report no change.
#[test]
fn a_policy_put_in_dry_run_shows_as_its_removal_from_enforcement() {
    let dir = tempfile::tempdir().unwrap();
    let dry = lab_copy(dir.path(), "dry", |file, text| match file {
        "tenant-isolation.yaml" => text.replacen(
            "metadata:\n  name: tenant-isolation\n",
            "metadata:\n  name: tenant-isolation\n  annotations: {tollgate.io/dry-run: \"true\"}\n",
            1,
        ),
        _ => text,
    });
    let report = json(&tollgate(&[
        "diff",
        path(&rules()),
        path(&dry),
        "-o",
        "json",
    ]));
    assert_eq!(
        report["summary"],
        serde_json::json!({"opened": 0, "closed": 0, "changed": 2}),
        "{report:#}"
    );
    for change in report["changes"].as_array().unwrap() {
        assert_eq!(change["before"]["verdict"], "Reject");
        assert_eq!(change["after"]["verdict"], "Drop");
    }
    let back = json(&tollgate(&[
        "diff",
        path(&dry),
        path(&rules()),
        "-o",
        "json",
    ]));
    assert_eq!(back["summary"]["changed"], 2, "{back:#}");
}
