//! What a Docker-host test asks of a container engine, whichever it is:
//! podman's Docker-compatible API service ([`super::podman::Podman`]) or a
//! real Docker Engine ([`super::docker::Docker`]), both inside a lab's node
//! namespace, with the same test image and the same test network
//! (`<prefix>net`, `10.I.250.0/24` and `fd00:I:250::/64`, the node at
//! `.1`). The Docker tests of the suite are written against [`Engine`] and
//! run once per engine ([`Kind`]).
//!
//! It owns nothing itself: each engine owns its service, containers and
//! networks, and removes them when dropped.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::time::Duration;

use super::docker::{Docker, DockerdOptions};
use super::lab::Lab;
use super::netns::CmdOutput;
use super::podman::{Container, ContainerNetns, Podman};

/// Which engine a test runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// podman 4.3's API service, netavark networks.
    Podman,
    /// Debian's `docker.io` (dockerd 20.10), with `--ip6tables`.
    Docker,
}

impl Kind {
    /// The tools a lab of this engine needs besides
    /// [`super::BASE_TOOLS`].
    pub fn tools(self) -> &'static [&'static str] {
        match self {
            Kind::Podman => super::podman::PODMAN_TOOLS,
            Kind::Docker => super::docker::DOCKER_TOOLS,
        }
    }

    /// Starts the engine in `lab`'s node namespace with its test network.
    pub fn start(self, lab: &Lab) -> Box<dyn Engine> {
        match self {
            Kind::Podman => Box::new(Podman::start(lab)),
            Kind::Docker => Box::new(Docker::start(lab, DockerdOptions::default())),
        }
    }

    /// [`Kind::start`], with containers that keep running while the API
    /// is stopped ([`Engine::stop_service`]): podman's service is apart
    /// from its containers; dockerd gets `--live-restore`.
    pub fn start_keeping_containers(self, lab: &Lab) -> Box<dyn Engine> {
        match self {
            Kind::Podman => Box::new(Podman::start(lab)),
            Kind::Docker => Box::new(Docker::start(
                lab,
                DockerdOptions {
                    live_restore: true,
                    ..DockerdOptions::default()
                },
            )),
        }
    }
}

/// A container engine in a lab's node namespace. Container and network
/// names are short names; the engine adds the lab's prefix.
pub trait Engine: Send + Sync {
    /// Runs `spec` detached on the test network; returns its full name
    /// once it is running.
    fn run(&self, spec: &Container) -> String;
    /// The IPv4 address of container `short` on the test network.
    fn addr(&self, short: &str) -> Ipv4Addr;
    /// The IPv4 address of container `short` on `network` (a full name).
    fn addr_on(&self, short: &str, network: &str) -> Ipv4Addr;
    /// The IPv6 address of container `short` on the test network.
    fn addr6(&self, short: &str) -> Ipv6Addr;
    /// Runs `argv` inside container `short`, killed after `timeout`.
    fn exec(&self, short: &str, argv: &[&str], timeout: Duration) -> CmdOutput;
    /// `curl`s `url` from container `short`: the HTTP status, or curl's
    /// exit code (28: timed out, 7: refused, 6: name not resolved).
    fn curl(&self, short: &str, url: &str, timeout: Duration) -> Result<u16, i32>;
    /// The network namespace of the running container `short`.
    fn netns(&self, short: &str) -> ContainerNetns;
    /// Stops container `short` (its addresses are released).
    fn stop(&self, short: &str);
    /// Starts the stopped container `short` again.
    fn start_container(&self, short: &str);
    /// Restarts container `short` (stop without grace, start).
    fn restart(&self, short: &str);
    /// Removes container `short`.
    fn remove(&self, short: &str);
    /// Renames container `short` to `new`; returns the new full name.
    fn rename(&self, short: &str, new: &str) -> String;
    /// Creates the network `<prefix><short>` on `10.I.<link>.0/24` and
    /// `fd00:I:<link>::/64`; returns its full name.
    fn create_network(&self, short: &str, link: u8) -> String;
    /// Connects the running container `short` to `network` (a full name).
    fn connect(&self, short: &str, network: &str);
    /// The full name of the container or network called `short`.
    fn name(&self, short: &str) -> String;
    /// The test network's name.
    fn network(&self) -> String {
        self.name("net")
    }
    /// The node's (the bridge's) IPv4 address on the test network.
    fn gateway(&self) -> Ipv4Addr;
    /// The API socket.
    fn socket(&self) -> &Path;
    /// `unix://<socket>`, the value of `--docker-host`.
    fn docker_host(&self) -> String {
        format!("unix://{}", self.socket().display())
    }
    /// Stops the API (podman's service; Docker's daemon, whose containers
    /// keep running only with live-restore).
    fn stop_service(&self);
    /// Starts the API again after [`Engine::stop_service`] and waits until
    /// it answers.
    fn restart_service(&self);
}

impl Engine for Podman {
    fn run(&self, spec: &Container) -> String {
        Podman::run(self, spec)
    }
    fn addr(&self, short: &str) -> Ipv4Addr {
        Podman::addr(self, short)
    }
    fn addr_on(&self, short: &str, network: &str) -> Ipv4Addr {
        Podman::addr_on(self, short, network)
    }
    fn addr6(&self, short: &str) -> Ipv6Addr {
        Podman::addr6(self, short)
    }
    fn exec(&self, short: &str, argv: &[&str], timeout: Duration) -> CmdOutput {
        Podman::exec(self, short, argv, timeout)
    }
    fn curl(&self, short: &str, url: &str, timeout: Duration) -> Result<u16, i32> {
        Podman::curl(self, short, url, timeout)
    }
    fn netns(&self, short: &str) -> ContainerNetns {
        Podman::netns(self, short)
    }
    fn stop(&self, short: &str) {
        Podman::stop(self, short)
    }
    fn start_container(&self, short: &str) {
        Podman::start_container(self, short)
    }
    fn restart(&self, short: &str) {
        Podman::restart(self, short)
    }
    fn remove(&self, short: &str) {
        Podman::remove(self, short)
    }
    fn rename(&self, short: &str, new: &str) -> String {
        Podman::rename(self, short, new)
    }
    fn create_network(&self, short: &str, link: u8) -> String {
        Podman::create_network(self, short, link)
    }
    fn connect(&self, short: &str, network: &str) {
        Podman::connect(self, short, network)
    }
    fn name(&self, short: &str) -> String {
        Podman::name(self, short)
    }
    fn gateway(&self) -> Ipv4Addr {
        Podman::gateway(self)
    }
    fn socket(&self) -> &Path {
        Podman::socket(self)
    }
    fn stop_service(&self) {
        Podman::stop_service(self)
    }
    fn restart_service(&self) {
        Podman::restart_service(self)
    }
}

/// The outcome of `curl -w %{http_code}` run by `out`: the status, or
/// curl's exit code (`-1` when it was killed).
pub fn curl_outcome(out: &CmdOutput) -> Result<u16, i32> {
    match out.code() {
        Some(0) => Ok(out.stdout.trim().parse().unwrap_or(0)),
        Some(code) => Err(code),
        None => Err(-1),
    }
}
