//! Faults on the wire: the agent's kernel writes fail or hang, the agent is
//! killed mid-reload, restarts without its DNS server, or loses its policy
//! directory; in every case the traffic stays enforced by the last good
//! ruleset, and the agent converges once the fault is gone.
//!
//! Faults are injected with stand-ins for `iptables-*-restore` and
//! `ip6tables-*-restore` put first on the agent's `PATH` (the agent runs
//! them by name): shell scripts that fail while a control file
//! `<tool>.fail` exists, hang while `<tool>.block` exists (writing their pid
//! to `<tool>.blocked`), and otherwise exec the real binary. The agent
//! writes sets over netlink, so their fault is an `LD_PRELOAD` shim
//! (`faults/ipset_fault.c`, built with `cc`): while `ipset.fail` exists,
//! each ipset write request its main thread (the reconcile) sends fails
//! with `EPERM`; the workers' set writes and `ipset save` are untouched, as
//! are `*-save`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::harness::probe::echo_roundtrip;
use crate::harness::{
    poll_until, Agent, AgentOptions, DnsRecord, Lab, Resolution, Service, TcpOutcome,
};
use crate::harness::{AGENT_WAIT, ALLOW_WAIT};
use hickory_proto::rr::RecordType;
use tollgate::datapath::plan::fqdn_set;
use tollgate::datapath::Family;
use tollgate::fqdn::FqdnPattern;
use tollgate::status::{Request, Response, StatusReport};

const METRICS: &str = "127.0.0.1:9464";

fn sock(ip: impl Into<IpAddr>, port: u16) -> SocketAddr {
    SocketAddr::new(ip.into(), port)
}

/// A tool whose writes can be faulted: the `*-restore` of a family, or
/// the reconcile's set writes (failed only, never blocked).
#[derive(Clone, Copy)]
pub(crate) enum Tool {
    Iptables,
    Ip6tables,
    Ipset,
}

impl Tool {
    /// Control-file stem.
    fn stem(self) -> &'static str {
        match self {
            Tool::Iptables => "iptables-restore",
            Tool::Ip6tables => "ip6tables-restore",
            Tool::Ipset => "ipset",
        }
    }
}

/// The wrapper directory and its control files, inside the lab directory
/// (removed with the lab).
pub(crate) struct Faults {
    bin: PathBuf,
    ctl: PathBuf,
    /// The set-write shim, when `cc` could build it.
    shim: Option<PathBuf>,
}

