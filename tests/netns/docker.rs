//! Docker hosts: containers in a lab's node namespace, with `tollgate run
//! --docker` taking its inventory from their engine's API. Every test runs
//! against both engines ([`Kind`]): podman's Docker-compatible API service
//! ([`harness::podman`], netavark; the test's own name) and a real Docker
//! Engine ([`harness::docker`], dockerd 20.10 with `--ip6tables`; the name
//! with `_with_docker`). Every event kind the agent follows is checked on
//! the wire within [`EVENT_BOUND`], well under the 60 s resync that would
//! otherwise hide a missed event; the time from `run` and `start` to the
//! policy holding on the wire is printed as `FIGURE` lines.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::harness::engine::{Engine, Kind};
use crate::harness::lab::NODE;
use crate::harness::podman::{Container, ContainerNetns, Podman, PODMAN_TOOLS};
use crate::harness::probe::{connected_from, Attempt, Prober};
use crate::harness::{
    poll_until, wait_until, Agent, DnsRecord, Lab, TcpOutcome, AGENT_WAIT, ALLOW_WAIT,
};

pub(crate) const NGINX: &[&str] = &["nginx", "-g", "daemon off;"];

/// The harness itself: labelled containers on the test network reach each
/// other over IPv4 and IPv6, the API service lists them with their labels
/// and addresses, and dropping the harness removes containers and network.
#[test]
fn podman_harness_runs_labelled_containers_and_cleans_up() {
    let Some(lab) = Lab::builder("podman_harness_runs_labelled_containers_and_cleans_up")
        .require(PODMAN_TOOLS)
        .build()
    else {
        return;
    };
    let podman = Podman::start(&lab);
    podman.run(&Container::new("server").label("app", "web").command(NGINX));
    podman.run(&Container::new("client").label("app", "client"));
    let server = podman.addr("server");
    let server6 = podman.addr6("server");
    wait_until("nginx answers over IPv4", ALLOW_WAIT, || {
        podman.curl(
            "client",
            &format!("http://{server}/"),
            Duration::from_secs(2),
        ) == Ok(200)
    });
    assert_eq!(
        podman.curl("client", &format!("http://[{server6}]/"), ALLOW_WAIT),
        Ok(200)
    );
    // The node is the network's gateway, in both families.
    let addresses = lab.node().ok("ip -br addr");
    for gateway in [podman.gateway().to_string(), podman.gateway6().to_string()] {
        assert!(
            addresses.contains(&gateway),
            "{gateway} not in\n{addresses}"
        );
    }
    let listed = lab.node().ok(&format!(
        "curl -sf --unix-socket {} http://d/v1.41/containers/json",
        podman.socket().display()
    ));
    let listed: serde_json::Value = serde_json::from_str(&listed).expect("container list JSON");
    let server_name = format!("/{}", podman.name("server"));
    let entry = listed
        .as_array()
        .expect("a list")
        .iter()
        .find(|c| c["Names"][0] == server_name.as_str())
        .unwrap_or_else(|| panic!("{server_name} not listed: {listed}"));
    assert_eq!(entry["Labels"]["app"], "web");
    assert_eq!(
        entry["NetworkSettings"]["Networks"][podman.network()]["IPAddress"],
        server.to_string()
    );
    let prefix = podman.name("");
    let network = podman.network();
    drop(podman);
    let left = lab.node().ok("podman --runtime runc --cgroup-manager cgroupfs ps -a --format '{{.Names}}'; podman --network-backend=netavark network ls --format '{{.Name}}'");
    assert!(
        !left.contains(&prefix),
        "containers or network {network} left behind: {left}"
    );
}

/// Starts the agent with the containers of `engine`'s API as its
/// inventory (it may not have listed them yet).
fn docker_agent(lab: &Lab, engine: &dyn Engine) -> Agent {
    lab.start_agent(
        lab.agent_options()
            .args(&["--docker", "--docker-host", &engine.docker_host()]),
    )
}

/// Web (app=web) in the test's project takes HTTP from its app=client
/// containers only; everything else to it is dropped. The port is the
/// named port `http` of the ports label, so the label mapping is exercised
/// too. The project (the namespace) is the test's own: podman's storage is
/// shared, so the API lists the containers of concurrent tests as well.
pub(crate) fn web_policy(project: &str) -> String {
    format!(
        "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: web-ingress
spec:
  priority: 5
  tier: application
  appliedTo:
  - podSelector:
      matchLabels: {{app: web}}
    namespaceSelector:
      matchLabels: {{kubernetes.io/metadata.name: {project}}}
  ingress:
  - name: allow-clients
    action: Allow
    from:
    - podSelector:
        matchLabels: {{app: client}}
      namespaceSelector:
        matchLabels: {{kubernetes.io/metadata.name: {project}}}
    ports: [{{protocol: TCP, port: http}}]
  - name: drop-rest
    action: Drop
"
    )
}

