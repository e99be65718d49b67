//! Policy files that vanish, half-write or explode (issue 13 item 4), on the
//! wire: the node rejects TCP port 8002 (`a.yaml`) and serves 8001, over
//! IPv4 and IPv6. A dangling, looping or unreadable entry, a writer that
//! truncates a file and pauses, and a 2 GiB sparse file are each refused as
//! a reload error naming the file, and the rejection stays enforced
//! throughout; at start the same is a startup error.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::harness::{poll_until, Agent, Lab, Service, TcpOutcome, AGENT_WAIT};
use tollgate::status::{Request, Response, StatusReport};

/// A node policy rejecting TCP 8002 from anyone.
const REJECT_8002: &str = "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: reject-8002
spec:
  priority: 5
  tier: securityops
  appliedTo:
    - nodeSelector:
        matchLabels:
          kubernetes.io/os: linux
  ingress:
    - name: reject
      action: Reject
      ports:
        - protocol: TCP
          port: 8002
";

/// How long one probe waits: a reset or a handshake comes at once.
const PROBE: Duration = Duration::from_secs(2);

/// The node serving 8001 and 8002 to a client, both families.
fn files_lab(test: &'static str) -> Option<Lab> {
    let lab = Lab::builder(test).peer("client").ipv6().build()?;
    for port in [8001, 8002] {
        lab.serve_tcp("node", port, Service::Echo);
    }
    Some(lab)
}

/// The node's address of each family, as the client reaches it.
fn node_addrs(lab: &Lab) -> [IpAddr; 2] {
    [
        lab.node_addr("client").into(),
        lab.node_addr6("client").into(),
    ]
}

/// Asserts 8002 is rejected and 8001 served, both families.
#[track_caller]
fn assert_enforced(lab: &Lab) {
    for ip in node_addrs(lab) {
        lab.assert_tcp("client", SocketAddr::new(ip, 8001), TcpOutcome::Connected);
        lab.assert_tcp("client", SocketAddr::new(ip, 8002), TcpOutcome::Refused);
    }
}

fn status(agent_socket: &Path) -> StatusReport {
    match tollgate::status::request(agent_socket, &Request::Status) {
        Ok(Response::Status(report)) => *report,
        other => panic!("status: {other:?}"),
    }
}

/// Waits for the `n`th `reload rejected:` line that names `file` and
/// contains `reason`; returns it.
#[track_caller]
fn wait_rejected(agent: &Agent, file: &Path, reason: &str, n: usize) -> String {
    let wanted = |l: &&str| {
        l.contains("reload rejected:")
            && l.contains(&file.display().to_string())
            && l.contains(reason)
    };
    poll_until(AGENT_WAIT, || {
        let log = agent.log();
        let lines: Vec<&str> = log.lines().filter(wanted).collect();
        lines.get(n - 1).map(|l| l.to_string())
    })
    .unwrap_or_else(|| {
        panic!(
            "no reload rejected for {} with {reason:?} (#{n}); log:\n{}",
            file.display(),
            agent.log()
        )
    })
}

/// Puts `target` in place of `policies/<name>` as a symlink, atomically.
fn symlink_policy(lab: &Lab, name: &str, target: &str) -> PathBuf {
    let staged = lab.dir().join(format!(".{name}.link"));
    std::os::unix::fs::symlink(target, &staged).expect("symlink");
    let file = lab.policy_dir().join(name);
    std::fs::rename(&staged, &file).expect("rename symlink in");
    file
}

/// The last reload as `tollgate status` shows it, once one was reported.
fn last_reload_error(socket: &Path) -> Option<String> {
    status(socket).last_reload?.error
}

