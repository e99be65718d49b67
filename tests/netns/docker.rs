//! Docker hosts: podman's Docker-compatible API service and containers in
//! a lab's node namespace ([`harness::podman`]), with `tollgate run
//! --docker` taking its inventory from that API.

use std::io::Write;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::harness::lab::NODE;
use crate::harness::podman::{Container, Podman, PODMAN_TOOLS};
use crate::harness::{wait_until, Agent, DnsRecord, Lab, AGENT_WAIT, ALLOW_WAIT};

const NGINX: &[&str] = &["nginx", "-g", "daemon off;"];

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
    let left = lab.node().ok("podman --runtime runc --cgroup-manager cgroupfs ps -a --format '{{.Names}}'; podman network ls --format '{{.Name}}'");
    assert!(
        !left.contains(&prefix),
        "containers or network {network} left behind: {left}"
    );
}

/// Web (app=web) in project `shop` takes HTTP from app=client containers
/// only; everything else to it is dropped. The port is the named port
/// `http` of the ports label, so the label mapping is exercised too.
const WEB_POLICY: &str = "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: web-ingress
spec:
  priority: 5
  tier: application
  appliedTo:
  - podSelector:
      matchLabels: {app: web}
  ingress:
  - name: allow-clients
    action: Allow
    from:
    - podSelector:
        matchLabels: {app: client}
      namespaceSelector:
        matchLabels: {kubernetes.io/metadata.name: shop}
    ports: [{protocol: TCP, port: http}]
  - name: drop-rest
    action: Drop
";

/// What a denied curl reports: timed out (28).
const TIMED_OUT: Result<u16, i32> = Err(28);
/// Short, since every denied probe waits it out.
const PROBE: Duration = Duration::from_secs(2);

/// A lab with podman, the web server and two clients, the policy written
/// and the agent following the API service.
struct Shop {
    podman: Podman,
    agent: Agent,
    // Last: dropped after the containers and the agent.
    lab: Lab,
}

fn shop(test: &'static str) -> Option<Shop> {
    let lab = Lab::builder(test).require(PODMAN_TOOLS).build()?;
    let podman = Podman::start(&lab);
    let project = ("com.docker.compose.project", "shop");
    podman.run(
        &Container::new("web")
            .label(project.0, project.1)
            .label("app", "web")
            .label("tollgate.io/ports", "http=80/TCP")
            .command(NGINX),
    );
    for (name, app) in [("client1", "client"), ("client2", "other")] {
        podman.run(
            &Container::new(name)
                .label(project.0, project.1)
                .label("app", app),
        );
    }
    lab.write_policy("web.yaml", WEB_POLICY);
    let mut agent = lab.start_agent(lab.agent_options().args(&[
        "--docker",
        "--docker-host",
        &podman.docker_host(),
    ]));
    agent.wait_generation(1);
    Some(Shop { podman, agent, lab })
}

impl Shop {
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
            self.podman.curl("client1", &url, PROBE) == Ok(200)
        });
        assert_eq!(
            self.podman.curl("client2", &url, PROBE),
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
    let Some(shop) = shop("docker_containers_are_the_inventory_and_policies_hold_on_the_wire")
    else {
        return;
    };
    let web = shop.podman.addr("web");
    let web6 = shop.podman.addr6("web");
    shop.assert_enforced(web.into());
    shop.assert_enforced(web6.into());
    let members = shop.set_members();
    for ip in [web.to_string(), web6.to_string()] {
        assert!(shop.is_member(&ip), "{ip} not in\n{members}");
    }
}

/// A container restarted with a new address is followed (its policy
/// covers the new address within a bounded time, printed as a figure),
/// and a removed one leaves no address in the sets.
#[test]
fn docker_restart_is_followed_and_removal_leaves_no_address() {
    let Some(shop) = shop("docker_restart_is_followed_and_removal_leaves_no_address") else {
        return;
    };
    let old = shop.podman.addr("web").to_string();
    let old6 = shop.podman.addr6("web").to_string();
    shop.assert_enforced(old.parse().unwrap());
    shop.podman.stop("web");
    wait_until("the stopped web leaves the sets", AGENT_WAIT, || {
        !shop.is_member(&old) && !shop.is_member(&old6)
    });
    // Host-local IPAM hands out the next free address: web comes back
    // with a new one.
    let started = Instant::now();
    shop.podman.start_container("web");
    let new = shop.podman.addr("web");
    assert_ne!(new.to_string(), old, "web came back with its old address");
    wait_until("the restarted web enters the sets", AGENT_WAIT, || {
        shop.is_member(&new.to_string())
    });
    let enforced = started.elapsed();
    let _ = writeln!(
        std::io::stderr().lock(),
        "FIGURE docker_start_to_enforced_ms={}",
        enforced.as_millis()
    );
    assert!(
        enforced < Duration::from_secs(10),
        "took {enforced:?} from container start to its address in the sets"
    );
    shop.assert_enforced(new.into());
    shop.assert_enforced(shop.podman.addr6("web").into());

    let gone = [new.to_string(), shop.podman.addr6("web").to_string()];
    shop.podman.remove("web");
    wait_until("the removed web leaves the sets", AGENT_WAIT, || {
        gone.iter().all(|ip| !shop.is_member(ip))
    });
    assert!(
        !shop.set_members().contains("Members:\n1") && !shop.set_members().contains("Members:\nf"),
        "sets not empty:\n{}",
        shop.set_members()
    );
}

/// The API socket going away keeps the last inventory enforced, says so
/// in `status`, and the agent picks the API up again when it returns.
#[test]
fn docker_api_gone_keeps_the_last_inventory_enforced() {
    let Some(mut shop) = shop("docker_api_gone_keeps_the_last_inventory_enforced") else {
        return;
    };
    let web = IpAddr::from(shop.podman.addr("web"));
    shop.assert_enforced(web);
    shop.podman.stop_service();
    shop.agent.wait_for_log("Docker API lost", AGENT_WAIT);
    shop.assert_enforced(web);
    let status = || {
        shop.lab.node().ok(&format!(
            "{} status --socket {}",
            env!("CARGO_BIN_EXE_tollgate"),
            shop.lab.agent_options().status_socket.display()
        ))
    };
    let down = status();
    assert!(down.contains("UNREACHABLE"), "{down}");
    shop.podman.restart_service();
    shop.agent
        .wait_for_log("Docker API reachable again", AGENT_WAIT);
    let up = status();
    assert!(up.contains("connected, 3 containers"), "{up}");
    shop.assert_enforced(web);
}

/// An FQDN egress rule on a container: names the harness's DNS server (on
/// the node, the containers' resolver) answers are learned and reachable;
/// another container's name is not.
#[test]
fn docker_fqdn_egress_from_a_container() {
    let Some(lab) = Lab::builder("docker_fqdn_egress_from_a_container")
        .require(PODMAN_TOOLS)
        .build()
    else {
        return;
    };
    let podman = Podman::start(&lab);
    for name in ["web-a", "web-b"] {
        podman.run(&Container::new(name).label("app", "web").command(NGINX));
    }
    let dns = podman.gateway();
    podman.run(
        &Container::new("client")
            .label("app", "client")
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
      matchLabels: {{app: client}}
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
    let mut agent = lab.start_agent(lab.agent_options().args(&[
        "--docker",
        "--docker-host",
        &podman.docker_host(),
    ]));
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