/// What a denied curl reports: timed out (28).
const TIMED_OUT: Result<u16, i32> = Err(28);
/// Short, since every denied probe waits it out.
const PROBE: Duration = Duration::from_secs(2);
/// Longest an event may take to be enforced: far below the 60 s resync
/// (`source::docker::RESYNC`), so a test passing only by resync fails.
const EVENT_BOUND: Duration = Duration::from_secs(10);
/// Pace and timeout of the wire probes that time enforcement.
const EVERY: Duration = Duration::from_millis(20);
const ATTEMPT: Duration = Duration::from_millis(300);
pub(crate) const COMPOSE_PROJECT: &str = "com.docker.compose.project";

/// A lab with podman, the web server and two clients, the policy written
/// and the agent following the API service.
struct Shop {
    /// client1's and client2's network namespaces, for in-process probes.
    clients: [ContainerNetns; 2],
    engine: Box<dyn Engine>,
    kind: Kind,
    agent: Agent,
    /// The Compose project of the test's containers: their namespace.
    project: String,
    // Last: dropped after the containers and the agent.
    lab: Lab,
}

/// The labels of the shop's web server.
pub(crate) fn web(name: &str, project: &str) -> Container {
    Container::new(name)
        .label(COMPOSE_PROJECT, project)
        .label("app", "web")
        .label("tollgate.io/ports", "http=80/TCP")
        .command(NGINX)
}

/// The shop's containers in `engine`, before any agent: the web server,
/// client1 (app=client) and client2 (app=other) in one Compose project,
/// which is returned.
fn shop_containers(engine: &dyn Engine) -> String {
    let project = engine.name("shop");
    engine.run(&web("web", &project));
    for (name, app) in [("client1", "client"), ("client2", "other")] {
        engine.run(
            &Container::new(name)
                .label(COMPOSE_PROJECT, &project)
                .label("app", app),
        );
    }
    project
}

fn shop(test: &'static str, kind: Kind) -> Option<Shop> {
    let lab = Lab::builder(test).require(kind.tools()).build()?;
    let engine = kind.start(&lab);
    Some(shop_in(lab, engine, kind))
}

/// [`shop`] with an engine whose containers outlive its API.
fn shop_keeping(test: &'static str, kind: Kind) -> Option<Shop> {
    let lab = Lab::builder(test).require(kind.tools()).build()?;
    let engine = kind.start_keeping_containers(&lab);
    Some(shop_in(lab, engine, kind))
}

fn shop_in(lab: Lab, engine: Box<dyn Engine>, kind: Kind) -> Shop {
    let project = shop_containers(engine.as_ref());
    lab.write_policy("web.yaml", &web_policy(&project));
    let mut agent = docker_agent(&lab, engine.as_ref());
    agent.wait_generation(1);
    Shop {
        clients: [engine.netns("client1"), engine.netns("client2")],
        engine,
        kind,
        agent,
        project,
        lab,
    }
}

/// When a policy came to hold on the wire, from attempts made every
/// [`EVERY`] by an allowed and a denied client: the later of the allowed
/// client's first connection and the denied client's last connection
/// (plus one pace). `None` while the allowed client never connected, a
/// denied connection is the latest attempt, or fewer than `settled`
/// denied attempts followed it.
fn held_since(allowed: &[Attempt], denied: &[Attempt], settled: usize) -> Option<Duration> {
    let first_allowed = allowed
        .iter()
        .find(|a| a.outcome == TcpOutcome::Connected)?
        .at;
    let last_denied = denied
        .iter()
        .rev()
        .find(|a| a.outcome == TcpOutcome::Connected)
        .map(|a| a.at + EVERY);
    let since = last_denied.map_or(first_allowed, |d| d.max(first_allowed));
    (denied.iter().filter(|a| a.at >= since).count() >= settled).then_some(since)
}

impl Shop {
    /// A `FIGURE` line for this shop's engine: `<name>_podman` or
    /// `<name>_docker`.
    fn figure(&self, name: &str, took: Duration) {
        let engine = match self.kind {
            Kind::Podman => "podman",
            Kind::Docker => "docker",
        };
        figure(&format!("{name}_{engine}"), took);
    }

