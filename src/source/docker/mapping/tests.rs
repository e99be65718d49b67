use std::net::IpAddr;

use bollard::models::ContainerInspectResponse;

use super::*;

const PODMAN: &str = include_str!("../testdata/podman-inspect.json");
const DOCKER: &str = include_str!("../testdata/docker-inspect.json");

const MAPPING: Mapping<'static> = Mapping {
    namespace_label: "com.docker.compose.project",
    ports_label: "tollgate.io/ports",
};

fn inspect(json: &str) -> ContainerInspectResponse {
    serde_json::from_str(json).expect("an inspect answer")
}

fn pod(mapped: Mapped) -> (Pod, Option<String>) {
    match mapped {
        Mapped::Pod { pod, problem } => (*pod, problem),
        Mapped::NotAnEndpoint(why) => panic!("not an endpoint: {why}"),
    }
}

fn ips(pod: &Pod) -> Vec<IpAddr> {
    pod.ips()
}

fn port(name: Option<&str>, number: i32, protocol: PortProtocol) -> ContainerPort {
    ContainerPort {
        name: name.map(str::to_string),
        container_port: number,
        protocol,
        host_port: None,
        host_ip: None,
    }
}

#[test]
fn podman_container_with_the_ports_label() {
    let (pod, problem) = pod(endpoint(&inspect(PODMAN), MAPPING));
    assert_eq!(problem, None);
    assert_eq!(pod.metadata.name, "web-1");
    assert_eq!(pod.namespace(), "shop");
    assert_eq!(pod.metadata.labels.get("app").unwrap(), "web");
    assert_eq!(
        ips(&pod),
        ["10.251.3.2", "fd00:251:3::2"].map(|a| a.parse::<IpAddr>().unwrap())
    );
    assert_eq!(pod.spec.node_name, None, "local to the host");
    assert_eq!(
        pod.spec.containers[0].ports,
        [
            port(Some("http"), 80, PortProtocol::Tcp),
            port(Some("dns"), 53, PortProtocol::Udp)
        ]
    );
}

#[test]
fn docker_compose_container_on_two_networks_with_exposed_ports() {
    let (pod, problem) = pod(endpoint(&inspect(DOCKER), MAPPING));
    assert_eq!(problem, None);
    assert_eq!(pod.metadata.name, "shop-web-1");
    assert_eq!(pod.namespace(), "shop");
    assert_eq!(pod.metadata.labels.get("tier").unwrap(), "frontend");
    // Image labels whose values are no Kubernetes label values are kept:
    // they are never selectable, and harm nothing.
    assert!(pod.metadata.labels.get("maintainer").unwrap().contains('<'));
    assert_eq!(
        ips(&pod),
        ["172.20.0.2", "fd12:3456:789a::2", "172.19.0.3"].map(|a| a.parse::<IpAddr>().unwrap()),
        "every network, both families, in network-name order"
    );
    assert_eq!(
        pod.spec.containers[0].ports,
        [
            port(Some("tcp-80"), 80, PortProtocol::Tcp),
            port(Some("tcp-443"), 443, PortProtocol::Tcp),
            published(80, 8080, None),
        ],
        "the image's exposed ports, named <protocol>-<port>, and the published \
         one (on 0.0.0.0 and ::, so on every address)"
    );
}

/// A port published on the host: unnamed, `hostIP` unset for every address.
fn published(container: i32, host: i32, address: Option<&str>) -> ContainerPort {
    ContainerPort {
        host_port: Some(host),
        host_ip: address.map(str::to_string),
        ..port(None, container, PortProtocol::Tcp)
    }
}

/// Each binding of `NetworkSettings.Ports` is a published port; one on a
/// single host address keeps it; a port without bindings (`null`, or an
/// exposed port not published) and a host port 0 are none.
#[test]
fn published_ports_are_the_bindings_of_the_inspect_answer() {
    let mut container = inspect(DOCKER);
    let settings = container.network_settings.as_mut().unwrap();
    let bindings: serde_json::Value = serde_json::json!({
        "443/tcp": null,
        "80/tcp": [{"HostIp": "127.0.0.1", "HostPort": "8081"}, {"HostIp": "", "HostPort": "8080"}],
        "53/udp": [{"HostIp": "::1", "HostPort": "0"}],
    });
    settings.ports = Some(serde_json::from_value(bindings).unwrap());
    let (pod, _) = pod(endpoint(&container, MAPPING));
    let bound: Vec<&ContainerPort> = pod.spec.containers[0]
        .ports
        .iter()
        .filter(|p| p.host_port.is_some())
        .collect();
    assert_eq!(
        bound,
        [
            &published(80, 8081, Some("127.0.0.1")),
            &published(80, 8080, None)
        ]
    );
}

