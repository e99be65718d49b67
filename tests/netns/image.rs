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

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::harness::netns::{run_with_timeout, CmdOutput};
use crate::harness::probe::{echo_roundtrip, judge_restart, Probed, Prober, Restart};
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

/// A lab with one IPv4+IPv6 client (with fresh source addresses), the
/// node serving echo on every test port and the policy written.
fn image_lab(test: &'static str) -> Option<Lab> {
    let lab = Lab::builder(test)
        .peer("client")
        .ipv6()
        .fresh_sources()
        .require(&["podman", "runc", "mmdebstrap"])
        .build()?;
    for port in [ALLOWED, REJECTED, DROPPED] {
        lab.serve_tcp("node", port, Service::Echo);
    }
    // The client's link and its fresh sources (`10.I.0.0/16`,
    // `fd00:I:1::/48`).
    let v4 = Ipv4Addr::new(10, lab.index(), 0, 0);
    let v6 = Ipv6Addr::new(0xfd00, u16::from(lab.index()), 1, 0, 0, 0, 0, 0);
    lab.write_policy(
        "node.yaml",
        &node_policy(&format!("{v4}/16"), &format!("{v6}/48")),
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
    /// on the lab's policy directory, with `extra` arguments.
    fn start(lab: &Lab, suffix: &str, extra: &[&str]) -> NodeContainer {
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
        args.extend(extra.iter().map(|a| a.to_string()));
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        podman(&argv, Duration::from_secs(60)).expect_success("podman run");
        container
    }

    /// The container's output so far (the entrypoint's and tollgate's).
    fn logs(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.log).unwrap_or_default()).into_owned()
    }

    /// Waits until the log holds `pattern`; returns that line. Fails as
    /// soon as the container is gone (`--rm`: it exited).
    #[track_caller]
    fn wait_for_log(&self, pattern: &str) -> String {
        let found = poll_until(AGENT_WAIT, || {
            let line = self
                .logs()
                .lines()
                .find(|l| l.contains(pattern))
                .map(|l| Some(l.to_string()));
            line.or_else(|| (!self.running()).then_some(None))
        });
        match found {
            Some(Some(line)) => line,
            Some(None) => panic!(
                "container {} exited before logging {pattern:?}; log:\n{}",
                self.name,
                self.logs()
            ),
            None => panic!(
                "container {} did not log {pattern:?}; log:\n{}",
                self.name,
                self.logs()
            ),
        }
    }

    /// Whether the container runs (`podman inspect`; one that exited is
    /// gone, `--rm`).
    fn running(&self) -> bool {
        let out = podman(
            &["inspect", "--format", "{{.State.Running}}", &self.name],
            Duration::from_secs(30),
        );
        out.success() && out.stdout.trim() == "true"
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
    let container = NodeContainer::start(&lab, "a", &[]);
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
///
/// Mutation (tried, issue 29): a new container that exits at start (an
/// unknown flag) fails it: the new container never logs "adopting the
/// kernel state" (before, the kernel's cached verdicts met every check
/// for their 60 s).
#[test]
fn image_restart_never_opens_the_node() {
    restart("image_restart_never_opens_the_node", Ending::Stop);
}

/// The same when the old container is killed (SIGKILL) instead.
///
/// Mutation (tried, issue 29): as [`image_restart_never_opens_the_node`].
#[test]
fn image_crash_never_opens_the_node() {
    restart("image_crash_never_opens_the_node", Ending::Kill);
}

/// Between two attempts of the prober, and how long one waits.
const EVERY: Duration = Duration::from_millis(20);
const ATTEMPT: Duration = Duration::from_millis(250);

/// Arguments the new container gets besides the old one's (empty; the
/// mutation check of issue 29 puts an unknown flag here).
const NEW_CONTAINER_EXTRA: &[&str] = &[];

/// The old container ends as `how` says, then a new one starts.
/// Throughout, a client connects every 20 ms to the allowed and the
/// rejected port, over IPv4 and IPv6, each from its own address (tuples
/// the kernel verdict cache holds and answers while no agent runs) and
/// from a fresh source address per attempt (tuples only an agent can
/// answer). The new container must log its own "adopting the kernel
/// state" and "ruleset applied generation=1", and still run at the end;
/// [`judge_restart`] checks the probes (no rejected attempt connects;
/// while no agent runs the cache answers the cached tuples and nobody the
/// fresh ones; from the new ruleset on, the new agent decides the fresh
/// ones); the established connection keeps working. The windows are
/// printed as `LIFECYCLE-WINDOW image-<how>` lines.
fn restart(test: &'static str, how: Ending) {
    let Some(lab) = image_lab(test) else {
        return;
    };
    let label = match how {
        Ending::Stop => "image-stop",
        Ending::Kill => "image-kill",
    };
    let to = |port| SocketAddr::new(IpAddr::from(lab.node_addr("client")), port);
    let to6 = |port| SocketAddr::new(IpAddr::from(lab.node_addr6("client")), port);
    let old = NodeContainer::start(&lab, "old", &[]);
    old.wait_for_log("ruleset applied generation=1");
    for addr in [to(ALLOWED), to6(ALLOWED)] {
        lab.assert_tcp("client", addr, TcpOutcome::Connected);
    }
    for addr in [to(REJECTED), to6(REJECTED)] {
        lab.assert_tcp("client", addr, TcpOutcome::Refused);
    }
    let mut established = lab.tcp_stream("client", to(ALLOWED));
    assert!(echo_roundtrip(&mut established, b"before", ALLOW_WAIT).expect("echo before"));

    let targets: Vec<Probed> = [to(ALLOWED), to6(ALLOWED), to(REJECTED), to6(REJECTED)]
        .into_iter()
        .flat_map(|t| [Probed::from(t), Probed::fresh(t)])
        .collect();
    let prober = Prober::start_with(
        lab.ns("client"),
        &targets,
        Some(&lab.fresh_sources("client")),
        EVERY,
        ATTEMPT,
        AGENT_WAIT * 4,
    );
    // The old agent decided every target, and the kernel holds the
    // client's own tuples.
    let allowed: Vec<Probed> = targets
        .iter()
        .copied()
        .filter(|t| t.to.port() == ALLOWED)
        .collect();
    assert!(
        prober.wait_connected(&allowed, Duration::ZERO, 3),
        "the old container does not let allowed connections through"
    );
    prober.wait_attempts(&targets, Duration::ZERO, 3);
    lab.wait_cached(
        "client",
        &[
            (to(ALLOWED), 'a'),
            (to6(ALLOWED), 'a'),
            (to(REJECTED), 'r'),
            (to6(REJECTED), 'r'),
        ],
    );

    let down = prober.now();
    old.end(how);
    let gone = prober.now();
    let new = NodeContainer::start(&lab, "new", NEW_CONTAINER_EXTRA);
    let restarted = prober.now();
    new.wait_for_log("adopting the kernel state");
    new.wait_for_log("ruleset applied generation=1");
    let ready = prober.now();
    assert!(
        prober.wait_connected(&allowed, ready, 3),
        "allowed connections did not resume"
    );
    prober.wait_attempts(&targets, ready, 5);
    let results = prober.finish();
    let restart = Restart {
        down,
        gone,
        restarted,
        // The new agent reads its policy files at once: it may decide
        // from its start on.
        quiet_until: restarted,
        ready,
        attempt: ATTEMPT,
    };
    let windows = judge_restart(&results, restart, REJECTED, label);
    assert!(
        echo_roundtrip(&mut established, b"after", ALLOW_WAIT).expect("echo after"),
        "the established connection broke"
    );
    assert!(new.running(), "the new container stopped:\n{}", new.logs());
    report(&format!(
        "{how:?} and restart: ending the old container took {} ms, starting the new one {} ms; \
         from its start to the next allowed connection {} ms for cached tuples, {} ms for fresh ones",
        (gone - down).as_millis(),
        (restarted - gone).as_millis(),
        windows.cached.as_millis(),
        windows.fresh.as_millis(),
    ));
}