    /// The time from `t0` until client1 reaches `web:80` and client2's
    /// connections to it are dropped, on the wire (in-process connects
    /// every [`EVERY`] from both clients' namespaces, until 25 denied
    /// attempts in a row stay dropped); panics after [`AGENT_WAIT`].
    fn time_to_enforced(&self, web: IpAddr, t0: Instant) -> Duration {
        let target = SocketAddr::new(web, 80);
        let allowed = Prober::start(&self.clients[0], &[target], EVERY, ATTEMPT, AGENT_WAIT * 2);
        let denied = Prober::start(&self.clients[1], &[target], EVERY, ATTEMPT, AGENT_WAIT * 2);
        // The probers' clock starts now; `t0` was earlier.
        let offset = t0.elapsed().saturating_sub(allowed.now());
        let held = poll_until(AGENT_WAIT, || {
            held_since(&allowed.attempts(target), &denied.attempts(target), 25)
        });
        let (allowed, denied) = (allowed.finish(), denied.finish());
        let held = held.unwrap_or_else(|| {
            panic!(
                "the policy did not come to hold on {target} within {AGENT_WAIT:?}:\nallowed {:?}\ndenied {:?}\n{}",
                allowed[0].1,
                denied[0].1,
                self.agent.log()
            )
        });
        // Nothing denied got through after it held.
        let late = connected_from(&denied[0].1, held);
        assert!(
            late.is_empty(),
            "denied connections after {held:?}: {late:?}"
        );
        held + offset
    }

    fn url(&self, ip: IpAddr) -> String {
        match ip {
            IpAddr::V4(ip) => format!("http://{ip}/"),
            IpAddr::V6(ip) => format!("http://[{ip}]/"),
        }
    }

    /// client1 reaches web at `ip`, client2 does not.
    fn assert_enforced(&self, ip: IpAddr) {
        let url = self.url(ip);
        wait_until(&format!("client1 reaches {url}"), ALLOW_WAIT, || {
            self.engine.curl("client1", &url, PROBE) == Ok(200)
        });
        assert_eq!(
            self.engine.curl("client2", &url, PROBE),
            TIMED_OUT,
            "client2 to {url} must be dropped\n{}",
            self.agent.log()
        );
    }

    /// The node's ipsets with their members (every set, both families).
    fn set_members(&self) -> String {
        self.lab.node().ok("ipset list")
    }

    /// Whether `ip` is a member of one of the node's ipsets.
    fn is_member(&self, ip: &str) -> bool {
        self.set_members()
            .lines()
            .any(|l| l.split_whitespace().next() == Some(ip))
    }
}

/// Containers are the inventory: a ClusterNetworkPolicy selecting them by
/// label holds on the wire between containers on one bridge, over IPv4 and
/// IPv6, and their addresses (both families) are in the node's sets.
#[test]
fn docker_containers_are_the_inventory_and_policies_hold_on_the_wire() {
    docker_containers_are_the_inventory_and_policies_hold_on_the_wire_on(
        Kind::Podman,
        "docker_containers_are_the_inventory_and_policies_hold_on_the_wire",
    );
}

#[test]
fn docker_containers_are_the_inventory_and_policies_hold_on_the_wire_with_docker() {
    docker_containers_are_the_inventory_and_policies_hold_on_the_wire_on(
        Kind::Docker,
        "docker_containers_are_the_inventory_and_policies_hold_on_the_wire_with_docker",
    );
}

fn docker_containers_are_the_inventory_and_policies_hold_on_the_wire_on(
    kind: Kind,
    test: &'static str,
) {
    let Some(shop) = shop(test, kind) else {
        return;
    };
    let web = shop.engine.addr("web");
    let web6 = shop.engine.addr6("web");
    shop.assert_enforced(web.into());
    shop.assert_enforced(web6.into());
    let members = shop.set_members();
    for ip in [web.to_string(), web6.to_string()] {
        assert!(shop.is_member(&ip), "{ip} not in\n{members}");
    }
    // The running agent names the containers `project/container`.
    let listed = endpoints(&shop);
    let name = |short: &str| format!("{}/{}", shop.project, shop.engine.name(short));
    let web_endpoint = endpoint(&listed, &name("web"))
        .unwrap_or_else(|| panic!("{} not in {listed}", name("web")));
    assert_eq!(web_endpoint["namespace"], shop.project.as_str());
    let addresses = web_endpoint["addresses"].to_string();
    assert!(
        addresses.contains(&web.to_string()) && addresses.contains(&web6.to_string()),
        "{web_endpoint}"
    );
    assert_eq!(
        web_endpoint["policies"][0], "AntreaClusterNetworkPolicy:web-ingress",
        "{web_endpoint}"
    );
    for client in ["client1", "client2"] {
        assert!(endpoint(&listed, &name(client)).is_some(), "{listed}");
    }
    for (client, verdict, rule) in [
        ("client1", "Allow", "allow-clients"),
        ("client2", "Drop", "drop-rest"),
    ] {
        let traced = trace(&shop, &name(client), &name("web"));
        assert_eq!(traced["verdict"], verdict, "{traced}");
        assert_eq!(traced["src"]["name"], name(client).as_str(), "{traced}");
        assert_eq!(traced["ingress"]["rule"], rule, "{traced}");
        assert_eq!(traced["dstPort"], 80, "the named port http: {traced}");
    }
}

