//! Containers inside a lab, as on a Docker host: podman's Docker-compatible
//! API service and bridge networks, all living in the lab's node
//! namespace. It owns only the service, networks and containers it creates
//! (named with the lab's prefix `tg<I>-<tag>-`), the namespace handles it
//! attaches to its containers, and the local test image; it must never
//! touch containers, networks or images of anyone else, nor the root
//! namespace's firewall.
//!
//! ```text
//!   [node ns]  podman system service (unix socket in the lab directory)
//!      ├─ bridge of network `tg<I>-<tag>-net`  10.I.250.1/24, fd00:I:250::1/64
//!      │    ├─ container tg<I>-<tag>-client1   10.I.250.x, fd00:I:250::x
//!      │    └─ container tg<I>-<tag>-server    ...
//!      └─ more networks on request ([`Podman::create_network`]), 10.I.<link>.0/24
//! ```
//!
//! The network backend is netavark (Debian 12's 1.4, with its own
//! iptables rules: `NETAVARK_FORWARD` in filter, `NETAVARK-*` in nat), as
//! podman 5 and Docker-like hosts have it; [`Backend::Cni`] keeps podman
//! 4.3's older default (CNI's `CNI-FORWARD`) for a test that compares
//! both. Every podman command passes `--network-backend`, so the machine's
//! default (fixed in podman's storage at its first use) does not matter.
//! Networks are created with `--disable-dns`: the tests serve DNS
//! themselves (aardvark-dns would hold port 53 on the bridge).
//!
//! Every podman command runs as `nsenter --net=/run/netns/<node> podman
//! --runtime runc --cgroup-manager cgroupfs ...` (not `ip netns exec`,
//! which remounts /sys and hides the cgroup mounts runc needs), and `run`
//! passes explicit ulimits: see `../shared/notes/containers.md`. Podman's
//! storage and network configuration are shared by every test on the
//! machine, hence the prefixed names. The API service therefore lists every
//! container on the machine, concurrent tests' included: a test selects
//! its own by a label value of its own (e.g. the Compose project
//! `podman.name("shop")` as the namespace). [`Podman`]'s drop removes its
//! containers and networks (also while a failing test unwinds), and
//! [`Podman::start`] first removes those left by test processes that are
//! gone (same liveness locks as the labs).
//!
//! No registry is reachable: the image is built locally, once per machine,
//! from Debian's archive with mmdebstrap (curl, nginx-light, dnsmasq-base,
//! netcat-openbsd, iproute2), cached as a tarball under
//! `/var/cache/tollgate-image/` and imported with `EXPOSE 80/tcp` under a
//! tag that hashes its recipe; a file lock makes parallel tests build it
//! once.
//!
//! Bridged container-to-container traffic reaches iptables only with
//! `br_netfilter` loaded and `net.bridge.bridge-nf-call-iptables=1`, which
//! is per network namespace on this kernel: [`Podman::start`] loads the
//! module when its sysctls are missing (failing with a clear message when
//! it cannot) and sets both sysctls in the node namespace.
//!
//! ```ignore
//! let Some(lab) = Lab::builder("my_test").require(PODMAN_TOOLS).build() else { return };
//! let podman = Podman::start(&lab);
//! podman.run(&Container::new("server").label("app", "web").command(&["nginx", "-g", "daemon off;"]));
//! let server = podman.addr("server");
//! assert_eq!(podman.curl("client", &format!("http://{server}/"), ALLOW_WAIT), Ok(200));
//! ```

use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use super::lab::{lab_tag, Lab, LOCK_DIR};
use super::netns::{run_with_timeout, CmdOutput, Netns};
use super::poll_until;

/// The tools a podman lab needs besides [`super::BASE_TOOLS`].
pub const PODMAN_TOOLS: &[&str] = &[
    "podman",
    "runc",
    "nsenter",
    "mmdebstrap",
    "curl",
    "/usr/lib/podman/netavark",
];

/// Podman's network backend for a lab.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// netavark 1.4 with its iptables driver (the default here).
    Netavark,
    /// The CNI plugins, podman 4.3's default on Debian 12.
    Cni,
}