impl Faults {
    pub(crate) fn install(lab: &Lab) -> Faults {
        let bin = lab.dir().join("fault-bin");
        let ctl = lab.dir().join("fault-ctl");
        std::fs::create_dir_all(&bin).expect("create fault-bin");
        std::fs::create_dir_all(&ctl).expect("create fault-ctl");
        let wrapped = [
            ("iptables-nft-restore", Tool::Iptables),
            ("iptables-legacy-restore", Tool::Iptables),
            ("ip6tables-nft-restore", Tool::Ip6tables),
            ("ip6tables-legacy-restore", Tool::Ip6tables),
        ];
        for (name, tool) in wrapped {
            let Some(real) = crate::harness::find_in_path(name) else {
                continue;
            };
            let script = format!(
                r#"#!/bin/sh
# Fault-injecting stand-in for {real} (tests/netns/faults.rs).
ctl='{ctl}'
stem='{stem}'
if [ -e "$ctl/$stem.block" ]; then
  echo $$ > "$ctl/$stem.blocked"
  i=0
  while [ -e "$ctl/$stem.block" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
  [ -d "$ctl" ] || exit 1
fi
if [ -e "$ctl/$stem.fail" ]; then
  cat > /dev/null
  echo "$stem: injected fault" >&2
  exit 1
fi
exec '{real}' "$@"
"#,
                real = real.display(),
                ctl = ctl.display(),
                stem = tool.stem(),
            );
            let path = bin.join(name);
            std::fs::write(&path, script).expect("write wrapper");
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .expect("chmod wrapper");
        }
        let shim = crate::harness::find_in_path("cc").map(|cc| {
            let source = bin.join("ipset_fault.c");
            std::fs::write(&source, include_str!("faults/ipset_fault.c")).expect("write shim");
            let shim = bin.join("ipset_fault.so");
            let built = std::process::Command::new(cc)
                .args(["-shared", "-fPIC", "-O1", "-o"])
                .arg(&shim)
                .arg(&source)
                .arg("-ldl")
                .status()
                .expect("run cc");
            assert!(built.success(), "cc {}", source.display());
            shim
        });
        Faults { bin, ctl, shim }
    }

    /// Agent options with the wrappers first on `PATH`, the set-write shim
    /// preloaded, a metrics endpoint and a status socket.
    pub(crate) fn options(&self, lab: &Lab) -> AgentOptions {
        let path = std::env::var("PATH").unwrap_or_default();
        let mut options = lab.agent_options();
        options.env.push((
            "PATH".into(),
            format!(
                "{}:{path}:/usr/sbin:/sbin:/usr/bin:/bin",
                self.bin.display()
            ),
        ));
        if let Some(shim) = &self.shim {
            options
                .env
                .push(("LD_PRELOAD".into(), shim.display().to_string()));
            let flag = self.file(Tool::Ipset, "fail");
            options
                .env
                .push(("TOLLGATE_FAULT_IPSET".into(), flag.display().to_string()));
        }
        options
            .extra_args
            .extend(["--metrics-address".into(), METRICS.into()]);
        options.status_socket = status_socket(lab);
        options
    }

    fn file(&self, tool: Tool, suffix: &str) -> PathBuf {
        self.ctl.join(format!("{}.{suffix}", tool.stem()))
    }

    fn fail(&self, tool: Tool) {
        if matches!(tool, Tool::Ipset) {
            assert!(self.shim.is_some(), "the set-write shim needs cc");
        }
        std::fs::write(self.file(tool, "fail"), "").expect("set fault");
    }

    fn heal(&self, tool: Tool) {
        std::fs::remove_file(self.file(tool, "fail")).expect("clear fault");
    }

    pub(crate) fn block(&self, tool: Tool) {
        assert!(
            !matches!(tool, Tool::Ipset),
            "set writes are failed, not blocked"
        );
        std::fs::write(self.file(tool, "block"), "").expect("set block");
    }

    pub(crate) fn unblock(&self, tool: Tool) {
        std::fs::remove_file(self.file(tool, "block")).expect("clear block");
    }

    /// The pid of the wrapper hanging in `tool`, once it hangs.
    pub(crate) fn blocked(&self, tool: Tool) -> i32 {
        let marker = self.file(tool, "blocked");
        poll_until(AGENT_WAIT, || {
            std::fs::read_to_string(&marker)
                .ok()
                .and_then(|s| s.trim().parse().ok())
        })
        .unwrap_or_else(|| panic!("{} never ran while blocked", tool.stem()))
    }
}

fn status_socket(lab: &Lab) -> PathBuf {
    lab.dir().join("run/tollgate.sock")
}

fn status(lab: &Lab) -> StatusReport {
    match tollgate::status::request(&status_socket(lab), &Request::Status) {
        Ok(Response::Status(report)) => *report,
        other => panic!("status: {other:?}"),
    }
}

/// The agent's metrics, fetched inside the node namespace.
fn metrics(lab: &Lab) -> String {
    let out = lab.node().exec(
        &["curl", "-s", &format!("http://{METRICS}/metrics")],
        Duration::from_secs(10),
    );
    assert!(out.success(), "metrics scrape failed");
    out.stdout
}

/// The value of `series` (name and labels, as exported); panics when it is
/// not exported, so a renamed series cannot read as 0.
#[track_caller]
fn metric_value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{series} is not exported:\n{text}"))
}

/// Waits until the agent has logged `pattern` at least `n` times.
#[track_caller]
fn wait_count(agent: &Agent, pattern: &str, n: usize) {
    if poll_until(AGENT_WAIT, || (agent.count_log(pattern) >= n).then_some(())).is_none() {
        panic!(
            "fewer than {n} {pattern:?} within {AGENT_WAIT:?}; log:\n{}",
            agent.log()
        );
    }
}

