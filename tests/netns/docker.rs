//! Docker hosts: podman's Docker-compatible API service and containers in
//! a lab's node namespace ([`harness::podman`]), with `tollgate run
//! --docker` taking its inventory from that API.

use std::time::Duration;

use crate::harness::podman::{Container, Podman, PODMAN_TOOLS};
use crate::harness::{wait_until, Lab, ALLOW_WAIT};

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
