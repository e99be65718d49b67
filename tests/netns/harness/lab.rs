//! The lab topology: one "node" namespace that is both a host and a router,
//! and one peer namespace per role ("client1", "server", ...) attached to it
//! by its own veth pair and subnet.
//!
//! ```text
//!   [peer 1] eth0 10.I.1.2/24 ── n-<role1> 10.I.1.1/24 ┐
//!                                                      ├─ [node] (ip_forward=1)
//!   [peer k] eth0 10.I.k.2/24 ── n-<rolek> 10.I.k.1/24 ┘
//! ```
//!
//! With IPv6 each link also gets `fd00:I:k::1/64` (node) and `fd00:I:k::2/64`
//! (peer), without duplicate-address detection. Peers route everything via
//! the node. `I` is the test's index in [`super::TEST_IDS`]. A lab may also
//! hold unlinked namespaces (loopback up, nothing else), which the test
//! wires with addresses of its own.
//!
//! Names: `tg<I>-<tag>-<role>`, where `<tag>` is the test process's own
//! five-character random tag. The process holds an exclusive lock on
//! `/run/tollgate-tests/<tag>.lock` while it lives; a later harness run that
//! can take that lock knows the owner is gone and deletes its namespaces.
//! Liveness by lock, not by pid, so runs in different pid namespaces that
//! share `/run` cannot take each other's labs for stale.

use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use hickory_proto::rr::RecordType;

use super::agent::{Agent, AgentOptions};
use super::dns::{self, DnsRecord, Resolution};
use super::firewall::FirewallState;
use super::netns::{run_with_timeout, Netns};
use super::probe::{self, PingOutcome, QueueCounters, TcpOutcome, UdpOutcome};
use super::server::{self, Service};
use super::{missing_precondition, poll_until, skip, TEST_IDS};

/// The role name of the node namespace.
pub const NODE: &str = "node";

/// Where test processes keep their liveness locks.
pub(super) const LOCK_DIR: &str = "/run/tollgate-tests";

/// Describes a lab before it is built.
pub struct LabBuilder {
    test: &'static str,
    index: u8,
    peers: Vec<String>,
    unlinked: Vec<String>,
    ipv6: bool,
    fresh: bool,
    tools: Vec<&'static str>,
}

/// A built lab. Dropping it stops servers and background processes, kills
/// every process in its namespaces, deletes the namespaces and removes its
/// temporary directory.
pub struct Lab {
    test: &'static str,
    index: u8,
    prefix: String,
    node: Netns,
    peers: Vec<(String, Netns)>,
    unlinked: Vec<(String, Netns)>,
    ipv6: bool,
    /// The fresh source pools of the peers, by link (see
    /// [`LabBuilder::fresh_sources`]).
    fresh: Vec<FreshSources>,
    dir: PathBuf,
    stop: Arc<AtomicBool>,
    servers: Mutex<Vec<std::thread::JoinHandle<()>>>,
    background: Mutex<Vec<Child>>,
}

impl Lab {
    /// Starts describing the lab of test `test`, which must be listed in
    /// [`TEST_IDS`].
    pub fn builder(test: &'static str) -> LabBuilder {
        let position = TEST_IDS
            .iter()
            .position(|t| *t == test)
            .unwrap_or_else(|| panic!("test {test:?} is not listed in common::TEST_IDS"));
        LabBuilder {
            test,
            index: test_index(position),
            peers: Vec::new(),
            unlinked: Vec::new(),
            ipv6: false,
            fresh: false,
            tools: Vec::new(),
        }
    }
}

impl LabBuilder {
    /// Adds a peer namespace attached to the node by its own link.
    pub fn peer(mut self, role: &str) -> Self {
        self.check_role(role);
        self.peers.push(role.to_string());
        self
    }

    /// Adds a namespace with only its loopback up, for a test that wires
    /// its own topology (links, addresses, routes) with
    /// [`Netns::run`]/[`Netns::ok`].
    pub fn unlinked(mut self, role: &str) -> Self {
        self.check_role(role);
        self.unlinked.push(role.to_string());
        self
    }

