//! A real Docker Engine (Debian's `docker.io`: dockerd 20.10, its own
//! containerd, runc) inside a lab's node namespace, as on a Docker host.
//! It owns only the daemon it starts (by pid), that daemon's data root,
//! exec root, socket, key file and cgroups (all named after the lab), the
//! containers and networks it creates, and `/run/docker/plugins` when
//! it created it; it must never touch Docker's default socket, a daemon
//! of anyone else, nor the root namespace's firewall.
//!
//! ```text
//!   [node ns, its own mount ns]  dockerd -H unix://<lab>/docker/docker.sock
//!      ├─ docker0 (the default bridge)       10.I.249.1/24, fd00:I:249::1/64
//!      ├─ network `tg<I>-<tag>-net`          10.I.250.1/24, fd00:I:250::1/64
//!      │    └─ containers tg<I>-<tag>-…      (as with podman, [`super::podman`])
//!      └─ networks without a subnet (Compose's) from 10.I.240.0/21
//! ```
//!
//! The daemon runs in the node namespace and a mount namespace of its own
//! (its overlay mounts stay there), made once per daemon by `unshare -m
//! --propagation slave nsenter --net=/run/netns/<node> sh -c '…; exec
//! sleep infinity'`, which mounts a fresh sysfs for the node namespace
//! with the host's cgroup mounts moved under it (`ip netns exec` alone
//! remounts sysfs without them, and dockerd exits with `Devices cgroup
//! isn't mounted`); every start of the daemon is `nsenter --mount=…
//! --net=… dockerd …` into it, so a daemon restarted under live-restore
//! finds its containers' mounts. `nsenter` execs, so the child's pid is
//! dockerd's. Every path is the lab's: `--data-root`,
//! `--exec-root`, `--pidfile`, `-H unix://…`, the trust key
//! (`deprecated-key-path` in its configuration file: dockerd writes
//! `/etc/docker/key.json` otherwise), a relative `--cgroup-parent`
//! (`tollgate-tg<I>-<tag>`), `--bip` and `--default-address-pool` in the
//! lab's range. `--ipv6 --fixed-cidr-v6` always; `--experimental
//! --ip6tables`, `--live-restore` and `--userland-proxy` as
//! [`DockerdOptions`] say. The `docker` command is always
//! `/usr/bin/docker` (Debian's client: a newer one may sit earlier on
//! `PATH`), with `DOCKER_HOST` set to the lab's socket and `DOCKER_CONFIG`
//! to the lab's directory.
//!
//! No registry: the image is the podman harness's tarball (mmdebstrap,
//! cached per machine), `docker import`ed into each daemon (about 2 s).
//! Containers run with `--init`, so they stop at once on SIGTERM.
//!
//! Dropping it removes its containers and networks, stops the daemon by
//! its pid (SIGTERM, then SIGKILL after 20 s), kills what is left of its
//! processes by pid (with live-restore, containers and their shims
//! outlive the daemon), removes its cgroups, and `/run/docker/plugins` if
//! the last daemon of this process created it. A daemon of a test process
//! that is gone (killed mid-run) is reaped at the next start: the
//! processes whose command line names a gone tag's lab directory, and its
//! cgroups.
//!
//! `scripts/install-deps.sh` installs the package without starting any
//! daemon in the host's namespace (a `policy-rc.d` guard).

use std::fs::File;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::engine::{curl_outcome, Engine};
use super::lab::{lab_tag, Lab, LOCK_DIR};
use super::netns::{run_with_timeout, CmdOutput};
use super::podman::{
    bridge_netfilter, image_changes, image_tarball, Container, ContainerNetns, NETWORK_LINK,
};
use super::poll_until;

/// Debian's Docker client, by its full path.
pub const DOCKER_CLI: &str = "/usr/bin/docker";

/// The tools a Docker lab needs besides [`super::BASE_TOOLS`].
pub const DOCKER_TOOLS: &[&str] = &[
    DOCKER_CLI,
    "/usr/sbin/dockerd",
    "containerd",
    "runc",
    "unshare",
    "nsenter",
    "mmdebstrap",
    "curl",
];

/// The third octet (and IPv6 group) of the default bridge's subnet.
pub const BRIDGE_LINK: u8 = 249;
/// Deadline of a `docker` command, and of the daemon starting.
const DOCKER_WAIT: Duration = Duration::from_secs(60);
/// How long a stopping daemon gets before SIGKILL.
const STOP_WAIT: Duration = Duration::from_secs(20);