/// A container stopped and started again is followed: the stopped one
/// leaves the sets, the started one (a new address, or the same) is
/// covered on the wire within [`EVENT_BOUND`] of `podman start` (printed
/// as `FIGURE docker_start_to_enforced_ms`), and a removed one leaves no
/// address in the sets.
#[test]
fn docker_restart_is_followed_and_removal_leaves_no_address() {
    docker_restart_is_followed_and_removal_leaves_no_address_on(
        Kind::Podman,
        "docker_restart_is_followed_and_removal_leaves_no_address",
    );
}

#[test]
fn docker_restart_is_followed_and_removal_leaves_no_address_with_docker() {
    docker_restart_is_followed_and_removal_leaves_no_address_on(
        Kind::Docker,
        "docker_restart_is_followed_and_removal_leaves_no_address_with_docker",
    );
}

fn docker_restart_is_followed_and_removal_leaves_no_address_on(kind: Kind, test: &'static str) {
    let Some(shop) = shop(test, kind) else {
        return;
    };
    let old = shop.engine.addr("web").to_string();
    let old6 = shop.engine.addr6("web").to_string();
    shop.assert_enforced(old.parse().unwrap());
    shop.engine.stop("web");
    wait_until("the stopped web leaves the sets", AGENT_WAIT, || {
        !shop.is_member(&old) && !shop.is_member(&old6)
    });
    let started = Instant::now();
    shop.engine.start_container("web");
    let new = shop.engine.addr("web");
    let enforced = shop.time_to_enforced(new.into(), started);
    println!("DOCKER-START: web came back at {new} (was {old})");
    shop.figure("docker_start_to_enforced_ms", enforced);
    assert!(
        enforced < EVENT_BOUND,
        "took {enforced:?} from podman start to the policy holding on the wire"
    );
    assert!(shop.is_member(&new.to_string()));
    shop.assert_enforced(shop.engine.addr6("web").into());

    let gone = [new.to_string(), shop.engine.addr6("web").to_string()];
    shop.engine.remove("web");
    wait_until("the removed web leaves the sets", EVENT_BOUND, || {
        gone.iter().all(|ip| !shop.is_member(ip))
    });
}

/// Prints `FIGURE <name>=<ms>` (collected by `--nocapture` runs).
pub(crate) fn figure(name: &str, took: Duration) {
    let _ = writeln!(
        std::io::stderr().lock(),
        "FIGURE {name}={}",
        took.as_millis()
    );
}

/// A container started fresh (`podman run`, its address fixed with
/// `--ip` so the probes can start first) is covered on the wire within
/// [`EVENT_BOUND`]: printed as `FIGURE docker_run_to_enforced_ms`, from
/// the `podman run` call to client1 reaching it and client2 dropped.
#[test]
fn docker_fresh_container_is_enforced_within_a_bound() {
    docker_fresh_container_is_enforced_within_a_bound_on(
        Kind::Podman,
        "docker_fresh_container_is_enforced_within_a_bound",
    );
}

#[test]
fn docker_fresh_container_is_enforced_within_a_bound_with_docker() {
    docker_fresh_container_is_enforced_within_a_bound_on(
        Kind::Docker,
        "docker_fresh_container_is_enforced_within_a_bound_with_docker",
    );
}

fn docker_fresh_container_is_enforced_within_a_bound_on(kind: Kind, test: &'static str) {
    let Some(shop) = shop(test, kind) else {
        return;
    };
    let fresh = std::net::Ipv4Addr::new(10, shop.lab.index(), 250, 200);
    let started = Instant::now();
    let target = SocketAddr::new(fresh.into(), 80);
    // The probes run before and during `podman run`.
    let run = std::thread::scope(|scope| {
        let timing = scope.spawn(|| shop.time_to_enforced(target.ip(), started));
        shop.engine
            .run(&web("fresh", &shop.project).option(&format!("--ip={fresh}")));
        timing.join().expect("timing the fresh container")
    });
    shop.figure("docker_run_to_enforced_ms", run);
    assert!(
        run < EVENT_BOUND,
        "took {run:?} from podman run to the policy holding on the wire"
    );
    assert_eq!(shop.engine.addr("fresh"), fresh);
}

