//! The node image (`docker/Dockerfile`, built by `scripts/image.sh` around
//! this test binary's own `tollgate`) run with podman in a lab's node
//! namespace, as the DaemonSet runs it: every capability dropped but
//! NET_ADMIN and NET_RAW, no privilege escalation, the runtime's default
//! seccomp profile, a read-only root
//! filesystem without tmpfs, and the DaemonSet's mounts (the xtables lock,
//! `/lib/modules` read-only when the host has it, `/run/tollgate` from the
//! lab directory) plus the lab's policy directory for standalone mode.
//! Checked on the wire: enforcement over IPv4 and IPv6, the entrypoint's
//! choice of the host's iptables backend (nft and legacy), and a rolling
//! restart (stop, then a new container) or a crash (SIGKILL, then a new
//! container) that never lets a denied connection through.
//!
//! It owns only the containers it names after its lab's node namespace and
//! its own image tag; it must never stop, remove or rebuild anything else
//! in the machine's podman storage.
//!
//! podman runs from the test process's namespace and joins the lab's with
//! `--network ns:/run/netns/<name>`: started under `nsenter --net`, runc
//! takes the lab namespace for the host's and refuses podman's default
//! `net.ipv4.ping_group_range` sysctl. The image is built once per test
//! process (and its inputs are cached across runs, see `scripts/image.sh`).

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::harness::netns::{run_with_timeout, CmdOutput};
use crate::harness::probe::{echo_roundtrip, tcp_connect};
use crate::harness::{poll_until, Lab, Netns, Service, TcpOutcome, AGENT_WAIT, ALLOW_WAIT};

/// podman's global flags on these machines (`../shared/notes/containers.md`).
const PODMAN: &[&str] = &["--runtime", "runc", "--cgroup-manager", "cgroupfs"];
/// What `podman run` needs besides: podman's default ulimits cannot be set
/// by a root without CAP_SYS_RESOURCE.
const ULIMITS: &[&str] = &[
    "--ulimit",
    "nofile=4096:4096",
    "--ulimit",
    "nproc=4096:4096",
];
/// The first build on a fresh machine installs podman and builds a Debian
/// base; later ones take seconds.
const BUILD_WAIT: Duration = Duration::from_secs(900);
/// Port the policy leaves alone, and ports it rejects and drops.
const ALLOWED: u16 = 80;
const REJECTED: u16 = 81;
const DROPPED: u16 = 82;

fn podman(args: &[&str], timeout: Duration) -> CmdOutput {
    let mut cmd = Command::new("podman");
    cmd.args(PODMAN).args(args);
    run_with_timeout(cmd, timeout)
}

/// Builds the node image around this test binary's `tollgate` once per
/// test process; returns its name. The tag is per checkout (the binary's
/// path), so two checkouts never replace each other's image.
pub(crate) fn image() -> &'static str {
    static IMAGE: OnceLock<String> = OnceLock::new();
    IMAGE.get_or_init(|| {
        use std::hash::{Hash, Hasher};
        let binary = env!("CARGO_BIN_EXE_tollgate");
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        binary.hash(&mut hasher);
        let tag = format!("localhost/tollgate:e2e-{:08x}", hasher.finish() as u32);
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/image.sh");
        let mut cmd = Command::new(script);
        cmd.args(["--binary", binary, "--tag", &tag]);
        let started = Instant::now();
        let out = run_with_timeout(cmd, BUILD_WAIT).expect_success("scripts/image.sh");
        let size = out
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("size="))
            .unwrap_or("?");
        report(&format!(
            "image {tag}: {size} bytes, built in {:.1} s",
            started.elapsed().as_secs_f64()
        ));
        tag
    })
}

/// A line on the test process's stderr that the test runner does not
/// capture (measurements the report quotes).
fn report(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "image: {line}");
}

/// A ClusterNetworkPolicy on the node `role=image`: from `v4`/`v6`
/// (CIDRs), TCP 81 rejected and 82 dropped; everything else allowed.
fn node_policy(v4: &str, v6: &str) -> String {
    format!(
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
          role: image
  ingress:
    - action: Reject
      from:
        - ipBlock:
            cidr: {v4}
        - ipBlock:
            cidr: {v6}
      ports:
        - protocol: TCP
          port: {REJECTED}
    - action: Drop
      from:
        - ipBlock:
            cidr: {v4}
        - ipBlock:
            cidr: {v6}
      ports:
        - protocol: TCP
          port: {DROPPED}
"
    )
}