/// How the daemon runs.
#[derive(Clone, Copy, Debug)]
pub struct DockerdOptions {
    /// `--experimental --ip6tables`: Docker writes IPv6 filter rules too
    /// (without `DOCKER-USER` in 20.10). Off, as Docker's default, IPv6
    /// is forwarded unfiltered and published ports reach containers over
    /// IPv6 through `docker-proxy`.
    pub ip6tables: bool,
    /// `--live-restore`: containers keep running while the daemon is down.
    pub live_restore: bool,
    /// `--userland-proxy` (Docker's default, true).
    pub userland_proxy: bool,
}

impl Default for DockerdOptions {
    fn default() -> Self {
        DockerdOptions {
            ip6tables: true,
            live_restore: false,
            userland_proxy: true,
        }
    }
}

/// A Docker daemon and its test network in a lab's node namespace.
/// Dropping it cleans up (see the module doc); drop it before the [`Lab`]
/// (declare it after the lab).
pub struct Docker {
    node: String,
    prefix: String,
    index: u8,
    /// `<lab>/d`: data root, exec root, pidfile, key, log.
    dir: PathBuf,
    socket: PathBuf,
    options: DockerdOptions,
    /// The process holding the daemon's mount namespace.
    holder: Mutex<Option<Child>>,
    daemon: Mutex<Option<Child>>,
    image: String,
    containers: Mutex<Vec<String>>,
    networks: Mutex<Vec<String>>,
    _plugins: PluginsDir,
}

impl Docker {
    /// Reaps daemons of gone test processes, starts dockerd in `lab`'s node
    /// namespace, imports the test image, creates the network `<prefix>net`
    /// (`10.I.250.0/24`, `fd00:I:250::/64`) and turns on bridge netfilter
    /// in the node namespace. Panics when any step fails.
    pub fn start(lab: &Lab, options: DockerdOptions) -> Docker {
        reap_stale();
        let node = lab.node().name().to_string();
        let prefix = node
            .strip_suffix(super::lab::NODE)
            .expect("node namespace ends with the role")
            .to_string();
        let dir = lab.dir().join("d");
        std::fs::create_dir_all(dir.join("cg")).expect("create the daemon's directory");
        std::fs::write(
            dir.join("daemon.json"),
            format!(
                "{{\"deprecated-key-path\": \"{}\"}}\n",
                dir.join("key.json").display()
            ),
        )
        .expect("write the daemon's configuration");
        bridge_netfilter();
        for key in ["bridge-nf-call-iptables", "bridge-nf-call-ip6tables"] {
            lab.node()
                .run(&["sysctl", "-qw", &format!("net.bridge.{key}=1")]);
        }
        let docker = Docker {
            node,
            prefix,
            index: lab.index(),
            socket: lab.dir().join("docker.sock"),
            dir,
            options,
            holder: Mutex::new(None),
            daemon: Mutex::new(None),
            image: image_tarball().1.clone(),
            containers: Mutex::new(Vec::new()),
            networks: Mutex::new(Vec::new()),
            _plugins: PluginsDir::claim(),
        };
        docker.start_daemon();
        docker.import_image();
        docker.create_network("net", NETWORK_LINK);
        docker
    }

    /// The cgroup parent of this daemon's containers (relative: under
    /// each controller's root).
    fn cgroup_parent(&self) -> String {
        format!("tollgate-{}", self.prefix.trim_end_matches('-'))
    }

    /// dockerd's arguments.
    fn daemon_args(&self) -> Vec<String> {
        let d = |name: &str| self.dir.join(name).display().to_string();
        let i = self.index;
        let mut args = vec![
            format!("--config-file={}", d("daemon.json")),
            format!("--data-root={}", d("data")),
            format!("--exec-root={}", d("x")),
            format!("--pidfile={}", d("docker.pid")),
            format!("--host=unix://{}", self.socket.display()),
            format!("--bip=10.{i}.{BRIDGE_LINK}.1/24"),
            format!("--default-address-pool=base=10.{i}.240.0/21,size=24"),
            format!("--cgroup-parent={}", self.cgroup_parent()),
            "--shutdown-timeout=1".into(),
            "--ipv6".into(),
            format!("--fixed-cidr-v6=fd00:{i}:{BRIDGE_LINK}::/64"),
            format!("--userland-proxy={}", self.options.userland_proxy),
        ];
        if self.options.ip6tables {
            args.extend(["--experimental".into(), "--ip6tables".into()]);
        }
        if self.options.live_restore {
            args.push("--live-restore".into());
        }
        args
    }

