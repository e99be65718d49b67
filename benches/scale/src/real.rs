//! The two real agents: the release `tollgate run --kubernetes` in
//! controller mode (`kubernetes.peers=controller`), each in a network
//! namespace of its own that `benches/scale.sh` created, reaching the
//! fake API server on a listener bound inside that namespace
//! ([`FakeApi::listen`]). One's Node hosts an edge Pod (the wide policy:
//! its rules use the group of every Pod), the other's only Pods of local
//! policies. Measured: resident memory, CPU per ruleset applied (above an
//! idle baseline), and probes — one change at a time, a remote Pod's
//! fresh address in a group the agent's rules use and a policy edit —
//! timed until the agent's ruleset in force decides by it
//! (`tollgate trace --exit-code` over its status socket: the peers of a
//! rule are decided by the workers from that ruleset, no kernel set holds
//! a remote Pod). Owns the agents' processes and probes; never touches a
//! namespace it was not given.

use std::fs::File;
use std::net::TcpListener;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tollgate_fake_api::{kubeconfig_at, FakeApi};

use crate::cluster::{self, Size};
use crate::process::{cpu_split, rss_mib, rss_parts_mib, Process};

/// The Namespace of the local agent's probe Pods and policy (not one the
/// churn edits); the wide agent's target is in Namespace 0, an edge one.
const PROBE_NAMESPACE: usize = 1;

pub struct RealAgent {
    pub name: &'static str,
    process: Process,
    log: PathBuf,
    socket: PathBuf,
    tollgate: String,
    /// The local Pod the probes trace to.
    target: String,
}