impl Backend {
    fn flag(self) -> &'static str {
        match self {
            Backend::Netavark => "--network-backend=netavark",
            Backend::Cni => "--network-backend=cni",
        }
    }

    /// The prefix of the backend's own filter chains.
    pub fn chain_prefix(self) -> &'static str {
        match self {
            Backend::Netavark => "NETAVARK",
            Backend::Cni => "CNI-",
        }
    }

    /// The backend's jump from FORWARD into its chain.
    pub fn forward_jump(self) -> &'static str {
        match self {
            Backend::Netavark => "-j NETAVARK_FORWARD",
            Backend::Cni => "-j CNI-FORWARD",
        }
    }
}

/// The third octet (and IPv6 group) of the container network's subnet,
/// inside the test's own `10.<index>.0.0/16` range; peer links use 1, 2, …
pub const NETWORK_LINK: u8 = 250;

/// Packages of the test image, from Debian's archive.
const IMAGE_PACKAGES: &str = "curl,nginx-light,dnsmasq-base,netcat-openbsd,iproute2";
/// The image's configuration: what runs by default, and nginx's port
/// exposed (a container without the ports label has the named port
/// `tcp-80`).
const IMAGE_CHANGES: &[&str] = &["CMD [\"sleep\",\"infinity\"]", "EXPOSE 80/tcp"];
const IMAGE_SUITE: &str = "bookworm";
pub(super) const IMAGE_CACHE: &str = "/var/cache/tollgate-image";
/// Deadline of a podman command (the first `run` on a loaded machine can
/// take a while; anything slower is a failure worth seeing).
const PODMAN_WAIT: Duration = Duration::from_secs(60);

/// A container to run: its short name (the harness adds the lab prefix),
/// labels, extra `podman run` options and command.
#[derive(Clone, Debug)]
pub struct Container {
    name: String,
    labels: Vec<(String, String)>,
    options: Vec<String>,
    command: Vec<String>,
}

impl Container {
    /// A container named `<prefix><name>` that sleeps until stopped.
    pub fn new(name: &str) -> Self {
        Container {
            name: name.to_string(),
            labels: Vec::new(),
            options: Vec::new(),
            command: vec!["sleep".into(), "infinity".into()],
        }
    }

    /// Adds the label `key=value`.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.push((key.into(), value.into()));
        self
    }

    /// Makes `server` the container's only DNS server (its resolv.conf).
    pub fn dns(self, server: IpAddr) -> Self {
        self.option(&format!("--dns={server}"))
    }

    /// Adds a raw `podman run` option, e.g. `--cap-add=NET_ADMIN`.
    pub fn option(mut self, option: &str) -> Self {
        self.options.push(option.into());
        self
    }

    /// The container's command (default `sleep infinity`).
    pub fn command(mut self, argv: &[&str]) -> Self {
        self.command = argv.iter().map(|s| s.to_string()).collect();
        self
    }

    /// The short name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The labels, in order.
    pub fn labels(&self) -> &[(String, String)] {
        &self.labels
    }

    /// The extra `run` options.
    pub fn options(&self) -> &[String] {
        &self.options
    }

    /// The command.
    pub fn argv(&self) -> &[String] {
        &self.command
    }
}

/// Podman's API service and one dual-stack bridge network in a lab's node
/// namespace. Dropping it removes its containers and network and stops the
/// service; drop it before the [`Lab`] (declare it after the lab).
pub struct Podman {
    node: String,
    prefix: String,
    index: u8,
    backend: Backend,
    socket: PathBuf,
    log: PathBuf,
    service: Mutex<Option<Child>>,
    image: String,
    containers: Mutex<Vec<String>>,
    networks: Mutex<Vec<String>>,
}

/// A container's network namespace under `/run/netns` (`ip netns
/// attach`), for probes that run in-process ([`super::probe::Prober`]);
/// dropping it removes the name, not the namespace.
pub struct ContainerNetns {
    netns: Netns,
}

impl std::ops::Deref for ContainerNetns {
    type Target = Netns;
    fn deref(&self) -> &Netns {
        &self.netns
    }
}

impl ContainerNetns {
    /// Names the network namespace of process `pid` `name` under
    /// `/run/netns` (`ip netns attach`).
    pub(super) fn attach(name: String, pid: &str) -> ContainerNetns {
        let mut c = Command::new("ip");
        c.args(["netns", "attach", &name, pid]);
        run_with_timeout(c, Duration::from_secs(10))
            .expect_success(&format!("ip netns attach {name} {pid}"));
        ContainerNetns {
            netns: Netns::new(name),
        }
    }
}