    /// The mount namespace every start of this daemon runs in (one, so
    /// that a daemon restarted under live-restore finds the overlay mounts
    /// of its running containers): held by a `sleep` that mounted a fresh
    /// sysfs for the node namespace with the host's cgroup mounts moved
    /// under it; started once, killed by pid on drop.
    fn mount_namespace(&self) -> u32 {
        let mut holder = self.holder.lock().expect("holder");
        if let Some(child) = holder.as_ref() {
            return child.id();
        }
        let cg = self.dir.join("cg").display().to_string();
        let ready = self.dir.join("mounted");
        let script = format!(
            "mount --rbind /sys/fs/cgroup {cg} && mount -t sysfs sysfs /sys && \
             mount --move {cg} /sys/fs/cgroup && touch {} && exec sleep infinity",
            ready.display()
        );
        let child = Command::new("unshare")
            .args(["-m", "--propagation", "slave", "nsenter"])
            .arg(format!("--net=/run/netns/{}", self.node))
            .args(["sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the mount namespace's holder");
        let pid = child.id();
        *holder = Some(child);
        let mounted = poll_until(DOCKER_WAIT, || ready.exists().then_some(()));
        assert!(
            mounted.is_some(),
            "the daemon's mount namespace was not set up"
        );
        pid
    }

    /// Starts dockerd (see the module doc) in its mount namespace and the
    /// node namespace, and waits until its API answers.
    fn start_daemon(&self) {
        let _ = std::fs::remove_file(&self.socket);
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.dir.join("dockerd.log"))
            .expect("create the daemon's log");
        let holder = self.mount_namespace();
        let child = Command::new("nsenter")
            .arg(format!("--mount=/proc/{holder}/ns/mnt"))
            .arg(format!("--net=/run/netns/{}", self.node))
            .arg("dockerd")
            .args(self.daemon_args())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the log handle"))
            .stderr(log)
            .spawn()
            .expect("spawn dockerd");
        *self.daemon.lock().expect("daemon") = Some(child);
        let ping = || {
            let mut c = Command::new("curl");
            c.args(["-sf", "--max-time", "2", "--unix-socket"])
                .arg(&self.socket)
                .arg("http://d/_ping");
            run_with_timeout(c, Duration::from_secs(5)).success()
        };
        if poll_until(DOCKER_WAIT, || ping().then_some(())).is_none() {
            panic!(
                "dockerd did not answer on {}:\n{}",
                self.socket.display(),
                self.daemon_log()
            );
        }
    }

    /// Stops the daemon by its pid: SIGTERM, then SIGKILL after
    /// [`STOP_WAIT`]; waits for it.
    fn stop_daemon(&self) {
        let Some(mut child) = self.daemon.lock().expect("daemon").take() else {
            return;
        };
        let pid = child.id() as i32;
        // SAFETY: kill on the pid of our own child process.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + STOP_WAIT;
        while child.try_wait().ok().flatten().is_none() {
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_file(&self.socket);
    }

    /// The daemon's pid while it runs.
    pub fn daemon_pid(&self) -> Option<u32> {
        self.daemon.lock().expect("daemon").as_ref().map(Child::id)
    }

    /// Restarts the daemon (stop, then start) and waits until it answers.
    pub fn restart_daemon(&self) {
        self.stop_daemon();
        self.start_daemon();
    }

    /// What the daemon logged.
    pub fn daemon_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("dockerd.log")).unwrap_or_default()
    }

    fn import_image(&self) {
        let (tar, tag) = image_tarball();
        let mut args: Vec<String> = vec!["import".into()];
        args.extend(image_changes());
        args.push(tar.display().to_string());
        args.push(tag.clone());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.docker(&args).expect_success("docker import");
    }

    /// Runs `docker <args>` against this daemon, killed after 60 s.
    pub fn docker(&self, args: &[&str]) -> CmdOutput {
        run_with_timeout(self.command(args), DOCKER_WAIT)
    }

    /// `DOCKER_HOST` and `DOCKER_CONFIG` for a client of this daemon
    /// (`docker`, `docker-compose`).
    pub fn client_env(&self) -> [(&'static str, String); 2] {
        [
            ("DOCKER_HOST", self.docker_host()),
            ("DOCKER_CONFIG", self.dir.join("cli").display().to_string()),
        ]
    }

    /// `program` with this daemon's client environment.
    pub fn client(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.envs(self.client_env());
        c
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = self.client(DOCKER_CLI);
        c.args(args);
        c
    }

    /// The test image's tag.
    pub fn image(&self) -> &str {
        &self.image
    }

    /// Remembers container `name` for the cleanup (e.g. one a client such
    /// as `docker-compose` created).
    pub fn track(&self, name: &str) {
        self.containers
            .lock()
            .expect("container list")
            .push(name.to_string());
    }

    fn inspect(&self, short: &str, network: &str, field: &str) -> String {
        let format =
            format!("{{{{with index .NetworkSettings.Networks \"{network}\"}}}}{field}{{{{end}}}}");
        self.docker(&["inspect", "--format", &format, &self.name(short)])
            .expect_success(&format!("docker inspect {short}"))
            .stdout
            .trim()
            .to_string()
    }

    /// Every container of this daemon (only this lab's: it has its own
    /// daemon).
    fn all_containers(&self) -> Vec<String> {
        self.docker(&["ps", "-aq"])
            .stdout
            .split_whitespace()
            .map(str::to_string)
            .collect()
    }
}