#[test]
fn vanishing_and_unreadable_policy_files_keep_the_last_good_ruleset() {
    let Some(lab) = files_lab("vanishing_and_unreadable_policy_files_keep_the_last_good_ruleset")
    else {
        return;
    };
    lab.write_policy("a.yaml", REJECT_8002);
    let options = lab.agent_options();
    let socket = options.status_socket.clone();
    let mut agent = lab.start_agent(options.clone());
    agent.wait_generation(1);
    assert_enforced(&lab);

    // A dangling symlink where the file was: once the reload ended (the
    // code before issue 13 applied an empty ruleset), the policy is still
    // on the wire, and the rejection names the file.
    let file = symlink_policy(&lab, "a.yaml", "gone.yaml");
    poll_until(AGENT_WAIT, || {
        let log = agent.log();
        (log.contains("reload rejected:") || log.contains("generation=2")).then_some(())
    })
    .expect("the reload ends");
    assert_enforced(&lab);
    wait_rejected(
        &agent,
        &file,
        "symlink to gone.yaml: No such file or directory",
        1,
    );
    let error = last_reload_error(&socket).expect("the reload is reported failed");
    assert!(error.contains("a.yaml: symlink to gone.yaml"), "{error}");
    assert_eq!(status(&socket).ruleset_generation, 1);

    // A symlink to itself.
    symlink_policy(&lab, "a.yaml", "a.yaml");
    wait_rejected(&agent, &file, "Too many levels of symbolic links", 1);
    assert_enforced(&lab);

    // The file again, then a second file nobody may read (the agent keeps
    // no CAP_DAC_OVERRIDE), then a directory named like a policy file.
    lab.write_policy("a.yaml", REJECT_8002);
    agent.wait_generation(2);
    let staged = lab.dir().join("b.yaml");
    std::fs::write(&staged, REJECT_8002.replace("reject-8002", "b")).unwrap();
    std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o000)).unwrap();
    let locked = lab.policy_dir().join("b.yaml");
    std::fs::rename(&staged, &locked).unwrap();
    wait_rejected(&agent, &locked, "Permission denied", 1);
    std::fs::remove_file(&locked).unwrap();
    agent.wait_generation(3);
    let dir = lab.policy_dir().join("c.yaml");
    std::fs::create_dir(&dir).unwrap();
    wait_rejected(&agent, &dir, "not a regular file but a directory", 1);
    assert_enforced(&lab);
    assert_eq!(status(&socket).ruleset_generation, 3);
    assert!(agent.terminate().success());

    // At start, the same is a startup error naming the file.
    std::fs::remove_dir(&dir).unwrap();
    let file = symlink_policy(&lab, "a.yaml", "gone.yaml");
    let mut refused = lab.start_agent(options);
    let exit = refused.wait_exit(AGENT_WAIT);
    assert_eq!(exit.code(), Some(1), "{}", refused.log());
    let expected = format!("{}: symlink to gone.yaml", file.display());
    assert!(refused.log().contains(&expected), "{}", refused.log());
}

#[test]
fn a_truncated_file_paused_mid_write_never_lifts_its_policy() {
    let Some(lab) = files_lab("a_truncated_file_paused_mid_write_never_lifts_its_policy") else {
        return;
    };
    lab.write_policy("a.yaml", REJECT_8002);
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);
    assert_enforced(&lab);

    // A writer that truncates in place, pauses, then writes the file back
    // (as `echo ... > a.yaml` from a slow producer does).
    let file = lab.policy_dir().join("a.yaml");
    let mut writer = std::fs::File::create(&file).expect("truncate a.yaml");
    let pause = Instant::now();
    let mut probes = 0;
    while pause.elapsed() < Duration::from_secs(3) {
        for ip in node_addrs(&lab) {
            let outcome = lab.tcp("client", SocketAddr::new(ip, 8002), PROBE);
            probes += 1;
            assert_eq!(
                outcome,
                TcpOutcome::Refused,
                "port 8002 of {ip} after {:?} of a truncated a.yaml; log:\n{}",
                pause.elapsed(),
                agent.log()
            );
        }
    }
    assert!(probes >= 4, "{probes} probes");
    let line = wait_rejected(&agent, &file, "held 1 object(s) and now holds none", 1);
    assert!(line.contains("delete the file"), "{line}");

    writer.write_all(REJECT_8002.as_bytes()).unwrap();
    drop(writer);
    agent.wait_generation(2);
    assert_enforced(&lab);

    // Deleting the file is how its policy goes.
    lab.remove_policy("a.yaml");
    agent.wait_generation(3);
    for ip in node_addrs(&lab) {
        lab.assert_tcp("client", SocketAddr::new(ip, 8002), TcpOutcome::Connected);
    }
}

/// The resident set of process `pid`, in KiB.
fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

#[test]
fn a_huge_sparse_policy_file_is_refused_unread() {
    let Some(lab) = files_lab("a_huge_sparse_policy_file_is_refused_unread") else {
        return;
    };
    lab.write_policy("a.yaml", REJECT_8002);
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);
    let before = rss_kib(agent.pid());

    // 2 GiB of holes, renamed in whole.
    let staged = lab.dir().join("huge.yaml");
    std::fs::File::create(&staged)
        .and_then(|f| f.set_len(2 << 30))
        .expect("sparse file");
    let file = lab.policy_dir().join("huge.yaml");
    std::fs::rename(&staged, &file).unwrap();
    wait_rejected(
        &agent,
        &file,
        "2147483648 bytes, more than the limit of 4194304 bytes per file",
        1,
    );
    let after = rss_kib(agent.pid());
    assert!(
        after < before + 32 * 1024,
        "VmRSS {before} KiB before, {after} KiB after"
    );
    assert_enforced(&lab);

    // A limit set lower refuses an ordinary file the same way.
    std::fs::remove_file(&file).unwrap();
    agent.wait_generation(2);
    assert!(agent.terminate().success());
    let small = lab
        .agent_options()
        .args(&["--set", "policyFiles.maxFileBytes=100"]);
    let mut refused = lab.start_agent(small);
    assert_eq!(
        refused.wait_exit(AGENT_WAIT).code(),
        Some(1),
        "{}",
        refused.log()
    );
    let expected = format!(
        "{}: {} bytes, more than the limit of 100 bytes per file",
        lab.policy_dir().join("a.yaml").display(),
        REJECT_8002.len()
    );
    assert!(refused.log().contains(&expected), "{}", refused.log());
}