/// A listener on the loopback of the network namespace `netns`.
fn listener_in(netns: &str) -> Result<TcpListener, String> {
    let path = format!("/run/netns/{netns}");
    std::thread::scope(|s| {
        s.spawn(|| {
            let file = File::open(&path).map_err(|e| format!("{path}: {e}"))?;
            // This thread only: it ends once the listener is bound.
            nix::sched::setns(file.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(|e| format!("setns {path}: {e}"))?;
            TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind in {netns}: {e}"))
        })
        .join()
        .map_err(|_| "the listener's thread panicked".to_string())?
    })
}

fn probe_pod(
    size: &Size,
    name: &str,
    namespace: usize,
    node: usize,
    app: usize,
    ip: &str,
) -> Value {
    let mut pod = cluster::pod(size, 0, app, ip, 0);
    pod["metadata"]["name"] = json!(name);
    pod["metadata"]["namespace"] = json!(cluster::namespace_name(namespace));
    pod["spec"]["nodeName"] = json!(cluster::node_name(node));
    pod
}

/// Probe addresses: outside the churn's 10.0.0.0/8.
fn probe_ip(n: u32) -> String {
    format!("192.168.{}.{}", (n >> 8) & 0xff, n & 0xff)
}

impl RealAgent {
    /// Starts the agent of `node` in `netns` (`wide`: its probe target
    /// is an edge Pod; else an app 0 Pod of the probes' Namespace), its
    /// target Pod written first.
    pub fn start(
        api: &FakeApi,
        size: &Size,
        wide: bool,
        netns: &str,
        node: usize,
        tollgate: &str,
        work: &std::path::Path,
    ) -> Result<RealAgent, String> {
        let (name, namespace, app, ip) = if wide {
            ("wide", 0, cluster::EDGE_APP, probe_ip(1))
        } else {
            ("local", PROBE_NAMESPACE, 0, probe_ip(2))
        };
        let target = format!("probe-{name}");
        api.apply(probe_pod(size, &target, namespace, node, app, &ip));
        let address = api.listen(listener_in(netns)?);
        let kubeconfig = work.join(format!("{name}.kubeconfig"));
        std::fs::write(&kubeconfig, kubeconfig_at(address)).map_err(|e| e.to_string())?;
        let log = work.join(format!("agent-{name}.log"));
        let socket = work.join(format!("agent-{name}.sock"));
        let out = File::create(&log).map_err(|e| e.to_string())?;
        // `ip netns exec` execs the binary: the child's pid is the agent's.
        let child = Command::new("ip")
            .args(["netns", "exec", netns, tollgate, "run", "--kubernetes"])
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--node-name", &cluster::node_name(node)])
            .arg("--status-socket")
            .arg(&socket)
            .args(["--set", "kubernetes.peers=controller"])
            .stdin(Stdio::null())
            .stdout(out.try_clone().map_err(|e| e.to_string())?)
            .stderr(out)
            .spawn()
            .map_err(|e| format!("ip netns exec {netns} {tollgate}: {e}"))?;
        Ok(RealAgent {
            name,
            process: Process(child),
            log,
            socket,
            tollgate: tollgate.to_string(),
            target: format!("{}/{target}", cluster::namespace_name(namespace)),
        })
    }

    pub fn pid(&self) -> u32 {
        self.process.0.id()
    }

    /// Rulesets applied so far (its log's `ruleset applied` lines).
    pub fn applied(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .matches("ruleset applied")
            .count()
    }

    pub fn alive(&mut self) -> Result<(), String> {
        match self.process.0.try_wait() {
            Ok(None) => Ok(()),
            _ => Err(format!(
                "agent {} exited; its log: {}",
                self.name,
                self.log.display()
            )),
        }
    }

    /// Whether its ruleset in force allows TCP from `src` to its target.
    fn allows(&self, src: &str) -> bool {
        Command::new(&self.tollgate)
            .arg("trace")
            .arg("--socket")
            .arg(&self.socket)
            .args(["--src", src, "--dst", &self.target, "--protocol", "tcp"])
            .args(["--dst-port", "80", "--exit-code"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.code() == Some(0))
    }

    /// Waits (bounded) until `src` is allowed (or denied): the time since
    /// `since`, or `None` at the deadline.
    fn until(&self, src: &str, allowed: bool, since: Instant) -> Option<f64> {
        let deadline = since + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self.allows(src) == allowed {
                return Some(since.elapsed().as_secs_f64() * 1e3);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    pub fn rss_mib(&self) -> f64 {
        rss_mib(self.pid())
    }

    /// Its RSS as its own memory and mapped files' pages, in MiB.
    pub fn rss_parts_mib(&self) -> (f64, f64) {
        rss_parts_mib(self.pid())
    }

    /// The agent's CPU seconds, and its child processes'.
    pub fn cpu_split(&self) -> (f64, f64) {
        cpu_split(self.pid())
    }
}

/// What a probe changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// A remote Pod's fresh address (through the controller's groups).
    Address,
    /// The local policy edited, or the edit reverted (the agent's own
    /// policy watch).
    PolicyEdit,
}

/// The probes, one change at a time: a peer Pod (app 1 of the probes'
/// Namespace, on a simulated Node) given a fresh address, which both
/// agents must come to allow — the local agent's target is app 0, whose
/// policy allows app 1 then drops the rest; the wide agent's is an edge
/// Pod, which allows every Pod then drops the rest — then the local
/// policy edited to allow app 2 instead (the local agent must deny the
/// peer) and back (allow it again).
pub struct Probes {
    size: Size,
    peer_node: usize,
    next: u32,
    /// Milliseconds, by agent name and probe kind, one per (probe, agent).
    pub samples: Vec<(&'static str, Probe, f64)>,
    /// Probes not applied within 30 s.
    pub missed: usize,
}

impl Probes {
    pub fn new(size: Size, peer_node: usize) -> Probes {
        Probes {
            size,
            peer_node,
            next: 1000,
            samples: Vec::new(),
            missed: 0,
        }
    }

    fn record(&mut self, agent: &RealAgent, probe: Probe, ms: Option<f64>) {
        match ms {
            Some(ms) => self.samples.push((agent.name, probe, ms)),
            None => self.missed += 1,
        }
    }

    /// One round: the address probe for both agents, then the policy
    /// edit and its revert for the local one.
    pub fn round(&mut self, api: &FakeApi, agents: &[RealAgent]) {
        self.next += 1;
        let ip = probe_ip(self.next);
        let since = Instant::now();
        let peer = probe_pod(
            &self.size,
            "probe-peer",
            PROBE_NAMESPACE,
            self.peer_node,
            1,
            &ip,
        );
        api.apply(peer);
        for agent in agents {
            let ms = agent.until(&ip, true, since);
            self.record(agent, Probe::Address, ms);
        }
        let Some(local) = agents.iter().find(|a| a.name == "local") else {
            return;
        };
        for (from, allowed) in [(2, false), (1, true)] {
            let since = Instant::now();
            api.apply(cluster::local_policy(PROBE_NAMESPACE, 0, from));
            let ms = local.until(&ip, allowed, since);
            self.record(local, Probe::PolicyEdit, ms);
        }
    }
}