/// One `podman restart` (die, then start: the address may change) is
/// covered on the wire within [`EVENT_BOUND`], and was followed: the
/// agent applied a new generation for it. When web comes back at the same
/// address, the wire alone cannot tell "followed" from "never noticed"
/// (the old ruleset and its cached verdicts hold the same address), so
/// the generation is what shows it (issue 29, audit L1); the addresses
/// are printed as `DOCKER-RESTART`.
///
/// Mutation (tried, issue 29): an agent that ignores the API's events
/// (only its 60 s resync would notice) fails it: web came back at a new
/// address and the policy never held there; at the same address, no new
/// generation would be logged.
#[test]
fn docker_podman_restart_is_covered_within_a_bound() {
    docker_podman_restart_is_covered_within_a_bound_on(
        Kind::Podman,
        "docker_podman_restart_is_covered_within_a_bound",
    );
}

#[test]
fn docker_podman_restart_is_covered_within_a_bound_with_docker() {
    docker_podman_restart_is_covered_within_a_bound_on(
        Kind::Docker,
        "docker_podman_restart_is_covered_within_a_bound_with_docker",
    );
}

fn docker_podman_restart_is_covered_within_a_bound_on(kind: Kind, test: &'static str) {
    let Some(shop) = shop(test, kind) else {
        return;
    };
    let old = shop.engine.addr("web");
    shop.assert_enforced(old.into());
    let generations = shop.agent.count_log("ruleset applied generation=");
    let started = Instant::now();
    shop.engine.restart("web");
    let web = shop.engine.addr("web");
    let enforced = shop.time_to_enforced(web.into(), started);
    // Both events applied: die (web's addresses leave) and start.
    let followed = poll_until(AGENT_WAIT, || {
        (shop.agent.count_log("ruleset applied generation=") > generations).then_some(())
    });
    println!(
        "DOCKER-RESTART: web at {old} before, {web} after; {} new generations",
        shop.agent.count_log("ruleset applied generation=") - generations
    );
    assert!(
        followed.is_some(),
        "the restart was not followed (no new generation):\n{}",
        shop.agent.log()
    );
    shop.figure("docker_restart_to_enforced_ms", enforced);
    assert!(
        enforced < EVENT_BOUND,
        "took {enforced:?} from podman restart to the policy holding on the wire"
    );
    shop.assert_enforced(shop.engine.addr6("web").into());
}

/// `podman network connect` of a second network: web's address there
/// enters the sets and the policy holds on it (client1 and client2 reach
/// it routed through the node) within [`EVENT_BOUND`].
#[test]
fn docker_network_connect_adds_the_new_address() {
    docker_network_connect_adds_the_new_address_on(
        Kind::Podman,
        "docker_network_connect_adds_the_new_address",
    );
}

#[test]
fn docker_network_connect_adds_the_new_address_with_docker() {
    docker_network_connect_adds_the_new_address_on(
        Kind::Docker,
        "docker_network_connect_adds_the_new_address_with_docker",
    );
}

fn docker_network_connect_adds_the_new_address_on(kind: Kind, test: &'static str) {
    let Some(shop) = shop(test, kind) else {
        return;
    };
    shop.assert_enforced(shop.engine.addr("web").into());
    let second = shop.engine.create_network("net2", 251);
    let started = Instant::now();
    shop.engine.connect("web", &second);
    let added = shop.engine.addr_on("web", &second);
    let enforced = shop.time_to_enforced(added.into(), started);
    shop.figure("docker_connect_to_enforced_ms", enforced);
    assert!(
        enforced < EVENT_BOUND,
        "took {enforced:?} from podman network connect to the policy holding on {added}"
    );
    assert!(shop.is_member(&added.to_string()), "{}", shop.set_members());
    // The first network's address stays covered.
    shop.assert_enforced(shop.engine.addr("web").into());
}

/// `tollgate get endpoints -o json` of the agent.
fn endpoints(shop: &Shop) -> serde_json::Value {
    let out = shop.lab.node().ok(&format!(
        "{} get endpoints -o json --socket {}",
        env!("CARGO_BIN_EXE_tollgate"),
        shop.lab.agent_options().status_socket.display()
    ));
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("get endpoints JSON: {e}\n{out}"))
}

/// The endpoint called `name` in `get endpoints`, if listed.
fn endpoint<'a>(listed: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    listed
        .as_array()
        .expect("a list")
        .iter()
        .find(|e| e["endpoint"] == name)
}