impl Drop for ContainerNetns {
    fn drop(&mut self) {
        let mut c = Command::new("ip");
        c.args(["netns", "delete", self.netns.name()]);
        let _ = run_with_timeout(c, Duration::from_secs(10));
    }
}

impl Podman {
    /// [`Podman::start_with`] netavark.
    pub fn start(lab: &Lab) -> Podman {
        Podman::start_with(lab, Backend::Netavark)
    }

    /// Builds the test image if this machine lacks it, starts the API
    /// service on `<lab dir>/podman.sock`, creates the network
    /// `<prefix>net` (`10.I.250.0/24`, `fd00:I:250::/64`) with `backend`
    /// and turns on bridge netfilter in the node namespace. Panics when any
    /// step fails.
    pub fn start_with(lab: &Lab, backend: Backend) -> Podman {
        let node = lab.node().name().to_string();
        let prefix = node
            .strip_suffix(super::lab::NODE)
            .expect("node namespace ends with the role")
            .to_string();
        let podman = Podman {
            node,
            prefix,
            index: lab.index(),
            backend,
            socket: lab.dir().join("podman.sock"),
            log: lab.dir().join("podman-service.log"),
            service: Mutex::new(None),
            image: image().to_string(),
            containers: Mutex::new(Vec::new()),
            networks: Mutex::new(Vec::new()),
        };
        reap_stale(&podman);
        bridge_netfilter();
        for key in ["bridge-nf-call-iptables", "bridge-nf-call-ip6tables"] {
            lab.node()
                .run(&["sysctl", "-qw", &format!("net.bridge.{key}=1")]);
        }
        podman.create_network("net", NETWORK_LINK);
        podman.start_service();
        podman.wait_service();
        podman
    }

    /// Creates the network `<prefix><short>` on `10.I.<link>.0/24` and
    /// `fd00:I:<link>::/64` (its gateway, the node, is `.1`); returns its
    /// full name. `link` must be free in the lab (peer links use 1, 2, …).
    pub fn create_network(&self, short: &str, link: u8) -> String {
        let network = self.name(short);
        self.networks
            .lock()
            .expect("network list")
            .push(network.clone());
        let subnet = format!("10.{}.{link}.0/24", self.index);
        let subnet6 = format!("fd00:{}:{link}::/64", self.index);
        let created = self.podman(&[
            "network",
            "create",
            "--disable-dns",
            "--subnet",
            &subnet,
            "--subnet",
            &subnet6,
            &network,
        ]);
        // Subnets are checked against every network on the machine: the
        // same test running in another checkout at the same time holds it.
        assert!(
            created.success() || !created.stderr.contains("already used"),
            "podman network create: {} (is this test running elsewhere at the same time?)",
            created.stderr.trim()
        );
        created.expect_success("podman network create");
        network
    }

    /// Connects the running container `short` to `network` (a full name,
    /// from [`Podman::create_network`]).
    pub fn connect(&self, short: &str, network: &str) {
        self.podman(&["network", "connect", network, &self.name(short)])
            .expect_success(&format!("podman network connect {network} {short}"));
    }

    /// Renames container `short` to `new` (short names); returns the new
    /// full name.
    pub fn rename(&self, short: &str, new: &str) -> String {
        let name = self.name(new);
        self.containers
            .lock()
            .expect("container list")
            .push(name.clone());
        self.podman(&["rename", &self.name(short), &name])
            .expect_success(&format!("podman rename {short} {new}"));
        name
    }

    /// `podman restart` of container `short` (stop without grace, start).
    pub fn restart(&self, short: &str) {
        self.podman(&["restart", "-t", "0", &self.name(short)])
            .expect_success(&format!("podman restart {short}"));
    }

    /// The network namespace of the running container `short`, named
    /// `<its full name>.ns` under `/run/netns` while the handle lives.
    pub fn netns(&self, short: &str) -> ContainerNetns {
        let pid = self
            .podman(&["inspect", "--format", "{{.State.Pid}}", &self.name(short)])
            .expect_success(&format!("podman inspect {short}"))
            .stdout
            .trim()
            .to_string();
        ContainerNetns::attach(format!("{}.ns", self.name(short)), &pid)
    }