/// A lab with one IPv4+IPv6 client, the node serving echo on every test
/// port and the policy written.
fn image_lab(test: &'static str) -> Option<Lab> {
    let lab = Lab::builder(test)
        .peer("client")
        .ipv6()
        .require(&["podman", "runc", "mmdebstrap"])
        .build()?;
    for port in [ALLOWED, REJECTED, DROPPED] {
        lab.serve_tcp("node", port, Service::Echo);
    }
    let v6 = Ipv6Addr::new(0xfd00, u16::from(lab.index()), 1, 0, 0, 0, 0, 0);
    lab.write_policy(
        "node.yaml",
        &node_policy(&lab.subnet("client"), &format!("{v6}/64")),
    );
    std::fs::create_dir_all(lab.dir().join("run-tollgate")).expect("create run-tollgate");
    Some(lab)
}

/// A container of the node image in the lab's node namespace, started
/// with `--rm` (so one whose processes the lab kills, as when a test
/// process dies, goes away too) and removed with `podman rm -f` on drop.
/// Its output goes to `container-<suffix>.log` in the lab directory (kept
/// when a test fails) and is printed when the test fails.
struct NodeContainer {
    name: String,
    log: std::path::PathBuf,
}

impl NodeContainer {
    /// Starts container `<node namespace>-<suffix>` running `tollgate run`
    /// on the lab's policy directory.
    fn start(lab: &Lab, suffix: &str) -> NodeContainer {
        let name = format!("{}-{suffix}", lab.node().name());
        let log = lab.dir().join(format!("container-{suffix}.log"));
        let container = NodeContainer { name, log };
        // The DaemonSet's hostPath is FileOrCreate.
        let lock = Path::new("/run/xtables.lock");
        if !lock.exists() {
            std::fs::File::create(lock).expect("create /run/xtables.lock");
        }
        let netns = format!("ns:/run/netns/{}", lab.node().name());
        let mut mounts = vec![
            "/run/xtables.lock:/run/xtables.lock".to_string(),
            format!("{}:/run/tollgate", lab.dir().join("run-tollgate").display()),
            format!("{}:/etc/tollgate/policies:ro", lab.policy_dir().display()),
        ];
        // Absent in some VMs and containers that run this suite.
        if Path::new("/lib/modules").is_dir() {
            mounts.push("/lib/modules:/lib/modules:ro".into());
        }
        let mut args: Vec<String> = [
            "run",
            "--detach",
            "--rm",
            "--log-driver",
            "k8s-file",
            "--name",
            &container.name,
            "--network",
            &netns,
            "--cap-drop",
            "ALL",
            "--cap-add",
            "NET_ADMIN,NET_RAW",
            "--security-opt",
            "no-new-privileges",
            // The DaemonSet's `seccompProfile: RuntimeDefault`: podman's
            // default profile (containers-common), named so that the test
            // fails if it stops applying.
            "--security-opt",
            "seccomp=/usr/share/containers/seccomp.json",
            "--read-only",
            "--read-only-tmpfs=false",
        ]
        .iter()
        .chain(ULIMITS)
        .map(|s| s.to_string())
        .collect();
        args.extend([
            "--log-opt".into(),
            format!("path={}", container.log.display()),
        ]);
        for mount in mounts {
            args.extend(["--volume".into(), mount]);
        }
        args.extend(["--env".into(), "RUST_LOG=info".into(), image().into()]);
        args.extend(
            [
                "run",
                "--policies",
                "/etc/tollgate/policies",
                "--node-name",
                "node",
                "--node-labels",
                "role=image",
                "--queues",
                "1",
                "--fail-mode",
                "closed",
            ]
            .map(String::from),
        );
        for address in lab.node_addresses() {
            args.extend(["--node-address".into(), address.to_string()]);
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        podman(&argv, Duration::from_secs(60)).expect_success("podman run");
        container
    }

    /// The container's output so far (the entrypoint's and tollgate's).
    fn logs(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.log).unwrap_or_default()).into_owned()
    }

    /// Waits until the log holds `pattern`; returns that line.
    #[track_caller]
    fn wait_for_log(&self, pattern: &str) -> String {
        poll_until(AGENT_WAIT, || {
            self.logs()
                .lines()
                .find(|l| l.contains(pattern))
                .map(str::to_string)
        })
        .unwrap_or_else(|| {
            panic!(
                "container {} did not log {pattern:?}; log:\n{}",
                self.name,
                self.logs()
            )
        })
    }

    /// Ends the container as `how` says; `--rm` removes it.
    fn end(&self, how: Ending) {
        let args: &[&str] = match how {
            // SIGTERM, as the kubelet sends it, with the DaemonSet's
            // grace period.
            Ending::Stop => &["stop", "--time", "30"],
            Ending::Kill => &["kill", "--signal", "KILL"],
        };
        let argv: Vec<&str> = args.iter().copied().chain([self.name.as_str()]).collect();
        podman(&argv, Duration::from_secs(60)).expect_success("podman stop/kill");
    }
}