/// `tollgate trace -o json` of the agent from `src` to `dst`'s port
/// `http`.
fn trace(shop: &Shop, src: &str, dst: &str) -> serde_json::Value {
    let out = shop.lab.node().ok(&format!(
        "{} trace -o json --socket {} --src {src} --dst {dst} --protocol tcp --dst-port http",
        env!("CARGO_BIN_EXE_tollgate"),
        shop.lab.agent_options().status_socket.display()
    ));
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("trace JSON: {e}\n{out}"))
}

/// `podman rename`: `get endpoints` and `trace` of the running agent name
/// the container by its new `project/name` within [`EVENT_BOUND`] (the
/// old name is gone), and the policy keeps holding on its address.
#[test]
fn docker_rename_is_followed_by_get_and_trace() {
    docker_rename_is_followed_by_get_and_trace_on(
        Kind::Podman,
        "docker_rename_is_followed_by_get_and_trace",
    );
}

#[test]
fn docker_rename_is_followed_by_get_and_trace_with_docker() {
    docker_rename_is_followed_by_get_and_trace_on(
        Kind::Docker,
        "docker_rename_is_followed_by_get_and_trace_with_docker",
    );
}

fn docker_rename_is_followed_by_get_and_trace_on(kind: Kind, test: &'static str) {
    let Some(shop) = shop(test, kind) else {
        return;
    };
    let old = format!("{}/{}", shop.project, shop.engine.name("web"));
    assert!(endpoint(&endpoints(&shop), &old).is_some());
    let started = Instant::now();
    let renamed = shop.engine.rename("web", "web-renamed");
    let new = format!("{}/{renamed}", shop.project);
    wait_until(
        "get endpoints names the renamed container",
        EVENT_BOUND,
        || {
            let listed = endpoints(&shop);
            endpoint(&listed, &new).is_some() && endpoint(&listed, &old).is_none()
        },
    );
    println!(
        "DOCKER-RENAME: get endpoints names {new} {} ms after podman rename",
        started.elapsed().as_millis()
    );
    let client2 = format!("{}/{}", shop.project, shop.engine.name("client2"));
    let traced = trace(&shop, &client2, &new);
    assert_eq!(traced["dst"]["name"], new.as_str(), "{traced}");
    assert_eq!(traced["verdict"], "Drop", "{traced}");
    shop.assert_enforced(shop.engine.addr("web-renamed").into());
}

/// The API absent when the agent starts (a fresh host where tollgate
/// starts before the engine): the source is incomplete, so the agent
/// holds `startupPolicy: closed` — new connections between containers
/// are dropped, `status` says NOT REACHED YET — and once the API service
/// starts the policy holds on the wire within the backoff cap before the
/// first list (2 s) plus one reload.
#[test]
fn docker_api_absent_at_start_holds_the_startup_policy() {
    docker_api_absent_at_start_holds_the_startup_policy_on(
        Kind::Podman,
        "docker_api_absent_at_start_holds_the_startup_policy",
    );
}

#[test]
fn docker_api_absent_at_start_holds_the_startup_policy_with_docker() {
    docker_api_absent_at_start_holds_the_startup_policy_on(
        Kind::Docker,
        "docker_api_absent_at_start_holds_the_startup_policy_with_docker",
    );
}

fn docker_api_absent_at_start_holds_the_startup_policy_on(kind: Kind, test: &'static str) {
    let Some(lab) = Lab::builder(test).require(kind.tools()).build() else {
        return;
    };
    // The containers outlive the API: podman's service, or dockerd with
    // live-restore.
    let engine = kind.start_keeping_containers(&lab);
    let podman = engine.as_ref();
    let project = shop_containers(podman);
    let web_addr = IpAddr::from(podman.addr("web"));
    let target = SocketAddr::new(web_addr, 80);
    let clients = [podman.netns("client1"), podman.netns("client2")];
    for client in &clients {
        let up = poll_until(AGENT_WAIT, || {
            (crate::harness::probe::tcp_connect(client, target, ATTEMPT) == TcpOutcome::Connected)
                .then_some(())
        });
        assert!(up.is_some(), "{target} not reachable before the agent");
    }
    lab.write_policy("web.yaml", &web_policy(&project));
    podman.stop_service();
    let mut agent = docker_agent(&lab, podman);
    agent.wait_for_log("startup policy closed", AGENT_WAIT);
    agent.wait_for_log("Docker API not reachable", AGENT_WAIT);
    for client in &clients {
        assert_eq!(
            crate::harness::probe::tcp_connect(client, target, ATTEMPT),
            TcpOutcome::TimedOut,
            "{} to web must be dropped while the API is absent\n{}",
            client.name(),
            agent.log()
        );
    }
    let status = lab.node().ok(&format!(
        "{} status --socket {}",
        env!("CARGO_BIN_EXE_tollgate"),
        lab.agent_options().status_socket.display()
    ));
    assert!(status.contains("NOT REACHED YET"), "{status}");
    assert_eq!(agent.count_log("ruleset applied generation="), 0);
    let shop = Shop {
        clients,
        engine,
        kind,
        agent,
        project,
        lab,
    };
    let started = Instant::now();
    shop.engine.restart_service();
    let enforced = shop.time_to_enforced(web_addr, started);
    println!(
        "DOCKER-API-LATE: policy held on the wire {} ms after the API service started",
        enforced.as_millis()
    );
    assert!(
        enforced < EVENT_BOUND,
        "took {enforced:?} from the API answering to the policy holding"
    );
    assert_eq!(
        shop.agent.count_log("Docker API not reachable"),
        1,
        "logged once: {}",
        shop.agent.log()
    );
}