/// The highest `ruleset applied generation=N` logged so far.
fn generation(agent: &Agent) -> u64 {
    agent
        .log()
        .lines()
        .filter_map(|l| {
            l.split_once("ruleset applied generation=")?
                .1
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .max()
        .unwrap_or(0)
}

/// Waits for a generation above `after`; returns it.
#[track_caller]
fn wait_newer_generation(agent: &Agent, after: u64) -> u64 {
    poll_until(AGENT_WAIT, || {
        Some(generation(agent)).filter(|g| *g > after)
    })
    .unwrap_or_else(|| {
        panic!(
            "no generation after {after} within {AGENT_WAIT:?}; log:\n{}",
            agent.log()
        )
    })
}

/// Asserts the owned kernel state has no duplicate rule, no duplicate jump
/// and no leftover temporary set.
#[track_caller]
fn assert_clean(lab: &Lab) {
    let state = lab.firewall_state("node");
    assert!(
        state.duplicate_rules().is_empty(),
        "duplicated rules: {:?}",
        state.duplicate_rules()
    );
    for chain in ["INPUT", "OUTPUT", "FORWARD"] {
        assert_eq!(
            state.jumps(chain, &format!("TOLLGATE-{chain}")),
            [1, 1],
            "{state}"
        );
    }
    assert!(
        !state.set_names().iter().any(|s| s.ends_with("-next")),
        "temporary set left: {:?}",
        state.set_names()
    );
}

/// Node ingress: 8001 allowed, `opened` allowed too, the others in
/// 8001..=8003 dropped; with `egress`, also a node egress rule (which makes
/// the kernel queue the OUTPUT hook: a change of both filter tables).
fn node_policy(opened: &[u16], egress: bool) -> String {
    let ports = |ports: &[u16]| -> String {
        ports
            .iter()
            .map(|p| format!("        - protocol: TCP\n          port: {p}\n"))
            .collect()
    };
    let mut allowed = vec![8001];
    allowed.extend(opened);
    let dropped: Vec<u16> = (8001..=8003).filter(|p| !allowed.contains(p)).collect();
    let drop = if dropped.is_empty() {
        String::new()
    } else {
        format!(
            "    - name: drop\n      action: Drop\n      ports:\n{}",
            ports(&dropped)
        )
    };
    let egress = if egress {
        "  egress:
    - name: drop-doc-net
      action: Drop
      to:
        - ipBlock:
            cidr: 192.0.2.0/24
"
    } else {
        ""
    };
    format!(
        "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: node-ports
spec:
  priority: 5
  tier: securityops
  appliedTo:
    - nodeSelector:
        matchLabels:
          kubernetes.io/os: linux
  ingress:
    - name: allow
      action: Allow
      ports:
{}{drop}{egress}",
        ports(&allowed),
    )
}

/// A node serving 8001–8003 and a client with fresh source addresses
/// (probes after a failure, a kill or a reload that applies nothing are
/// made from both: the client's own tuples, which the verdict cache may
/// answer, and fresh ones, which only the workers decide).
fn node_lab(test: &'static str) -> Option<Lab> {
    let lab = Lab::builder(test)
        .peer("client")
        .fresh_sources()
        .require(&["curl"])
        .build()?;
    for port in [8001, 8002, 8003] {
        lab.serve_tcp("node", port, Service::Echo);
    }
    Some(lab)
}

/// Mutation (tried, issue 29): workers that take a pending ruleset
/// before the kernel is ready for it fail it (the fresh connection to
/// 8002 connects while B waits; the client's own tuple is still dropped
/// by the cache).
#[test]
fn failing_iptables_restore_keeps_previous_policy() {
    let Some(lab) = node_lab("failing_iptables_restore_keeps_previous_policy") else {
        return;
    };
    let faults = Faults::install(&lab);
    let node = lab.node_addr("client");
    lab.write_policy("node.yaml", &node_policy(&[], false));
    let mut agent = lab.start_agent(faults.options(&lab));
    agent.wait_generation(1);
    lab.assert_tcp("client", sock(node, 8001), TcpOutcome::Connected);
    lab.assert_tcp("client", sock(node, 8002), TcpOutcome::TimedOut);

    // Policy B opens 8002 and adds a node egress rule (both tables change).
    faults.fail(Tool::Iptables);
    lab.write_policy("node.yaml", &node_policy(&[8002], true));
    agent.wait_for_log("datapath apply failed: iptables-restore: ", AGENT_WAIT);
    wait_count(&agent, "datapath apply failed: iptables-restore: ", 2);
    let line = agent.wait_for_log("retrying in", AGENT_WAIT);
    assert!(line.contains("injected fault"), "{line}");

    // A is still enforced, B is not: by the kernel and by the workers.
    lab.assert_tcp_both("client", sock(node, 8001), TcpOutcome::Connected);
    lab.assert_tcp_both("client", sock(node, 8002), TcpOutcome::TimedOut);
    let text = metrics(&lab);
    assert!(
        metric_value(
            &text,
            "tollgate_datapath_apply_failures_total{step=\"iptables\"}"
        ) >= 2.0,
        "{text}"
    );
    assert_eq!(metric_value(&text, "tollgate_datapath_behind"), 1.0);
    assert_eq!(metric_value(&text, "tollgate_ruleset_generation"), 1.0);
    let report = status(&lab);
    assert_eq!(report.ruleset_generation, 1);
    assert!(
        report
            .datapath_behind
            .as_deref()
            .is_some_and(|e| e.starts_with("iptables-restore: ")),
        "{report:?}"
    );
    assert_eq!(generation(&agent), 1);

    // A newer policy C (8003 instead of 8002) supersedes the pending B: it
    // is tried at once (and fails too).
    let failed = agent.count_log("datapath apply failed: ");
    lab.write_policy("node.yaml", &node_policy(&[8003], true));
    wait_count(&agent, "datapath apply failed: ", failed + 1);
    lab.assert_tcp_both("client", sock(node, 8003), TcpOutcome::TimedOut);

    // The fault clears: the retry re-diffs and C, not B, takes over.
    faults.heal(Tool::Iptables);
    agent.wait_for_log("datapath apply recovered after ", AGENT_WAIT);
    agent.wait_generation(2);
    lab.assert_tcp_both("client", sock(node, 8003), TcpOutcome::Connected);
    lab.assert_tcp_both("client", sock(node, 8002), TcpOutcome::TimedOut);
    assert_eq!(generation(&agent), 2, "B was never put in force");
    let text = metrics(&lab);
    assert_eq!(metric_value(&text, "tollgate_datapath_behind"), 0.0);
    assert_eq!(status(&lab).datapath_behind, None);
    assert_clean(&lab);
    // The retry schedule, shown with `-- --nocapture` (the figure in
    // docs/design/lifecycle.md comes from this).
    for line in agent.log().lines().filter(|l| {
        l.contains("retrying in") || l.contains("recovered after") || l.contains("generation=2")
    }) {
        eprintln!("{line}");
    }
    assert!(agent.terminate().success());
}

/// Mutation (tried, issue 29): as
/// [`failing_iptables_restore_keeps_previous_policy`]'s (the fresh
/// connection to web1's 9090 connects while B waits).
#[test]
fn failing_ipset_keeps_previous_membership() {
    let Some(lab) = Lab::builder("failing_ipset_keeps_previous_membership")
        .peer("client")
        .peer("web1")
        .peer("web2")
        .fresh_sources()
        .require(&["curl", "cc"])
        .build()
    else {
        return;
    };
    let faults = Faults::install(&lab);
    for role in ["web1", "web2"] {
        for port in [7070, 8080, 9090] {
            lab.serve_tcp(role, port, Service::Echo);
        }
    }
    // Pods labelled app=web: the `allowed` ports, everything else dropped.
    // A: web1 only, 8080. B: web2 joins (the endpoint set must change) and
    // 9090 opens. One file, so no reload sees half of a change.
    let policies = |web2_app: &str, allowed: &str| {
        let pod = |name: &str, app: &str, ip: Ipv4Addr| {
            format!(
                "apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: apps
  labels: {{app: {app}}}
spec: {{nodeName: node}}
status:
  podIP: \"{ip}\"
  podIPs: [{{ip: \"{ip}\"}}]
"
            )
        };
        [
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: apps}\n".to_string(),
            pod("web1", "web", lab.addr("web1")),
            pod("web2", web2_app, lab.addr("web2")),
            format!(
                "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: web
spec:
  priority: 5
  tier: application
  appliedTo:
    - podSelector:
        matchLabels: {{app: web}}
  ingress:
    - name: allow
      action: Allow
      ports: [{allowed}]
    - name: drop-rest
      action: Drop
"
            ),
        ]
        .join("---\n")
    };
    let a = policies("other", "{protocol: TCP, port: 8080}");
    let b = policies(
        "web",
        "{protocol: TCP, port: 8080}, {protocol: TCP, port: 9090}",
    );
    let (web1, web2) = (lab.addr("web1"), lab.addr("web2"));
    let member = format!("add tollgate-endpoints-v4 {web2}");
    lab.write_policy("web.yaml", &a);
    let mut agent = lab.start_agent(faults.options(&lab));
    agent.wait_generation(1);
    lab.assert_tcp("client", sock(web1, 9090), TcpOutcome::TimedOut);
    lab.assert_tcp("client", sock(web2, 7070), TcpOutcome::Connected);

    // A → B while the set writes fail: B cannot be enforced without
    // web2 in the set, so A stays whole (9090 on web1 stays closed, web2
    // stays unisolated).
    faults.fail(Tool::Ipset);
    lab.write_policy("web.yaml", &b);
    agent.wait_for_log(
        "datapath apply failed: ipset (create and change sets): ",
        AGENT_WAIT,
    );
    wait_count(&agent, "datapath apply failed: ipset (", 2);
    lab.assert_tcp_both("client", sock(web1, 8080), TcpOutcome::Connected);
    lab.assert_tcp_both("client", sock(web1, 9090), TcpOutcome::TimedOut);
    lab.assert_tcp_both("client", sock(web2, 7070), TcpOutcome::Connected);
    let text = metrics(&lab);
    assert!(
        metric_value(
            &text,
            "tollgate_datapath_apply_failures_total{step=\"ipset_prepare\"}"
        ) >= 2.0,
        "{text}"
    );
    assert_eq!(generation(&agent), 1);
    faults.heal(Tool::Ipset);
    agent.wait_for_log("datapath apply recovered after ", AGENT_WAIT);
    agent.wait_generation(2);
    lab.assert_tcp_both("client", sock(web1, 9090), TcpOutcome::Connected);
    lab.assert_tcp_both("client", sock(web2, 9090), TcpOutcome::Connected);
    lab.assert_tcp_both("client", sock(web2, 7070), TcpOutcome::TimedOut);
    assert!(lab.firewall_state("node").ipsets.contains(&member));

    // B → A while the set writes fail: A needs nothing the kernel lacks
    // (web2 still queued is harmless), so A is in force at once; only the
    // narrowing of the set waits for the retry.
    faults.fail(Tool::Ipset);
    lab.write_policy("web.yaml", &a);
    wait_count(&agent, "datapath apply failed: ipset (", 3);
    let in_force = poll_until(AGENT_WAIT, || {
        (status(&lab).ruleset_generation == 3).then_some(())
    });
    assert!(in_force.is_some(), "A in force as generation 3");
    assert_eq!(generation(&agent), 2, "logged once the kernel matches");
    lab.assert_tcp_both("client", sock(web1, 9090), TcpOutcome::TimedOut);
    lab.assert_tcp_both("client", sock(web2, 7070), TcpOutcome::Connected);
    assert!(lab.firewall_state("node").ipsets.contains(&member));
    assert!(status(&lab).datapath_behind.is_some());
    faults.heal(Tool::Ipset);
    wait_count(&agent, "datapath apply recovered after ", 2);
    agent.wait_generation(3);
    assert!(!lab.firewall_state("node").ipsets.contains(&member));
    assert_eq!(status(&lab).datapath_behind, None);
    assert_clean(&lab);
    assert!(agent.terminate().success());
}

/// Mutation (tried, issue 29): an adopting agent whose workers decide by
/// an empty ruleset fails it (a connection to the dropped 8003, which no
/// worker had decided, connects).
#[test]
fn kill_during_reload_fails_closed_and_restart_converges() {
    let Some(lab) = node_lab("kill_during_reload_fails_closed_and_restart_converges") else {
        return;
    };
    let faults = Faults::install(&lab);
    let node = lab.node_addr("client");
    lab.write_policy("node.yaml", &node_policy(&[], false));
    let mut agent = lab.start_agent(faults.options(&lab));
    agent.wait_generation(1);
    let mut established = lab.tcp_stream("client", sock(node, 8001));
    assert!(echo_roundtrip(&mut established, b"before", ALLOW_WAIT).unwrap());
    // The client's own tuple to 8001, decided a second time: cached.
    lab.assert_tcp("client", sock(node, 8001), TcpOutcome::Connected);
    lab.wait_cached("client", &[(sock(node, 8001), 'a')]);

    // The reload hangs after the sets and the IPv4 table were written,
    // before the IPv6 table: the agent is killed right there.
    faults.block(Tool::Ip6tables);
    lab.write_policy("node.yaml", &node_policy(&[8002], true));
    let wrapper = faults.blocked(Tool::Ip6tables);
    agent.kill9();
    // SAFETY: kill(2) of the wrapper process whose pid it wrote itself;
    // it is a child of the killed agent and still hangs in its loop.
    unsafe { libc::kill(wrapper, libc::SIGKILL) };
    faults.unblock(Tool::Ip6tables);

    // Nobody reads the queues: established flows continue in the kernel,
    // no new connection gets through, whatever the half-written state.
    // Not even the cached tuple: the IPv4 table written is the bridge to
    // B, a ruleset of another generation, and the bridge has no cache
    // lookups (they come back with the narrowing).
    assert!(echo_roundtrip(&mut established, b"orphaned", ALLOW_WAIT).unwrap());
    for port in [8001, 8002, 8003] {
        lab.assert_tcp_fresh("client", sock(node, port), TcpOutcome::TimedOut);
    }
    lab.assert_tcp("client", sock(node, 8001), TcpOutcome::TimedOut);

    // A new agent whose kernel writes fail at start neither exits nor
    // tears down what it found: its workers bind the same queues and
    // decide by the directory's ruleset (B), nothing else is let through.
    faults.fail(Tool::Iptables);
    faults.fail(Tool::Ip6tables);
    let mut second = lab.start_agent(faults.options(&lab));
    second.wait_for_log("datapath apply failed: ", AGENT_WAIT);
    wait_count(&second, "datapath apply failed: ", 2);
    assert!(second.exited().is_none(), "{}", second.log());
    assert_eq!(generation(&second), 0);
    lab.assert_tcp_both("client", sock(node, 8002), TcpOutcome::Connected);
    lab.assert_tcp_both("client", sock(node, 8003), TcpOutcome::TimedOut);

    // Once the writes work it converges to B.
    faults.heal(Tool::Iptables);
    faults.heal(Tool::Ip6tables);
    second.wait_for_log("datapath apply recovered after ", AGENT_WAIT);
    second.wait_generation(1);
    lab.assert_tcp_both("client", sock(node, 8001), TcpOutcome::Connected);
    lab.assert_tcp_both("client", sock(node, 8002), TcpOutcome::Connected);
    lab.assert_tcp_both("client", sock(node, 8003), TcpOutcome::TimedOut);
    assert!(echo_roundtrip(&mut established, b"after", ALLOW_WAIT).unwrap());
    assert_clean(&lab);
    let state = lab.firewall_state("node");
    assert!(
        state
            .rules()
            .any(|r| r.starts_with("-A TOLLGATE-OUTPUT -m conntrack --ctstate NEW -j NFQUEUE")),
        "B's node egress queuing is installed:\n{state}"
    );
    assert!(second.terminate().success());
}

#[test]
fn restart_with_dns_down_keeps_learned_names() {
    let Some(lab) = Lab::builder("restart_with_dns_down_keeps_learned_names")
        .peer("dns")
        .peer("web")
        .require(&["cc"])
        .build()
    else {
        return;
    };
    let faults = Faults::install(&lab);
    let web = lab.addr("web");
    // More addresses on the web peer: for the name not learned yet, and
    // for a name of a selector added later.
    let web_later = Ipv4Addr::new(10, lab.index(), 2, 3);
    let web_api = Ipv4Addr::new(10, lab.index(), 2, 4);
    for address in [web_later, web_api] {
        lab.ns("web")
            .run(&["ip", "addr", "add", &format!("{address}/24"), "dev", "eth0"]);
    }
    lab.serve_tcp("web", 8080, Service::Echo);
    lab.serve_dns(
        "dns",
        53,
        vec![
            DnsRecord::address("learned.example.test", web, 300),
            DnsRecord::address("later.example.test", web_later, 300),
            DnsRecord::address("api.other.test", web_api, 300),
        ],
    );
    let dns = sock(lab.addr("dns"), 53);
    let policy = |other: bool| {
        let other = if other {
            "    - name: api-by-name
      action: Allow
      to: [{fqdn: '*.other.test'}]
      ports: [{protocol: TCP, port: 8080}]
"
        } else {
            ""
        };
        format!(
            "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: node-egress
spec:
  priority: 5
  tier: securityops
  appliedTo:
    - nodeSelector:
        matchLabels:
          kubernetes.io/os: linux
  egress:
    - name: dns
      action: Allow
      to: [{{ipBlock: {{cidr: {}/32}}}}]
      ports: [{{protocol: UDP, port: 53}}]
    - name: web-by-name
      action: Allow
      to: [{{fqdn: '*.example.test'}}]
      ports: [{{protocol: TCP, port: 8080}}]
{other}    - name: drop-web
      action: Drop
      to: [{{ipBlock: {{cidr: {}}}}}]
",
            lab.addr("dns"),
            lab.subnet("web")
        )
    };
    lab.write_policy("egress.yaml", &policy(false));
    let resolve = |name: &str| lab.resolve("node", dns, name, RecordType::A, ALLOW_WAIT);

    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);
    lab.assert_tcp("node", sock(web, 8080), TcpOutcome::TimedOut);
    assert!(matches!(
        resolve("learned.example.test"),
        Resolution::Addresses(_)
    ));
    lab.assert_tcp("node", sock(web, 8080), TcpOutcome::Connected);
    assert!(agent.terminate().success());
    let kept = lab.firewall_state("node");
    assert!(kept.ipsets.contains(&format!("{web} timeout")), "{kept}");

    // The DNS server goes away; the agent starts without it.
    lab.ns("dns").run(&["ip", "link", "set", "eth0", "down"]);
    let mut agent = lab.start_agent(faults.options(&lab));
    agent.wait_generation(1);
    let restored = agent.wait_for_log("fqdn mirror restored", AGENT_WAIT);
    assert!(!restored.contains("restored=0"), "{restored}");
    assert_eq!(resolve("later.example.test"), Resolution::NoAnswer);
    lab.assert_tcp("node", sock(web, 8080), TcpOutcome::Connected);
    lab.assert_tcp("node", sock(web_later, 8080), TcpOutcome::TimedOut);

    // The server returns: learning resumes.
    lab.ns("dns").run(&["ip", "link", "set", "eth0", "up"]);
    let answered = poll_until(AGENT_WAIT, || {
        matches!(resolve("later.example.test"), Resolution::Addresses(_)).then_some(())
    });
    assert!(answered.is_some(), "DNS server back");
    lab.assert_tcp("node", sock(web_later, 8080), TcpOutcome::Connected);

    // A new FQDN selector while the set writes fail: its sets cannot be
    // created, so the change waits and the ruleset in force stays.
    faults.fail(Tool::Ipset);
    lab.write_policy("egress.yaml", &policy(true));
    agent.wait_for_log(
        "datapath apply failed: ipset (create and change sets): ",
        AGENT_WAIT,
    );
    assert!(matches!(
        resolve("api.other.test"),
        Resolution::Addresses(_)
    ));
    lab.assert_tcp("node", sock(web_api, 8080), TcpOutcome::TimedOut);
    lab.assert_tcp("node", sock(web, 8080), TcpOutcome::Connected);
    assert_eq!(generation(&agent), 1);
    faults.heal(Tool::Ipset);
    agent.wait_for_log("datapath apply recovered after ", AGENT_WAIT);
    agent.wait_generation(2);
    let set = fqdn_set(&FqdnPattern::new("*.other.test"), Family::V4);
    let state = lab.firewall_state("node");
    assert!(state.set_names().contains(&set.as_str()), "{state}");
    assert!(matches!(
        resolve("api.other.test"),
        Resolution::Addresses(_)
    ));
    lab.assert_tcp("node", sock(web_api, 8080), TcpOutcome::Connected);
    assert!(agent.terminate().success());
}

/// Replaces the policy directory in one step: a staged directory holding
/// `files` is renamed onto its path.
fn put_policy_dir(lab: &Lab, files: &[(&str, String)]) {
    let staged = lab.dir().join("policies.staged");
    std::fs::create_dir(&staged).expect("stage policies");
    for (name, yaml) in files {
        std::fs::write(staged.join(name), yaml).expect("write staged policy");
    }
    std::fs::rename(&staged, lab.policy_dir()).expect("rename policies into place");
}

/// Mutation (tried, issue 29): a reload that changes nothing (rejected,
/// or a SIGHUP with the same files) leaving the workers an empty ruleset
/// fails it (fresh connections to the dropped ports connect; the
/// client's own tuples are still dropped by the cache).
#[test]
fn vanishing_policy_directory_keeps_last_good_ruleset() {
    let Some(lab) = node_lab("vanishing_policy_directory_keeps_last_good_ruleset") else {
        return;
    };
    let node = lab.node_addr("client");
    let dir = lab.policy_dir();
    lab.write_policy("node.yaml", &node_policy(&[], false));
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);

    // rm -rf: logged, rejected, A stays on the wire.
    std::fs::remove_dir_all(&dir).expect("rm -rf policies");
    agent.wait_for_log(
        "policy directory missing; keeping the ruleset in force",
        AGENT_WAIT,
    );
    agent.wait_for_log("reload rejected: ", AGENT_WAIT);
    lab.assert_tcp_both("client", sock(node, 8001), TcpOutcome::Connected);
    lab.assert_tcp_both("client", sock(node, 8002), TcpOutcome::TimedOut);
    assert_eq!(generation(&agent), 1);

    // It comes back with a new policy: picked up by the re-established
    // watch.
    put_policy_dir(&lab, &[("node.yaml", node_policy(&[8002], false))]);
    agent.wait_for_log("policy directory watch re-established", AGENT_WAIT);
    let g = wait_newer_generation(&agent, 1);
    lab.assert_tcp("client", sock(node, 8002), TcpOutcome::Connected);
    lab.assert_tcp("client", sock(node, 8003), TcpOutcome::TimedOut);

    // Renamed away: the same, and changes in the renamed directory are
    // not taken for the policy directory.
    let away = lab.dir().join("policies.away");
    std::fs::rename(&dir, &away).expect("rename policies away");
    wait_count(&agent, "policy directory missing", 2);
    std::fs::write(away.join("node.yaml"), node_policy(&[8002, 8003], false)).unwrap();
    wait_count(&agent, "reload rejected: ", 2);
    lab.assert_tcp_both("client", sock(node, 8002), TcpOutcome::Connected);
    lab.assert_tcp_both("client", sock(node, 8003), TcpOutcome::TimedOut);
    assert_eq!(generation(&agent), g);

    // Renamed back (now opening 8003): picked up; then edits inside it are
    // watched again, and SIGHUP reloads too.
    std::fs::rename(&away, &dir).expect("rename policies back");
    let g = wait_newer_generation(&agent, g);
    lab.assert_tcp("client", sock(node, 8003), TcpOutcome::Connected);
    lab.write_policy("node.yaml", &node_policy(&[], false));
    let g = wait_newer_generation(&agent, g);
    lab.assert_tcp("client", sock(node, 8002), TcpOutcome::TimedOut);
    lab.assert_tcp("client", sock(node, 8003), TcpOutcome::TimedOut);
    agent.reload();
    wait_newer_generation(&agent, g);
    lab.assert_tcp_both("client", sock(node, 8001), TcpOutcome::Connected);
    lab.assert_tcp_both("client", sock(node, 8002), TcpOutcome::TimedOut);
    lab.assert_tcp_both("client", sock(node, 8003), TcpOutcome::TimedOut);
    assert!(agent.terminate().success());

    // An agent started without its policy directory refuses to run.
    std::fs::remove_dir_all(&dir).expect("rm -rf policies");
    let mut orphan = lab.start_agent(lab.agent_options());
    let status = orphan.wait_exit(AGENT_WAIT);
    assert_eq!(status.code(), Some(2), "{}", orphan.log());
    let expected = format!(
        "policy directory {}: No such file or directory",
        dir.display()
    );
    assert!(orphan.log().contains(&expected), "{}", orphan.log());
}