impl Drop for NodeContainer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- container {} ----\n{}", self.name, self.logs());
        }
        let _ = podman(
            &["rm", "--force", "--time", "0", &self.name],
            Duration::from_secs(30),
        );
    }
}

/// The host's backend in `ns`: `iptables -V`'s `nf_tables` or `legacy`.
fn host_backend(ns: &Netns) -> &'static str {
    if ns.ok("iptables -V").contains("(legacy)") {
        "legacy"
    } else {
        "nft"
    }
}

/// Runs the image in a lab whose "host" uses `backend` (`None`: the
/// backend of this machine's `iptables`, with no rules yet; `legacy`: a
/// foreign legacy rule is there first), and checks enforcement and where
/// the rules landed.
fn enforce_with_backend(test: &'static str, foreign_legacy_rule: bool) {
    let Some(lab) = image_lab(test) else {
        return;
    };
    let node = lab.node();
    let expected = if foreign_legacy_rule {
        node.ok("iptables-legacy -A INPUT -s 192.0.2.1/32 -j DROP");
        "legacy"
    } else {
        host_backend(node)
    };
    let container = NodeContainer::start(&lab, "a");
    let line = container.wait_for_log("tollgate-entrypoint: iptables backend");
    assert!(
        line.contains(&format!("iptables backend {expected} ")),
        "expected the {expected} backend: {line}"
    );
    container.wait_for_log("ruleset applied generation=1");
    // The DaemonSet's exec probes run `tollgate status --check` in the
    // container.
    for probe in ["ready", "live"] {
        podman(
            &[
                "exec",
                &container.name,
                "tollgate",
                "status",
                "--check",
                probe,
            ],
            Duration::from_secs(20),
        )
        .expect_success("tollgate status --check in the container");
    }
    // The agent (pid 1: the entrypoint execs it) runs under a seccomp
    // filter, as under the DaemonSet's RuntimeDefault.
    let status = podman(
        &["exec", &container.name, "cat", "/proc/1/status"],
        Duration::from_secs(20),
    )
    .expect_success("reading the agent's /proc status");
    assert!(
        status.stdout.lines().any(|l| l == "Seccomp:\t2"),
        "the agent runs without a seccomp filter:\n{}",
        status.stdout
    );

    // 1. On the wire, both families.
    let client_v4 = IpAddr::from(lab.node_addr("client"));
    let client_v6 = IpAddr::from(lab.node_addr6("client"));
    for addr in [client_v4, client_v6] {
        let to = |port| SocketAddr::new(addr, port);
        lab.assert_tcp("client", to(ALLOWED), TcpOutcome::Connected);
        lab.assert_tcp("client", to(REJECTED), TcpOutcome::Refused);
    }
    lab.assert_tcp(
        "client",
        SocketAddr::new(client_v4, DROPPED),
        TcpOutcome::TimedOut,
    );

    // 2. The rules are in the host's backend, seen with the host's tools,
    // and none in the other one.
    let other = if expected == "legacy" {
        "nft"
    } else {
        "legacy"
    };
    for family in ["iptables", "ip6tables"] {
        let mine = node.ok(&format!("{family}-{expected}-save -t filter"));
        for rule in [":TOLLGATE-INPUT ", "-A INPUT -j TOLLGATE-INPUT"] {
            assert!(
                mine.contains(rule),
                "{rule:?} missing in {family}-{expected}-save:\n{mine}"
            );
        }
        let theirs = node.sh(&format!("{family}-{other}-save -t filter")).stdout;
        assert!(
            !theirs.contains("TOLLGATE"),
            "rules in the {other} backend too:\n{theirs}"
        );
    }
    if expected == "nft" {
        // The entrypoint looked at the legacy tables without creating one.
        let save = node.ok("iptables-nft-save; ip6tables-nft-save");
        assert!(
            !save.contains("iptables-legacy tables present"),
            "the entrypoint created legacy tables:\n{save}"
        );
    }
}