/// The image's exposed port (the test image has `EXPOSE 80/tcp`, no ports
/// label here) is the named port `tcp-80`: a rule allowing only that name
/// lets app=client in and the rest is dropped, on the wire.
#[test]
fn docker_exposed_port_is_a_named_port_on_the_wire() {
    docker_exposed_port_is_a_named_port_on_the_wire_on(
        Kind::Podman,
        "docker_exposed_port_is_a_named_port_on_the_wire",
    );
}

#[test]
fn docker_exposed_port_is_a_named_port_on_the_wire_with_docker() {
    docker_exposed_port_is_a_named_port_on_the_wire_on(
        Kind::Docker,
        "docker_exposed_port_is_a_named_port_on_the_wire_with_docker",
    );
}

fn docker_exposed_port_is_a_named_port_on_the_wire_on(kind: Kind, test: &'static str) {
    let Some(lab) = Lab::builder(test).require(kind.tools()).build() else {
        return;
    };
    let engine = kind.start(&lab);
    let podman = engine.as_ref();
    let project = podman.name("shop");
    podman.run(
        &Container::new("api")
            .label(COMPOSE_PROJECT, &project)
            .label("app", "api")
            .command(NGINX),
    );
    for (name, app) in [("client1", "client"), ("client2", "other")] {
        podman.run(
            &Container::new(name)
                .label(COMPOSE_PROJECT, &project)
                .label("app", app),
        );
    }
    lab.write_policy(
        "api.yaml",
        &format!(
            "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: api-ingress}}
spec:
  priority: 5
  tier: application
  appliedTo:
  - podSelector: {{matchLabels: {{app: api}}}}
    namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {project}}}}}
  ingress:
  - name: allow-exposed
    action: Allow
    from:
    - podSelector: {{matchLabels: {{app: client}}}}
      namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {project}}}}}
    ports: [{{protocol: TCP, port: tcp-80}}]
  - name: drop-rest
    action: Drop
"
        ),
    );
    let mut agent = docker_agent(&lab, podman);
    agent.wait_generation(1);
    for api in [
        format!("http://{}/", podman.addr("api")),
        format!("http://[{}]/", podman.addr6("api")),
    ] {
        wait_until(&format!("client1 reaches {api}"), ALLOW_WAIT, || {
            podman.curl("client1", &api, PROBE) == Ok(200)
        });
        assert_eq!(podman.curl("client2", &api, PROBE), TIMED_OUT, "{api}");
    }
    let traced = lab.node().ok(&format!(
        "{} trace -o json --socket {} --src {project}/{} --dst {project}/{} --protocol tcp --dst-port tcp-80",
        env!("CARGO_BIN_EXE_tollgate"),
        lab.agent_options().status_socket.display(),
        podman.name("client1"),
        podman.name("api"),
    ));
    let traced: serde_json::Value = serde_json::from_str(&traced).expect("trace JSON");
    assert_eq!(traced["dstPort"], 80, "{traced}");
    assert_eq!(traced["ingress"]["rule"], "allow-exposed", "{traced}");
}

/// The API going away (podman's service stopped; dockerd stopped under
/// live-restore, its containers running on) leaves the containers'
/// addresses unknown until the next complete list: the closed startup
/// policy drops new connections to web from both clients, the allowed one
/// included, and `status` says why; when the API answers again the policy
/// holds as before. Mutation (tried, both engines): keeping the last
/// inventory while the API is lost (not clearing the containers in the
/// Docker source's `run`) lets client1 through during the outage, and the
/// test fails (never closed within 30 s).
#[test]
fn docker_api_gone_closes_the_container_addresses_until_listed() {
    docker_api_gone_closes_the_container_addresses_until_listed_on(
        Kind::Podman,
        "docker_api_gone_closes_the_container_addresses_until_listed",
    );
}