#[test]
fn without_the_namespace_label_the_namespace_is_default() {
    let mut container = inspect(DOCKER);
    let labels = container.config.as_mut().unwrap().labels.as_mut().unwrap();
    labels.remove("com.docker.compose.project");
    let (pod, _) = pod(endpoint(&container, MAPPING));
    assert_eq!(pod.namespace(), DEFAULT_NAMESPACE);
    let other = Mapping {
        namespace_label: "tier",
        ..MAPPING
    };
    let (pod, _) = self::pod(endpoint(&container, other));
    assert_eq!(pod.namespace(), "frontend", "a configurable label");
}

#[test]
fn stopped_and_host_network_containers_are_not_endpoints() {
    let mut stopped = inspect(DOCKER);
    stopped.state.as_mut().unwrap().running = Some(false);
    assert_eq!(
        endpoint(&stopped, MAPPING),
        Mapped::NotAnEndpoint("not running")
    );
    let mut host = inspect(DOCKER);
    let networks = host
        .network_settings
        .as_mut()
        .unwrap()
        .networks
        .as_mut()
        .unwrap();
    networks.clear();
    networks.insert("host".into(), Default::default());
    assert!(matches!(
        endpoint(&host, MAPPING),
        Mapped::NotAnEndpoint(why) if why.contains("no address")
    ));
}

#[test]
fn a_bad_ports_label_keeps_the_endpoint_without_named_ports() {
    for bad in [
        "http",
        "http=0",
        "http=70000",
        "http=80/icmp",
        "HTTP=80",
        "a-very-long-port-name=80",
        "http=80,http=81",
        "-x=1",
        "12=80",
    ] {
        let mut container = inspect(PODMAN);
        let labels = container.config.as_mut().unwrap().labels.as_mut().unwrap();
        labels.insert("tollgate.io/ports".into(), bad.into());
        let (pod, problem) = pod(endpoint(&container, MAPPING));
        assert!(pod.spec.containers[0].ports.is_empty(), "{bad}");
        let problem = problem.unwrap_or_else(|| panic!("{bad}: no problem reported"));
        assert!(problem.contains("tollgate.io/ports"), "{problem}");
        assert_eq!(pod.ips().len(), 2, "still enforced: {bad}");
    }
}

#[test]
fn exposed_port_names_are_valid_port_names() {
    for (port, protocol, name) in [
        (80, PortProtocol::Tcp, "tcp-80"),
        (53, PortProtocol::Udp, "udp-53"),
        (65535, PortProtocol::Sctp, "sctp-65535"),
    ] {
        assert_eq!(exposed_port_name(port, protocol), name);
        assert!(is_port_name(name), "{name}");
    }
    // The ports label wins over the exposed ports.
    let mut container = inspect(DOCKER);
    let labels = container.config.as_mut().unwrap().labels.as_mut().unwrap();
    labels.insert("tollgate.io/ports".into(), "web=8080".into());
    let (pod, _) = pod(endpoint(&container, MAPPING));
    assert_eq!(
        pod.spec.containers[0].ports,
        [
            port(Some("web"), 8080, PortProtocol::Tcp),
            published(80, 8080, None)
        ]
    );
}

#[test]
fn ports_label_syntax() {
    assert_eq!(
        parse_ports(" http=80 , metrics=9090/tcp,dns=53/UDP,sig=7/sctp,").unwrap(),
        [
            port(Some("http"), 80, PortProtocol::Tcp),
            port(Some("metrics"), 9090, PortProtocol::Tcp),
            port(Some("dns"), 53, PortProtocol::Udp),
            port(Some("sig"), 7, PortProtocol::Sctp),
        ]
    );
    assert_eq!(parse_ports("").unwrap(), []);
}

#[test]
fn odd_answers_are_read_without_panicking() {
    for json in [
        "{}",
        r#"{"State": {"Running": true}}"#,
        r#"{"State": {"Running": true}, "Name": "/x", "NetworkSettings": {"Networks": {"n": {"IPAddress": "not an ip", "GlobalIPv6Address": "0.0.0.0"}}}}"#,
    ] {
        assert!(matches!(
            endpoint(&inspect(json), MAPPING),
            Mapped::NotAnEndpoint(_)
        ));
    }
}

#[test]
fn containers_are_named_project_slash_container_in_the_ruleset() {
    use crate::compile::{compile, LocalNode};
    use crate::model::{Object, Snapshot, Sourced};
    let (pod, _) = pod(endpoint(&inspect(DOCKER), MAPPING));
    let snapshot = Snapshot {
        objects: vec![Sourced::new(
            std::path::Path::new("docker unix:///var/run/docker.sock"),
            Object::Pod(pod),
        )],
    };
    let node = LocalNode {
        name: "host".into(),
        labels: Default::default(),
        addresses: vec!["192.0.2.1".parse().unwrap()],
    };
    let ruleset = compile(&snapshot, &node);
    for ip in ["172.19.0.3", "fd12:3456:789a::2"] {
        let endpoint = ruleset.endpoint_of(ip.parse().unwrap());
        assert_eq!(
            endpoint.map(ToString::to_string).as_deref(),
            Some("shop/shop-web-1"),
            "{ip}"
        );
    }
}