    /// The service's socket, e.g. for `--docker-host`.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// `unix://<socket>`, the value of `--docker-host`.
    pub fn docker_host(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// The full name of the container or network called `short`.
    pub fn name(&self, short: &str) -> String {
        format!("{}{short}", self.prefix)
    }

    /// The test network's name.
    pub fn network(&self) -> String {
        self.name("net")
    }

    /// The node's (the bridge's) IPv4 address on the network.
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, self.index, NETWORK_LINK, 1)
    }

    /// The node's (the bridge's) IPv6 address on the network.
    pub fn gateway6(&self) -> Ipv6Addr {
        format!("fd00:{}:{NETWORK_LINK}::1", self.index)
            .parse()
            .expect("gateway address")
    }

    /// Runs `spec` detached on the test network; returns its full name once
    /// it is running.
    pub fn run(&self, spec: &Container) -> String {
        let name = self.name(&spec.name);
        self.containers
            .lock()
            .expect("container list")
            .push(name.clone());
        let network = format!("--network={}", self.network());
        let name_opt = format!("--name={name}");
        let mut argv: Vec<String> = vec![
            "run".into(),
            "-d".into(),
            name_opt,
            network,
            "--ulimit=nofile=4096:4096".into(),
            "--ulimit=nproc=4096:4096".into(),
        ];
        argv.extend(spec.labels.iter().map(|(k, v)| format!("--label={k}={v}")));
        argv.extend(spec.options.iter().cloned());
        argv.push(self.image.clone());
        argv.extend(spec.command.iter().cloned());
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        self.podman(&argv)
            .expect_success(&format!("podman run {name}"));
        name
    }

    /// The IPv4 address of container `short` on the test network.
    pub fn addr(&self, short: &str) -> Ipv4Addr {
        self.addr_on(short, &self.network())
    }

    /// The IPv4 address of container `short` on `network` (a full name).
    pub fn addr_on(&self, short: &str, network: &str) -> Ipv4Addr {
        let out = self.inspect(short, network, "{{.IPAddress}}");
        out.parse().unwrap_or_else(|_| {
            panic!("container {short} has no IPv4 address on {network}: {out:?}")
        })
    }

    /// The IPv6 address of container `short` on the test network.
    pub fn addr6(&self, short: &str) -> Ipv6Addr {
        let out = self.inspect(short, &self.network(), "{{.GlobalIPv6Address}}");
        out.parse()
            .unwrap_or_else(|_| panic!("container {short} has no IPv6 address: {out:?}"))
    }

    fn inspect(&self, short: &str, network: &str, field: &str) -> String {
        let format =
            format!("{{{{with index .NetworkSettings.Networks \"{network}\"}}}}{field}{{{{end}}}}");
        self.podman(&["inspect", "--format", &format, &self.name(short)])
            .expect_success(&format!("podman inspect {short}"))
            .stdout
            .trim()
            .to_string()
    }

    /// Runs `argv` inside container `short`, killed after `timeout`.
    pub fn exec(&self, short: &str, argv: &[&str], timeout: Duration) -> CmdOutput {
        let name = self.name(short);
        let mut args = vec!["exec", name.as_str()];
        args.extend_from_slice(argv);
        run_with_timeout(self.command(&args), timeout)
    }

    /// `curl`s `url` from container `short`: the HTTP status, or curl's
    /// exit code (28: timed out, 7: refused, 6: name not resolved).
    pub fn curl(&self, short: &str, url: &str, timeout: Duration) -> Result<u16, i32> {
        let max = format!("{:.1}", timeout.as_secs_f64());
        let out = self.exec(
            short,
            &[
                "curl",
                "-s",
                "-g",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                &max,
                url,
            ],
            timeout + Duration::from_secs(10),
        );
        super::engine::curl_outcome(&out)
    }

    /// Stops container `short` (its addresses are released).
    pub fn stop(&self, short: &str) {
        self.podman(&["stop", "-t", "0", &self.name(short)])
            .expect_success(&format!("podman stop {short}"));
    }

    /// Starts the stopped container `short` again (it may get a new
    /// address: host-local IPAM hands addresses out round-robin).
    pub fn start_container(&self, short: &str) {
        self.podman(&["start", &self.name(short)])
            .expect_success(&format!("podman start {short}"));
    }

    /// Removes container `short` (stopping it first).
    pub fn remove(&self, short: &str) {
        self.podman(&["rm", "-f", "-t", "0", &self.name(short)])
            .expect_success(&format!("podman rm {short}"));
    }

    /// Stops the API service and removes its socket (the agent's Docker
    /// API goes away; the containers keep running).
    pub fn stop_service(&self) {
        if let Some(mut child) = self.service.lock().expect("service").take() {
            // SAFETY: kill on the pid of our own child process.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(&self.socket);
    }

    /// Starts the API service again after [`Podman::stop_service`] and
    /// waits until it answers.
    pub fn restart_service(&self) {
        self.stop_service();
        self.start_service();
        self.wait_service();
    }

    fn start_service(&self) {
        let _ = std::fs::remove_file(&self.socket);
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("create service log");
        let err = log.try_clone().expect("clone log handle");
        let url = format!("unix://{}", self.socket.display());
        let child = self
            .command(&["system", "service", "--time=0", &url])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .expect("spawn podman system service");
        *self.service.lock().expect("service") = Some(child);
    }

    fn wait_service(&self) {
        let ping = || {
            let mut c = Command::new("curl");
            c.args(["-sf", "--max-time", "2", "--unix-socket"])
                .arg(&self.socket)
                .arg("http://d/_ping");
            run_with_timeout(c, Duration::from_secs(5)).success()
        };
        if poll_until(PODMAN_WAIT, || ping().then_some(())).is_none() {
            panic!(
                "podman API service did not answer on {}: {}",
                self.socket.display(),
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
    }

    /// Runs `podman <args>` in the node namespace with this machine's
    /// runtime flags, killed after 60 s.
    pub fn podman(&self, args: &[&str]) -> CmdOutput {
        run_with_timeout(self.command(args), PODMAN_WAIT)
    }

    fn command(&self, args: &[&str]) -> Command {
        podman_command(&self.node, self.backend, args)
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let mut names = self
            .containers
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default();
        names.extend(list(
            &self.node,
            self.backend,
            &["ps", "-a", "--format", "{{.Names}}"],
        ));
        names.retain(|n| n.starts_with(&self.prefix));
        names.sort();
        names.dedup();
        if !names.is_empty() {
            let mut args = vec!["rm", "-f", "-t", "0", "--ignore"];
            args.extend(names.iter().map(String::as_str));
            let _ = self.podman(&args);
        }
        let networks = self.networks.lock().map(|n| n.clone()).unwrap_or_default();
        for network in networks.iter().rev() {
            let _ = self.podman(&["network", "rm", "-f", network]);
        }
        self.stop_service();
    }
}

fn podman_command(node: &str, backend: Backend, args: &[&str]) -> Command {
    let mut c = Command::new("nsenter");
    c.arg(format!("--net=/run/netns/{node}"))
        .args([
            "podman",
            "--runtime",
            "runc",
            "--cgroup-manager",
            "cgroupfs",
            backend.flag(),
        ])
        .args(args);
    c
}

fn list(node: &str, backend: Backend, args: &[&str]) -> Vec<String> {
    run_with_timeout(podman_command(node, backend, args), PODMAN_WAIT)
        .stdout
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// Removes containers and networks named like a lab's (`tg<I>-<tag>-…`)
/// whose test process is gone: no liveness lock, or one that can be taken.
fn reap_stale(podman: &Podman) {
    let gone = |name: &str| {
        let Some(tag) = lab_tag(name) else {
            return false;
        };
        match File::open(Path::new(LOCK_DIR).join(format!("{tag}.lock"))) {
            Ok(file) => file.try_lock().is_ok(),
            Err(_) => true,
        }
    };
    let containers: Vec<String> = list(
        &podman.node,
        podman.backend,
        &["ps", "-a", "--format", "{{.Names}}"],
    )
    .into_iter()
    .filter(|n| gone(n))
    .collect();
    if !containers.is_empty() {
        let mut args = vec!["rm", "-f", "-t", "0", "--ignore"];
        args.extend(containers.iter().map(String::as_str));
        let _ = podman.podman(&args);
    }
    // Each backend keeps its own network list.
    for backend in [Backend::Netavark, Backend::Cni] {
        for network in list(
            &podman.node,
            backend,
            &["network", "ls", "--format", "{{.Name}}"],
        ) {
            if gone(&network) {
                let _ = run_with_timeout(
                    podman_command(&podman.node, backend, &["network", "rm", "-f", &network]),
                    PODMAN_WAIT,
                );
            }
        }
    }
}

/// Loads `br_netfilter` when its sysctls are missing; panics with what to
/// do when that fails (the bridged tests would otherwise see nothing).
pub(super) fn bridge_netfilter() {
    let sysctl = Path::new("/proc/sys/net/bridge/bridge-nf-call-iptables");
    if sysctl.exists() {
        return;
    }
    let said = match Command::new("modprobe").arg("br_netfilter").output() {
        Ok(out) => String::from_utf8_lossy(&out.stderr).trim().to_string(),
        Err(e) => format!("modprobe: {e}"),
    };
    assert!(
        sysctl.exists(),
        "br_netfilter is not loaded and `modprobe br_netfilter` failed ({said}): \
         bridged container traffic would bypass iptables; load it on the host \
         (scripts/install-deps.sh does)"
    );
}

/// The test image's tarball, built on first use (once per machine, under
/// a file lock), and the tag that names it with its configuration
/// (`IMAGE_CHANGES`): both engines import it under that tag.
pub(super) fn image_tarball() -> &'static (PathBuf, String) {
    static TARBALL: OnceLock<(PathBuf, String)> = OnceLock::new();
    TARBALL.get_or_init(|| {
        use sha1::Digest;
        let hash = |text: &str| -> String {
            sha1::Sha1::digest(text.as_bytes())[..8]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        };
        // The tarball hashes what mmdebstrap makes; the tag adds the
        // image's configuration.
        let recipe = format!("{IMAGE_SUITE} minbase {IMAGE_PACKAGES} no-docs");
        let key = hash(&recipe);
        let tag = format!(
            "localhost/tollgate-e2e-containers:{}",
            hash(&format!("{recipe} {}", IMAGE_CHANGES.join(" ")))
        );
        let _lock = image_lock();
        let tar = Path::new(IMAGE_CACHE).join(format!("e2e-containers-{key}.tar"));
        if !tar.exists() {
            let part = tar.with_extension("part");
            let mut c = Command::new("mmdebstrap");
            c.args([
                "--variant=minbase",
                &format!("--include={IMAGE_PACKAGES}"),
                "--dpkgopt=path-exclude=/usr/share/man/*",
                "--dpkgopt=path-exclude=/usr/share/doc/*",
                "--dpkgopt=path-exclude=/usr/share/locale/*",
                "--aptopt=APT::Install-Recommends \"false\"",
                "--format=tar",
                IMAGE_SUITE,
            ])
            .arg(&part);
            run_with_timeout(c, Duration::from_secs(900))
                .expect_success("mmdebstrap the container test image");
            std::fs::rename(&part, &tar).expect("keep the image tarball");
        }
        (tar, tag)
    })
}

/// The machine-wide lock of the image cache, held while it is returned.
fn image_lock() -> File {
    std::fs::create_dir_all(IMAGE_CACHE).expect("create the image cache");
    let lock = File::create(Path::new(IMAGE_CACHE).join("e2e-containers.lock"))
        .expect("create the image lock");
    lock.lock().expect("lock the image cache");
    lock
}

/// The image's configuration, as `--change` options of `import`.
pub(super) fn image_changes() -> Vec<String> {
    IMAGE_CHANGES
        .iter()
        .flat_map(|change| ["--change".to_string(), change.to_string()])
        .collect()
}

/// The test image's tag in podman's storage, imported on first use (once
/// per machine: a file lock, a tag hashing the recipe).
fn image() -> &'static str {
    static IMAGE: OnceLock<String> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let (tar, tag) = image_tarball();
        let _lock = image_lock();
        let exists = |tag: &str| {
            let mut c = Command::new("podman");
            c.args(["image", "exists", tag]);
            run_with_timeout(c, PODMAN_WAIT).success()
        };
        if !exists(tag) {
            let mut c = Command::new("podman");
            c.args(["--runtime", "runc", "--cgroup-manager", "cgroupfs"])
                .args(["import", "--quiet"])
                .args(image_changes());
            c.arg(tar).arg(tag);
            run_with_timeout(c, Duration::from_secs(300)).expect_success("podman import");
        }
        tag.clone()
    })
}