#[test]
fn docker_api_gone_closes_the_container_addresses_until_listed_with_docker() {
    docker_api_gone_closes_the_container_addresses_until_listed_on(
        Kind::Docker,
        "docker_api_gone_closes_the_container_addresses_until_listed_with_docker",
    );
}

fn docker_api_gone_closes_the_container_addresses_until_listed_on(kind: Kind, test: &'static str) {
    let Some(mut shop) = shop_keeping(test, kind) else {
        return;
    };
    let web = IpAddr::from(shop.engine.addr("web"));
    shop.assert_enforced(web);
    shop.engine.stop_service();
    shop.agent.wait_for_log("Docker API lost", AGENT_WAIT);
    // From the clients' namespaces: with the daemon down, `docker exec`
    // cannot run a client.
    let target = SocketAddr::new(web, 80);
    for client in &shop.clients {
        wait_until(
            &format!("{} to {target} closed while the API is away", client.name()),
            AGENT_WAIT,
            || crate::harness::probe::tcp_connect(client, target, ATTEMPT) == TcpOutcome::TimedOut,
        );
    }
    let status = || {
        shop.lab.node().ok(&format!(
            "{} status --socket {}",
            env!("CARGO_BIN_EXE_tollgate"),
            shop.lab.agent_options().status_socket.display()
        ))
    };
    let down = status();
    assert!(down.contains("UNREACHABLE"), "{down}");
    assert!(down.contains("unknown until the next list"), "{down}");
    shop.engine.restart_service();
    shop.agent
        .wait_for_log("Docker API reachable again", AGENT_WAIT);
    let up = status();
    assert!(up.contains(": connected, "), "{up}");
    shop.assert_enforced(web);
}

/// An FQDN egress rule on a container: names the harness's DNS server (on
/// the node, the containers' resolver) answers are learned and reachable;
/// another container's name is not.
#[test]
fn docker_fqdn_egress_from_a_container() {
    docker_fqdn_egress_from_a_container_on(Kind::Podman, "docker_fqdn_egress_from_a_container");
}

#[test]
fn docker_fqdn_egress_from_a_container_with_docker() {
    docker_fqdn_egress_from_a_container_on(
        Kind::Docker,
        "docker_fqdn_egress_from_a_container_with_docker",
    );
}

fn docker_fqdn_egress_from_a_container_on(kind: Kind, test: &'static str) {
    let Some(lab) = Lab::builder(test).require(kind.tools()).build() else {
        return;
    };
    let engine = kind.start(&lab);
    let podman = engine.as_ref();
    // The test's own app label: podman's API lists concurrent tests'
    // containers too (shared storage).
    let client_app = podman.name("client");
    for name in ["web-a", "web-b"] {
        podman.run(&Container::new(name).label("app", "web").command(NGINX));
    }
    let dns = podman.gateway();
    podman.run(
        &Container::new("client")
            .label("app", &client_app)
            .dns(dns.into()),
    );
    lab.serve_dns(
        NODE,
        53,
        vec![
            DnsRecord::address("allowed.test", podman.addr("web-a"), 60),
            DnsRecord::address("denied.test", podman.addr("web-b"), 60),
        ],
    );
    lab.write_policy(
        "egress.yaml",
        &format!(
            "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: client-egress
spec:
  priority: 5
  tier: securityops
  appliedTo:
  - podSelector:
      matchLabels: {{app: {client_app}}}
  egress:
  - name: dns
    action: Allow
    to: [{{ipBlock: {{cidr: {dns}/32}}}}]
    ports: [{{protocol: UDP, port: 53}}, {{protocol: TCP, port: 53}}]
  - name: allowed
    action: Allow
    to: [{{fqdn: allowed.test}}]
    ports: [{{protocol: TCP, port: 80}}]
  - name: drop-rest
    action: Drop
"
        ),
    );
    let mut agent = docker_agent(&lab, podman);
    agent.wait_generation(1);
    wait_until("client reaches allowed.test", ALLOW_WAIT, || {
        podman.curl("client", "http://allowed.test/", PROBE) == Ok(200)
    });
    assert_eq!(
        podman.curl("client", "http://denied.test/", PROBE),
        TIMED_OUT,
        "{}",
        agent.log()
    );
    // By address, without a name, web-b stays unreachable.
    let web_b = podman.addr("web-b");
    assert_eq!(
        podman.curl("client", &format!("http://{web_b}/"), PROBE),
        TIMED_OUT
    );
}