#[test]
fn image_enforces_with_the_hosts_iptables_backend() {
    enforce_with_backend("image_enforces_with_the_hosts_iptables_backend", false);
}

#[test]
fn image_follows_a_legacy_iptables_host() {
    enforce_with_backend("image_follows_a_legacy_iptables_host", true);
}

/// One probe of a connection loop: when it started and how it ended.
type Probe = (Instant, TcpOutcome);

/// Starts a connection attempt to `to` from `ns` every ~20 ms, each on its
/// own thread and waiting at most 250 ms (so a dropped attempt does not slow
/// the pace), until `stop` is set, at most for `AGENT_WAIT` × 4; every
/// outcome is recorded with the attempt's start.
fn probe_loop(ns: &Netns, to: SocketAddr, stop: &AtomicBool, out: &Mutex<Vec<Probe>>) {
    let deadline = Instant::now() + AGENT_WAIT * 4;
    std::thread::scope(|scope| {
        while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
            let at = Instant::now();
            scope.spawn(move || {
                let outcome = tcp_connect(ns, to, Duration::from_millis(250));
                out.lock().expect("probe list").push((at, outcome));
            });
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    out.lock().expect("probe list").sort_by_key(|(at, _)| *at);
}

/// The longest time in which attempts failed, from the start of the first
/// failing attempt to the start of the next successful one (or the last
/// attempt), and how many failed.
fn longest_refusal(probes: &[Probe]) -> (Duration, usize) {
    let mut longest = Duration::ZERO;
    let mut failed = 0;
    let mut since: Option<Instant> = None;
    for (at, outcome) in probes {
        if *outcome == TcpOutcome::Connected {
            if let Some(start) = since.take() {
                longest = longest.max(at.duration_since(start));
            }
        } else {
            failed += 1;
            since.get_or_insert(*at);
        }
    }
    if let (Some(start), Some((last, _))) = (since, probes.last()) {
        longest = longest.max(last.duration_since(start));
    }
    (longest, failed)
}

/// How the old container ends.
#[derive(Clone, Copy, Debug)]
enum Ending {
    /// `podman stop`: a DaemonSet rolling update or a node drain.
    Stop,
    /// SIGKILL: a crash, an OOM kill.
    Kill,
}

/// The rolling update of a DaemonSet: the old container is stopped
/// (SIGTERM) and removed, then a new one starts. See [`restart`].
#[test]
fn image_restart_never_opens_the_node() {
    restart("image_restart_never_opens_the_node", Ending::Stop);
}

/// The same when the old container is killed (SIGKILL) instead.
#[test]
fn image_crash_never_opens_the_node() {
    restart("image_crash_never_opens_the_node", Ending::Kill);
}

/// The old container ends as `how` says, then a new one starts.
/// Throughout, a client retries a rejected connection over IPv4 and over
/// IPv6 and an allowed one over IPv4, each every ~20 ms: no rejected
/// attempt may connect (the kernel state outlives the agent, fail-closed
/// drops what nobody decides, the new agent adopts it), the established
/// connection keeps working, and the longest window in which allowed
/// connections failed is printed.
fn restart(test: &'static str, how: Ending) {
    let Some(lab) = image_lab(test) else {
        return;
    };
    let client = lab.ns("client").clone();
    let to = |port| SocketAddr::new(IpAddr::from(lab.node_addr("client")), port);
    let to6 = |port| SocketAddr::new(IpAddr::from(lab.node_addr6("client")), port);
    let old = NodeContainer::start(&lab, "old");
    old.wait_for_log("ruleset applied generation=1");
    lab.assert_tcp("client", to(ALLOWED), TcpOutcome::Connected);
    lab.assert_tcp("client", to(REJECTED), TcpOutcome::Refused);
    let mut established = lab.tcp_stream("client", to(ALLOWED));
    assert!(echo_roundtrip(&mut established, b"before", ALLOW_WAIT).expect("echo before"));

    let stop = AtomicBool::new(false);
    let denied = Mutex::new(Vec::new());
    let allowed = Mutex::new(Vec::new());
    let restart = std::thread::scope(|scope| {
        scope.spawn(|| probe_loop(&client, to(REJECTED), &stop, &denied));
        scope.spawn(|| probe_loop(&client, to6(REJECTED), &stop, &denied));
        scope.spawn(|| probe_loop(&client, to(ALLOWED), &stop, &allowed));
        let probed = |list: &Mutex<Vec<Probe>>, since: Instant, want: TcpOutcome| {
            list.lock()
                .expect("probe list")
                .iter()
                .any(|(at, o)| *at >= since && *o == want)
        };
        // Both loops run before the old agent goes.
        let began = Instant::now();
        let running = poll_until(AGENT_WAIT, || {
            (probed(&denied, began, TcpOutcome::Refused)
                && probed(&allowed, began, TcpOutcome::Connected))
            .then_some(())
        });
        let restart = running.map(|()| {
            let stopping = Instant::now();
            old.end(how);
            let new = NodeContainer::start(&lab, "new");
            let started = Instant::now();
            // The new agent decides again: a rejection needs its verdict.
            let serving = poll_until(AGENT_WAIT, || {
                (probed(&denied, started, TcpOutcome::Refused)
                    && probed(&allowed, started, TcpOutcome::Connected))
                .then_some(())
            });
            (stopping, started, serving, new)
        });
        stop.store(true, Ordering::SeqCst);
        restart
    });
    let (stopping, started, serving, _new) =
        restart.expect("the probe loops saw the old agent enforce");
    let denied = denied.into_inner().expect("probe list");
    let allowed = allowed.into_inner().expect("probe list");

    let through: Vec<f64> = denied
        .iter()
        .filter(|(_, o)| *o == TcpOutcome::Connected)
        .map(|(at, _)| at.saturating_duration_since(stopping).as_secs_f64() * 1000.0)
        .collect();
    assert!(
        through.is_empty(),
        "{} of {} rejected attempts connected during the restart (ms after stop: {through:?})",
        through.len(),
        denied.len()
    );
    assert!(
        serving.is_some(),
        "the new container did not enforce within {AGENT_WAIT:?}"
    );
    assert!(
        echo_roundtrip(&mut established, b"after", ALLOW_WAIT).expect("echo after"),
        "the established connection broke"
    );
    let (window, failed) = longest_refusal(&allowed);
    report(&format!(
        "{how:?} and restart: ending the old container and starting the new took {} ms, {} rejected and {} allowed attempts, \
         longest window without allowed connections {} ms ({failed} attempts failed)",
        started.duration_since(stopping).as_millis(),
        denied.len(),
        allowed.len(),
        window.as_millis()
    ));
}

#[test]
fn longest_refusal_measures_from_first_failure_to_next_success() {
    let t0 = Instant::now();
    let at = |ms| t0 + Duration::from_millis(ms);
    let probes = [
        (at(0), TcpOutcome::Connected),
        (at(20), TcpOutcome::TimedOut),
        (at(290), TcpOutcome::TimedOut),
        (at(560), TcpOutcome::Connected),
        (at(580), TcpOutcome::Refused),
        (at(600), TcpOutcome::Connected),
    ];
    assert_eq!(longest_refusal(&probes), (Duration::from_millis(540), 3));
    assert_eq!(longest_refusal(&[]), (Duration::ZERO, 0));
    assert_eq!(
        longest_refusal(&probes[..3]),
        (Duration::from_millis(270), 2)
    );
}