impl Engine for Docker {
    fn run(&self, spec: &Container) -> String {
        let name = self.name(spec.name());
        self.track(&name);
        let mut argv: Vec<String> = vec![
            "run".into(),
            "-d".into(),
            "--init".into(),
            format!("--name={name}"),
            format!("--network={}", self.network()),
        ];
        argv.extend(
            spec.labels()
                .iter()
                .map(|(k, v)| format!("--label={k}={v}")),
        );
        argv.extend(spec.options().iter().cloned());
        argv.push(self.image.clone());
        argv.extend(spec.argv().iter().cloned());
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        self.docker(&argv)
            .expect_success(&format!("docker run {name}"));
        name
    }

    fn addr(&self, short: &str) -> Ipv4Addr {
        self.addr_on(short, &self.network())
    }

    fn addr_on(&self, short: &str, network: &str) -> Ipv4Addr {
        let out = self.inspect(short, network, "{{.IPAddress}}");
        out.parse().unwrap_or_else(|_| {
            panic!("container {short} has no IPv4 address on {network}: {out:?}")
        })
    }

    fn addr6(&self, short: &str) -> Ipv6Addr {
        let out = self.inspect(short, &self.network(), "{{.GlobalIPv6Address}}");
        out.parse()
            .unwrap_or_else(|_| panic!("container {short} has no IPv6 address: {out:?}"))
    }

    fn exec(&self, short: &str, argv: &[&str], timeout: Duration) -> CmdOutput {
        let name = self.name(short);
        let mut args = vec!["exec", name.as_str()];
        args.extend_from_slice(argv);
        run_with_timeout(self.command(&args), timeout)
    }

    fn curl(&self, short: &str, url: &str, timeout: Duration) -> Result<u16, i32> {
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
        curl_outcome(&out)
    }

    fn netns(&self, short: &str) -> ContainerNetns {
        let pid = self
            .docker(&["inspect", "--format", "{{.State.Pid}}", &self.name(short)])
            .expect_success(&format!("docker inspect {short}"))
            .stdout
            .trim()
            .to_string();
        ContainerNetns::attach(format!("{}.ns", self.name(short)), &pid)
    }

    fn stop(&self, short: &str) {
        self.docker(&["stop", "-t", "0", &self.name(short)])
            .expect_success(&format!("docker stop {short}"));
    }

    fn start_container(&self, short: &str) {
        self.docker(&["start", &self.name(short)])
            .expect_success(&format!("docker start {short}"));
    }

    fn restart(&self, short: &str) {
        self.docker(&["restart", "-t", "0", &self.name(short)])
            .expect_success(&format!("docker restart {short}"));
    }

    fn remove(&self, short: &str) {
        self.docker(&["rm", "-f", &self.name(short)])
            .expect_success(&format!("docker rm {short}"));
    }

    fn rename(&self, short: &str, new: &str) -> String {
        let name = self.name(new);
        self.track(&name);
        self.docker(&["rename", &self.name(short), &name])
            .expect_success(&format!("docker rename {short} {new}"));
        name
    }

    fn create_network(&self, short: &str, link: u8) -> String {
        let network = self.name(short);
        self.networks
            .lock()
            .expect("network list")
            .push(network.clone());
        let subnet = format!("10.{}.{link}.0/24", self.index);
        let subnet6 = format!("fd00:{}:{link}::/64", self.index);
        self.docker(&[
            "network", "create", "--ipv6", "--subnet", &subnet, "--subnet", &subnet6, &network,
        ])
        .expect_success("docker network create");
        network
    }

    fn connect(&self, short: &str, network: &str) {
        self.docker(&["network", "connect", network, &self.name(short)])
            .expect_success(&format!("docker network connect {network} {short}"));
    }

    fn name(&self, short: &str) -> String {
        format!("{}{short}", self.prefix)
    }

    fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, self.index, NETWORK_LINK, 1)
    }

    fn socket(&self) -> &Path {
        &self.socket
    }

    fn stop_service(&self) {
        self.stop_daemon();
    }

    fn restart_service(&self) {
        self.restart_daemon();
    }
}

impl Drop for Docker {
    fn drop(&mut self) {
        if self.daemon_pid().is_some() {
            let all = self.all_containers();
            if !all.is_empty() {
                let mut args = vec!["rm", "-f"];
                args.extend(all.iter().map(String::as_str));
                let _ = self.docker(&args);
            }
            let networks = self.networks.lock().map(|n| n.clone()).unwrap_or_default();
            for network in networks.iter().rev() {
                let _ = self.docker(&["network", "rm", network]);
            }
        }
        self.stop_daemon();
        // What outlives the daemon (containers and shims under
        // live-restore, a daemon killed hard): its processes, by pid.
        kill_named(&self.dir.display().to_string());
        kill_cgroup(&self.cgroup_parent());
        if let Some(mut holder) = self.holder.lock().ok().and_then(|mut h| h.take()) {
            let _ = holder.kill();
            let _ = holder.wait();
        }
    }
}

/// Pids of the processes whose command line contains `needle`.
fn pids_naming(needle: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if String::from_utf8_lossy(&cmdline).contains(needle) {
            pids.push(pid);
        }
    }
    pids
}

/// Kills, by pid, the processes whose command line names `dir` (a
/// daemon's own directory: dockerd, its containerd, the shims).
fn kill_named(dir: &str) {
    for pid in pids_naming(dir) {
        // SAFETY: kill(2) of a process the harness started (it names the
        // harness's own directory).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// Kills the processes of the containers under cgroup `parent` (in every
/// controller), by pid, and removes those cgroups, deepest first.
fn kill_cgroup(parent: &str) {
    for controller in std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        let root = controller.path().join(parent);
        if !root.is_dir() {
            continue;
        }
        for _ in 0..50 {
            let pids = cgroup_pids(&root);
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                // SAFETY: kill(2) of a container process in a cgroup only
                // the harness's daemons use.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        remove_tree(&root);
    }
}

/// Every pid in the cgroup tree at `dir`.
fn cgroup_pids(dir: &Path) -> Vec<i32> {
    let mut pids: Vec<i32> = std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.path().is_dir() {
            pids.extend(cgroup_pids(&entry.path()));
        }
    }
    pids
}

/// Removes the (empty) cgroup directories under and at `dir`, deepest
/// first.
fn remove_tree(dir: &Path) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.path().is_dir() {
            remove_tree(&entry.path());
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Kills daemons of test processes that are gone (their liveness lock can
/// be taken): the processes whose command line names such a lab's
/// directory, and their containers' cgroups.
fn reap_stale() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let gone = |tag: &str| match File::open(Path::new(LOCK_DIR).join(format!("{tag}.lock"))) {
            Ok(file) => file.try_lock().is_ok(),
            Err(_) => true,
        };
        for controller in std::fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
        {
            for entry in std::fs::read_dir(controller.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let name = entry.file_name().to_string_lossy().into_owned();
                let Some(lab) = name.strip_prefix("tollgate-") else {
                    continue;
                };
                // `tg<I>-<tag>` of the cgroup parent; a lab name needs a role.
                let named = format!("{lab}-node");
                let Some(tag) = lab_tag(&named) else {
                    continue;
                };
                if gone(tag) {
                    kill_named(&format!("tollgate-{lab}-lab/d"));
                    kill_cgroup(&name);
                }
            }
        }
    });
}

/// `/run/docker/plugins`, which every dockerd creates and no flag moves:
/// removed (when empty) once the last daemon of this test process is gone,
/// unless it existed before the first one started.
struct PluginsDir;

/// (daemons alive, whether the directory existed before the first one).
static PLUGINS: Mutex<(usize, bool)> = Mutex::new((0, false));

impl PluginsDir {
    fn claim() -> PluginsDir {
        let mut plugins = PLUGINS.lock().unwrap_or_else(|e| e.into_inner());
        if plugins.0 == 0 {
            plugins.1 = Path::new("/run/docker/plugins").exists();
        }
        plugins.0 += 1;
        PluginsDir
    }
}

impl Drop for PluginsDir {
    fn drop(&mut self) {
        let mut plugins = PLUGINS.lock().unwrap_or_else(|e| e.into_inner());
        plugins.0 -= 1;
        if plugins.0 == 0 && !plugins.1 {
            let _ = std::fs::remove_dir("/run/docker/plugins");
            let _ = std::fs::remove_dir("/run/docker");
        }
    }
}