    fn check_role(&self, role: &str) {
        // The node's interface to a peer is `n-<role>`: at most 15 bytes.
        assert!(role != NODE && role.len() <= 13, "bad role {role:?}");
        assert!(
            !self.peers.iter().chain(&self.unlinked).any(|p| p == role),
            "duplicate role {role}"
        );
    }

    /// Also gives every link IPv6 ULA addresses.
    pub fn ipv6(mut self) -> Self {
        self.ipv6 = true;
        self
    }

    /// Gives every peer a pool of fresh source addresses
    /// ([`Lab::fresh_sources`]): addresses no packet came from before, so
    /// a probe from one meets a tuple the kernel verdict cache has never
    /// answered and that no worker has decided.
    pub fn fresh_sources(mut self) -> Self {
        self.fresh = true;
        self
    }

    /// Requires extra tools (besides [`super::BASE_TOOLS`]).
    pub fn require(mut self, tools: &[&'static str]) -> Self {
        self.tools.extend_from_slice(tools);
        self
    }

    /// Builds the lab, or returns `None` after reporting a skip (see
    /// [`super::skip`]). Panics when building fails.
    pub fn build(self) -> Option<Lab> {
        if let Some(reason) = missing_precondition(&self.tools) {
            skip(self.test, &reason);
            return None;
        }
        let prefix = format!("tg{}-{}-", self.index, process_tag());
        // Short: Unix socket paths inside it must stay under 108 bytes.
        let dir = std::env::temp_dir().join(format!("tollgate-{prefix}lab"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("policies")).expect("create lab directory");
        let mut lab = Lab {
            test: self.test,
            index: self.index,
            node: Netns::new(format!("{prefix}{NODE}")),
            peers: Vec::new(),
            unlinked: Vec::new(),
            ipv6: self.ipv6,
            fresh: Vec::new(),
            prefix,
            dir,
            stop: Arc::new(AtomicBool::new(false)),
            servers: Mutex::new(Vec::new()),
            background: Mutex::new(Vec::new()),
        };
        // From here on, Drop cleans up whatever was created.
        lab.create_ns(&lab.node.clone());
        lab.node.run(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        if lab.ipv6 {
            lab.node
                .run(&["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"]);
        }
        for (i, role) in self.peers.iter().enumerate() {
            let link = u8::try_from(i + 1).expect("fewer than 255 peers");
            let ns = Netns::new(format!("{}{role}", lab.prefix));
            lab.peers.push((role.clone(), ns.clone()));
            lab.create_ns(&ns);
            lab.connect_peer(&ns, role, link);
            if self.fresh {
                let pool = lab.route_fresh_sources(&ns, role, link);
                lab.fresh.push(pool);
            }
        }
        for role in &self.unlinked {
            let ns = Netns::new(format!("{}{role}", lab.prefix));
            lab.unlinked.push((role.clone(), ns.clone()));
            lab.create_ns(&ns);
        }
        Some(lab)
    }
}

impl Lab {
    fn create_ns(&self, ns: &Netns) {
        let out = run_with_timeout(
            {
                let mut c = std::process::Command::new("ip");
                c.args(["netns", "add", ns.name()]);
                c
            },
            Duration::from_secs(10),
        );
        out.expect_success(&format!("ip netns add {}", ns.name()));
        ns.run(&["ip", "link", "set", "lo", "up"]);
    }

    fn connect_peer(&self, ns: &Netns, role: &str, link: u8) {
        let node_if = node_ifname(role);
        // Create the pair directly inside the two namespaces: nothing ever
        // appears in the root namespace.
        self.node.run(&[
            "ip",
            "link",
            "add",
            &node_if,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            ns.name(),
        ]);
        let (node4, peer4) = (self.v4(link, 1), self.v4(link, 2));
        self.node
            .run(&["ip", "addr", "add", &format!("{node4}/24"), "dev", &node_if]);
        ns.run(&["ip", "addr", "add", &format!("{peer4}/24"), "dev", "eth0"]);
        if self.ipv6 {
            // No duplicate address detection on either end, link-local
            // addresses included: while the link-local address is
            // tentative, neighbour discovery waits, and the lab's first
            // IPv6 connection took 1-2 s (its retransmitted SYNs decided,
            // logged and counted again).
            self.node.run(&[
                "sysctl",
                "-qw",
                &format!("net.ipv6.conf.{node_if}.accept_dad=0"),
            ]);
            ns.run(&["sysctl", "-qw", "net.ipv6.conf.eth0.accept_dad=0"]);
            let (node6, peer6) = (self.v6(link, 1), self.v6(link, 2));
            self.node.run(&[
                "ip",
                "addr",
                "add",
                &format!("{node6}/64"),
                "dev",
                &node_if,
                "nodad",
            ]);
            ns.run(&[
                "ip",
                "addr",
                "add",
                &format!("{peer6}/64"),
                "dev",
                "eth0",
                "nodad",
            ]);
        }
        self.node.run(&["ip", "link", "set", &node_if, "up"]);
        ns.run(&["ip", "link", "set", "eth0", "up"]);
        ns.run(&["ip", "route", "add", "default", "via", &node4.to_string()]);
        if self.ipv6 {
            ns.run(&[
                "ip",
                "-6",
                "route",
                "add",
                "default",
                "via",
                &self.v6(link, 1).to_string(),
            ]);
        }
    }

    /// Routes peer `role`'s pool of fresh sources: the peer takes every
    /// address of the pool as its own (a `local` route, and
    /// `ip_nonlocal_bind` so that a socket may bind one), the node routes
    /// the pool through the peer. Nothing is added to an interface, so
    /// the node's addresses (which an agent watches) stay as they are.
    fn route_fresh_sources(&self, ns: &Netns, role: &str, link: u8) -> FreshSources {
        assert!(link <= 4, "fresh sources for the first four peers only");
        let pool = FreshSources::new(self.index, link, self.ipv6);
        let peer4 = self.v4(link, 2).to_string();
        let node_if = node_ifname(role);
        let (net4, net6) = pool.networks();
        self.node
            .run(&["ip", "route", "add", &net4, "via", &peer4, "dev", &node_if]);
        ns.run(&["ip", "route", "add", "local", &net4, "dev", "lo"]);
        ns.run(&["sysctl", "-qw", "net.ipv4.ip_nonlocal_bind=1"]);
        if let Some(net6) = net6 {
            let peer6 = self.v6(link, 2).to_string();
            self.node.run(&[
                "ip", "-6", "route", "add", &net6, "via", &peer6, "dev", &node_if,
            ]);
            ns.run(&["ip", "-6", "route", "add", "local", &net6, "dev", "lo"]);
            ns.run(&["sysctl", "-qw", "net.ipv6.ip_nonlocal_bind=1"]);
        }
        pool
    }

    fn v4(&self, link: u8, host: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, self.index, link, host)
    }

    fn v6(&self, link: u8, host: u16) -> Ipv6Addr {
        Ipv6Addr::new(
            0xfd00,
            u16::from(self.index),
            u16::from(link),
            0,
            0,
            0,
            0,
            host,
        )
    }

    fn link_of(&self, role: &str) -> u8 {
        let i = self
            .peers
            .iter()
            .position(|(r, _)| r == role)
            .unwrap_or_else(|| panic!("no peer {role:?} in this lab"));
        u8::try_from(i + 1).expect("few peers")
    }

    fn require_v6(&self) {
        assert!(self.ipv6, "this lab was built without .ipv6()");
    }

    /// The test's index (its address range is `10.<index>.0.0/16`).
    pub fn index(&self) -> u8 {
        self.index
    }

    /// The node namespace.
    pub fn node(&self) -> &Netns {
        &self.node
    }

    /// The namespace of `role` (`"node"`, a peer or an unlinked role).
    pub fn ns(&self, role: &str) -> &Netns {
        if role == NODE {
            return &self.node;
        }
        self.peers
            .iter()
            .chain(&self.unlinked)
            .find(|(r, _)| r == role)
            .map(|(_, ns)| ns)
            .unwrap_or_else(|| panic!("no namespace {role:?} in this lab"))
    }

    /// The IPv4 address of peer `role` (`10.I.k.2`).
    pub fn addr(&self, role: &str) -> Ipv4Addr {
        self.v4(self.link_of(role), 2)
    }

    /// The IPv6 address of peer `role` (`fd00:I:k::2`).
    pub fn addr6(&self, role: &str) -> Ipv6Addr {
        self.require_v6();
        self.v6(self.link_of(role), 2)
    }

    /// The node's IPv4 address on the link to `role` (`10.I.k.1`).
    pub fn node_addr(&self, role: &str) -> Ipv4Addr {
        self.v4(self.link_of(role), 1)
    }

    /// The node's IPv6 address on the link to `role` (`fd00:I:k::1`).
    pub fn node_addr6(&self, role: &str) -> Ipv6Addr {
        self.require_v6();
        self.v6(self.link_of(role), 1)
    }

    /// The subnet of the link to `role`, e.g. `10.I.k.0/24`.
    pub fn subnet(&self, role: &str) -> String {
        format!("{}/24", self.v4(self.link_of(role), 0))
    }

    /// Every address the node owns on its links (IPv4, then IPv6).
    pub fn node_addresses(&self) -> Vec<IpAddr> {
        let links = 1..=u8::try_from(self.peers.len()).expect("few peers");
        let mut out: Vec<IpAddr> = links.clone().map(|l| self.v4(l, 1).into()).collect();
        if self.ipv6 {
            out.extend(links.map(|l| IpAddr::from(self.v6(l, 1))));
        }
        out
    }

    /// Peer `role`'s pool of fresh source addresses (the lab was built
    /// with [`LabBuilder::fresh_sources`]).
    pub fn fresh_sources(&self, role: &str) -> FreshSources {
        let link = usize::from(self.link_of(role));
        self.fresh
            .get(link - 1)
            .cloned()
            .unwrap_or_else(|| panic!("the lab was built without .fresh_sources()"))
    }

    /// Opens a TCP connection to `to` from the next fresh source address
    /// of peer `role` (a tuple no worker has decided and the verdict cache
    /// has never answered) and classifies the result.
    pub fn tcp_fresh(
        &self,
        role: &str,
        to: impl Into<SocketAddr>,
        timeout: Duration,
    ) -> TcpOutcome {
        let to = to.into();
        let from = self.fresh_sources(role).next(to.is_ipv6());
        probe::tcp_connect_from(self.ns(role), from, to, timeout)
    }

    /// [`Lab::tcp_fresh`], asserting the outcome as [`Lab::assert_tcp`]
    /// does.
    #[track_caller]
    pub fn assert_tcp_fresh(&self, role: &str, to: impl Into<SocketAddr>, expected: TcpOutcome) {
        let to = to.into();
        let wait = if expected == TcpOutcome::TimedOut {
            super::DENY_WAIT
        } else {
            super::ALLOW_WAIT
        };
        let got = self.tcp_fresh(role, to, wait);
        assert_eq!(got, expected, "TCP {role} (a fresh source) -> {to}");
    }

    /// Asserts the outcome of a new connection from `role` to `to` twice:
    /// from `role`'s own address (a tuple the verdict cache may hold) and
    /// from a fresh source (one only the agent's queues can answer).
    #[track_caller]
    pub fn assert_tcp_both(&self, role: &str, to: impl Into<SocketAddr>, expected: TcpOutcome) {
        let to = to.into();
        self.assert_tcp(role, to, expected);
        self.assert_tcp_fresh(role, to, expected);
    }

    /// The lab's private scratch directory (removed on drop).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The policy directory handed to the agent.
    pub fn policy_dir(&self) -> PathBuf {
        self.dir.join("policies")
    }

    /// Writes `yaml` as `policies/<file>`, atomically (written beside the
    /// directory, then renamed in), so a watching agent never reads half a
    /// file.
    pub fn write_policy(&self, file: &str, yaml: &str) {
        let tmp = self.dir.join(format!(".{file}.tmp"));
        std::fs::write(&tmp, yaml).expect("write policy");
        std::fs::rename(&tmp, self.policy_dir().join(file)).expect("rename policy");
    }

    /// Removes `policies/<file>`.
    pub fn remove_policy(&self, file: &str) {
        std::fs::remove_file(self.policy_dir().join(file)).expect("remove policy");
    }

    /// Starts `argv` in the namespace of `role` as a background process
    /// (a server such as nginx or dnsmasq); its stdout and stderr go to
    /// `<program>-<n>.log` in the lab directory. Killed and reaped when the
    /// lab is dropped.
    pub fn spawn(&self, role: &str, argv: &[&str]) {
        let mut background = self.background.lock().expect("background list");
        let program = Path::new(argv[0])
            .file_name()
            .map_or_else(|| argv[0].into(), |n| n.to_string_lossy());
        let log = self.dir.join(format!("{program}-{}.log", background.len()));
        let out = File::create(&log).expect("create background log");
        let err = out.try_clone().expect("clone log handle");
        let child = self
            .ns(role)
            .command(argv)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {argv:?} in {role}: {e}"));
        background.push(child);
    }

    /// Sets the `resolv.conf` that commands run in `role`'s namespace see
    /// (`ip netns exec` mounts `/etc/netns/<name>/resolv.conf`); removed
    /// with the namespace.
    pub fn resolv_conf(&self, role: &str, text: &str) {
        let dir = Path::new("/etc/netns").join(self.ns(role).name());
        std::fs::create_dir_all(&dir).expect("create /etc/netns/<name>");
        std::fs::write(dir.join("resolv.conf"), text).expect("write resolv.conf");
    }

    /// Starts `tollgate run` in the node namespace.
    pub fn start_agent(&self, options: AgentOptions) -> Agent {
        Agent::start(self, options)
    }

    /// Default agent options for this lab: node name `node`, label
    /// `kubernetes.io/os=linux`, every node address.
    pub fn agent_options(&self) -> AgentOptions {
        AgentOptions::new(self)
    }

    /// Serves `service` on TCP `port` (all addresses, both families) in the
    /// namespace of `role`. Listening before this returns; stops on drop.
    pub fn serve_tcp(&self, role: &str, port: u16, service: Service) {
        let handle = server::serve_tcp(self.ns(role), port, service, self.stop.clone());
        self.servers.lock().expect("server list").push(handle);
    }

    /// Serves UDP echo on `port` in the namespace of `role`.
    pub fn serve_udp_echo(&self, role: &str, port: u16) {
        let handle = server::serve_udp_echo(self.ns(role), port, self.stop.clone());
        self.servers.lock().expect("server list").push(handle);
    }

    /// Serves `zone` as an authoritative DNS server on UDP `port` in the
    /// namespace of `role`.
    pub fn serve_dns(&self, role: &str, port: u16, zone: Vec<DnsRecord>) {
        let handle = dns::serve_dns(self.ns(role), port, zone, self.stop.clone());
        self.servers.lock().expect("server list").push(handle);
    }

    /// Resolves `name` (A or AAAA) from `role` by asking `server`.
    pub fn resolve(
        &self,
        role: &str,
        server: impl Into<SocketAddr>,
        name: &str,
        record_type: RecordType,
        timeout: Duration,
    ) -> Resolution {
        dns::resolve(self.ns(role), server.into(), name, record_type, timeout)
    }

    /// Waits until something listens on TCP `port` in `role`'s namespace
    /// (for servers started as external processes).
    pub fn wait_listening(&self, role: &str, port: u16, timeout: Duration) -> bool {
        let ns = self.ns(role).clone();
        let filter = format!("sport = :{port}");
        poll_until(timeout, || {
            let out = ns.exec(&["ss", "-Hltn", &filter], Duration::from_secs(5));
            (out.success() && !out.stdout.trim().is_empty()).then_some(())
        })
        .is_some()
    }

    /// Opens a TCP connection from `role` to `to` and classifies the result.
    pub fn tcp(&self, role: &str, to: impl Into<SocketAddr>, timeout: Duration) -> TcpOutcome {
        probe::tcp_connect(self.ns(role), to.into(), timeout)
    }

    /// Asserts that a new TCP connection from `role` to `to` ends as
    /// `expected`, waiting [`super::DENY_WAIT`] when a timeout is expected
    /// and [`super::ALLOW_WAIT`] otherwise.
    #[track_caller]
    pub fn assert_tcp(&self, role: &str, to: impl Into<SocketAddr>, expected: TcpOutcome) {
        let to = to.into();
        let wait = if expected == TcpOutcome::TimedOut {
            super::DENY_WAIT
        } else {
            super::ALLOW_WAIT
        };
        let got = self.tcp(role, to, wait);
        assert_eq!(got, expected, "TCP {role} -> {to}");
    }

    /// Connects from `role` to `to` and returns the open stream (which keeps
    /// living in `role`'s namespace).
    pub fn tcp_stream(&self, role: &str, to: impl Into<SocketAddr>) -> std::net::TcpStream {
        probe::tcp_stream(self.ns(role), to.into(), super::ALLOW_WAIT)
            .unwrap_or_else(|e| panic!("TCP {role} -> connect failed: {e}"))
    }

    /// Sends one datagram from `role` to `to` and classifies the answer.
    pub fn udp(&self, role: &str, to: impl Into<SocketAddr>, timeout: Duration) -> UdpOutcome {
        probe::udp_exchange(self.ns(role), to.into(), timeout)
    }

    /// One ICMP echo from `role` to `to`.
    pub fn ping(&self, role: &str, to: impl Into<IpAddr>, timeout: Duration) -> PingOutcome {
        probe::ping(self.ns(role), to.into(), timeout)
    }

    /// `curl` from `role`: the HTTP status, or curl's exit code.
    pub fn curl(&self, role: &str, url: &str, timeout: Duration) -> Result<u16, i32> {
        probe::curl(self.ns(role), url, timeout)
    }

    /// NFQUEUE counters of the node namespace, one entry per bound queue.
    pub fn queue_counters(&self) -> Vec<QueueCounters> {
        probe::queue_counters(&self.node)
    }

    /// Waits (at most [`super::AGENT_WAIT`]) until the node's verdict
    /// cache holds peer `role`'s own tuple to each `(target, verdict)`
    /// in a set of the INPUT hook (`verdict`: `'a'` Allow, `'d'` Drop,
    /// `'r'` Reject); panics with the cache's entries otherwise. From then
    /// on the kernel answers those tuples, with or without an agent.
    #[track_caller]
    pub fn wait_cached(&self, role: &str, tuples: &[(SocketAddr, char)]) {
        let wanted: Vec<(String, String)> = tuples
            .iter()
            .map(|(to, verdict)| {
                let from = match to {
                    SocketAddr::V4(_) => IpAddr::from(self.addr(role)),
                    SocketAddr::V6(_) => IpAddr::from(self.addr6(role)),
                };
                (
                    format!(" {from},tcp:{},{} ", to.port(), to.ip()),
                    format!("-i{verdict}-v"),
                )
            })
            .collect();
        let entries = || {
            let save = self.node.run(&["ipset", "save"]).stdout;
            save.lines()
                .filter(|l| l.starts_with("add tollgate-vc-"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        let cached = poll_until(super::AGENT_WAIT, || {
            let entries = entries();
            wanted
                .iter()
                .all(|(tuple, set)| {
                    entries.iter().any(|e| {
                        e.contains(tuple.as_str())
                            && e.split(' ')
                                .nth(1)
                                .is_some_and(|s| s.contains(set.as_str()))
                    })
                })
                .then_some(())
        });
        assert!(
            cached.is_some(),
            "not cached: {wanted:?}; the cache holds {:?}",
            entries()
        );
    }

    /// The firewall state of `role`'s namespace (counters stripped).
    pub fn firewall_state(&self, role: &str) -> FirewallState {
        FirewallState::capture(self.ns(role))
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Ok(mut background) = self.background.lock() {
            for child in background.iter_mut() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let namespaces: Vec<Netns> = std::iter::once(self.node.clone())
            .chain(self.peers.iter().map(|(_, ns)| ns.clone()))
            .chain(self.unlinked.iter().map(|(_, ns)| ns.clone()))
            .collect();
        for ns in &namespaces {
            destroy_ns(ns);
        }
        if let Ok(mut servers) = self.servers.lock() {
            for handle in servers.drain(..) {
                let _ = handle.join();
            }
        }
        if std::thread::panicking() {
            eprintln!(
                "lab {} kept for inspection: {}",
                self.test,
                self.dir.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Kills the processes inside `ns` (all started by this harness), deletes
/// it and its `/etc/netns/<name>` files.
pub(super) fn destroy_ns(ns: &Netns) {
    let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(ns.name()));
    if !Path::new("/run/netns").join(ns.name()).exists() {
        return;
    }
    for pid in ns.pids() {
        // SAFETY: plain kill(2) of a process living in our own namespace.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let mut cmd = std::process::Command::new("ip");
    cmd.args(["netns", "delete", ns.name()]);
    let _ = run_with_timeout(cmd, Duration::from_secs(10));
}

/// Fresh source addresses per peer link: at most this many per family.
const FRESH_PER_LINK: u32 = 8190;

/// A peer's pool of source addresses that nothing used before, handed out
/// once each (cheap to clone; clones share what was handed out): IPv4
/// `10.I.(128 + 32·(k−1)).0/19` and IPv6 `fd00:I:k:1::/64` for link `k`,
/// inside the test's own range. Every connection from one of them is a
/// tuple (source, protocol, port, destination) no worker has decided, so
/// the kernel verdict cache cannot answer it: the agent's queues must.
#[derive(Clone, Debug)]
pub struct FreshSources {
    v4: Ipv4Addr,
    v6: Option<Ipv6Addr>,
    handed: Arc<[std::sync::atomic::AtomicU32; 2]>,
}

impl FreshSources {
    fn new(index: u8, link: u8, ipv6: bool) -> FreshSources {
        FreshSources {
            v4: Ipv4Addr::new(10, index, 128 + 32 * (link - 1), 0),
            v6: ipv6
                .then(|| Ipv6Addr::new(0xfd00, u16::from(index), u16::from(link), 1, 0, 0, 0, 0)),
            handed: Arc::new(Default::default()),
        }
    }

    /// The pool's IPv4 and (with IPv6) IPv6 network, as `ip route` takes it.
    pub fn networks(&self) -> (String, Option<String>) {
        (
            format!("{}/19", self.v4),
            self.v6.map(|v6| format!("{v6}/64")),
        )
    }

    /// The next address never handed out (IPv6 when `v6`); panics when the
    /// pool is used up.
    pub fn next(&self, v6: bool) -> IpAddr {
        let n = self.handed[usize::from(v6)].fetch_add(1, Ordering::SeqCst);
        assert!(n < FRESH_PER_LINK, "the fresh source pool is used up");
        if v6 {
            let base = self.v6.expect("the lab was built without .ipv6()");
            IpAddr::from(Ipv6Addr::from(u128::from(base) + 1 + u128::from(n)))
        } else {
            IpAddr::from(Ipv4Addr::from(u32::from(self.v4) + 1 + n))
        }
    }

    /// How many addresses of each family (IPv4, IPv6) were handed out.
    pub fn handed_out(&self) -> [u32; 2] {
        [0, 1].map(|i| self.handed[i].load(Ordering::SeqCst))
    }
}

/// The interface name on the node for the link to `role` (at most 15 bytes).
fn node_ifname(role: &str) -> String {
    let mut name = format!("n-{role}");
    name.truncate(15);
    name
}

/// This test process's tag: five random lowercase letters and digits,
/// claimed once per process (see the module doc), after namespaces of test
/// processes that are gone have been reaped.
fn process_tag() -> &'static str {
    static TAG: OnceLock<(String, File)> = OnceLock::new();
    &TAG.get_or_init(|| {
        std::fs::create_dir_all(LOCK_DIR).expect("create the lock directory");
        reap_stale_labs();
        claim_tag()
    })
    .0
}

/// Creates and locks `<tag>.lock` for a fresh random tag. The lock is taken
/// on a staging name first and the file linked into place only then, so no
/// other process ever sees the lock file of a live tag unlocked.
fn claim_tag() -> (String, File) {
    use std::hash::{BuildHasher, Hasher};
    let dir = Path::new(LOCK_DIR);
    for attempt in 0u32..100 {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        hasher.write_u32(attempt);
        let mut n = hasher.finish();
        let tag: String = (0..5)
            .map(|_| {
                let digit = char::from_digit((n % 36) as u32, 36).expect("base 36");
                n /= 36;
                digit
            })
            .collect();
        let staged = dir.join(format!(".{tag}.{}", std::process::id()));
        let file = File::create(&staged).expect("create lock file");
        file.try_lock().expect("lock a file nobody else knows");
        let linked = std::fs::hard_link(&staged, dir.join(format!("{tag}.lock")));
        let _ = std::fs::remove_file(&staged);
        match linked {
            Ok(()) => return (tag, file),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => panic!("link lock file for tag {tag}: {e}"),
        }
    }
    panic!("no free test process tag in {LOCK_DIR}");
}

/// Deletes lab namespaces (`tg<index>-<tag>-<role>`) whose test process is
/// gone (its lock can be taken): leftovers of a test binary killed mid-run;
/// and the lock files of gone processes. Namespaces whose tag has no lock
/// file are left alone.
pub(super) fn reap_stale_labs() {
    let mut by_tag: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for entry in std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(tag) = lab_tag(&name) {
            by_tag.entry(tag.to_string()).or_default().push(name);
        }
    }
    for entry in std::fs::read_dir(LOCK_DIR).into_iter().flatten().flatten() {
        let lock = entry.path();
        let Some(tag) = lock
            .file_name()
            .and_then(|n| n.to_str()?.strip_suffix(".lock"))
        else {
            continue;
        };
        let Ok(file) = File::open(&lock) else {
            continue;
        };
        if file.try_lock().is_ok() {
            for name in by_tag.remove(tag).unwrap_or_default() {
                destroy_ns(&Netns::new(name));
            }
            // Still holding the lock: nobody can be relying on this file.
            let _ = std::fs::remove_file(&lock);
        }
    }
}

/// The process tag in a lab namespace name, if `name` is one.
pub(super) fn lab_tag(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("tg")?;
    let mut parts = rest.splitn(3, '-');
    let index: u8 = parts.next()?.parse().ok()?;
    let tag = parts.next()?;
    let role = parts.next()?;
    (index > 0
        && tag.len() == 5
        && tag
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
        && !role.is_empty())
    .then_some(tag)
}

/// The index of the test at `position` in [`TEST_IDS`]: 1, 2, … skipping
/// 98 and 99, which are the bench and demo labs' (`10.98.0.0/16`,
/// `10.99.0.0/16`).
fn test_index(position: usize) -> u8 {
    let index = position + 1;
    let index = if index >= 98 { index + 2 } else { index };
    u8::try_from(index)
        .ok()
        .filter(|i| *i < 255)
        .expect("at most 252 end-to-end tests")
}

#[cfg(test)]
mod index_tests {
    use super::test_index;

    #[test]
    fn indexes_skip_the_bench_and_demo_labs() {
        assert_eq!(test_index(0), 1);
        assert_eq!(test_index(96), 97);
        assert_eq!(test_index(97), 100);
        assert_eq!(test_index(98), 101);
    }
}
