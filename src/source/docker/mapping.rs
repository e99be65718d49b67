//! The Docker mapping: one container, as the Engine API's inspect answer
//! describes it (Docker's or podman's), to the Pod-like endpoint tollgate
//! enforces. Pure: it never talks to the API, reads the clock or logs;
//! what it cannot use it says in the result.
//!
//! A running container with at least one address on a network is a Pod:
//! name = the container's name, namespace = the value of the namespace
//! label (else `default`), labels = the container's labels (image labels
//! included, as the API merges them), addresses = every network's IPv4 and
//! global IPv6 address, named ports = the ports label
//! (`name=port[/PROTOCOL],...`) or else the image's exposed ports, each
//! named `<protocol>-<port>` (`EXPOSE 80/tcp` is `tcp-80`: Docker has no
//! port names, and an unnamed port would match no rule). No `nodeName`: the Pod is local to the host, which is the Node.
//! Containers without an address of their own (`--network host`, `none`)
//! share the host's and are not Pods.

use std::net::IpAddr;

use bollard::models::ContainerInspectResponse;

use crate::model::{
    Container, ContainerPort, Labels, ObjectMeta, Pod, PodIp, PodSpec, PodStatus, PortProtocol,
};

/// Namespace of a container without the namespace label.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Which labels the mapping reads.
#[derive(Clone, Copy, Debug)]
pub struct Mapping<'a> {
    /// The label whose value is the namespace.
    pub namespace_label: &'a str,
    /// The label naming the ports.
    pub ports_label: &'a str,
}

/// A container as an endpoint.
#[derive(Clone, Debug, PartialEq)]
pub enum Mapped {
    /// An endpoint; `problem` says what of the container was left out
    /// (an unreadable ports label: the Pod has no named ports then).
    Pod {
        pod: Box<Pod>,
        problem: Option<String>,
    },
    /// Not an endpoint: why (not running, no address of its own).
    NotAnEndpoint(&'static str),
}

/// Maps one inspected container.
pub fn endpoint(container: &ContainerInspectResponse, mapping: Mapping<'_>) -> Mapped {
    let running = container
        .state
        .as_ref()
        .and_then(|s| s.running)
        .unwrap_or(false);
    if !running {
        return Mapped::NotAnEndpoint("not running");
    }
    let name = container
        .name
        .as_deref()
        .unwrap_or_default()
        .trim_start_matches('/');
    if name.is_empty() {
        return Mapped::NotAnEndpoint("no name");
    }
    let ips = addresses(container);
    if ips.is_empty() {
        return Mapped::NotAnEndpoint("no address of its own (host or no network)");
    }
    let config = container.config.as_ref();
    let labels: Labels = config
        .and_then(|c| c.labels.as_ref())
        .map(|l| l.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    let namespace = labels
        .get(mapping.namespace_label)
        .filter(|v| !v.is_empty())
        .cloned()
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
    let (ports, problem) = match labels.get(mapping.ports_label) {
        Some(text) => match parse_ports(text) {
            Ok(ports) => (ports, None),
            Err(reason) => (
                Vec::new(),
                Some(format!(
                    "label {}={text:?}: {reason}; the container has no named ports",
                    mapping.ports_label
                )),
            ),
        },
        None => (
            config
                .and_then(|c| c.exposed_ports.as_ref())
                .map(|p| exposed_ports(p))
                .unwrap_or_default(),
            None,
        ),
    };
    let mut ports = ports;
    ports.extend(published_ports(container));
    let pod = Pod {
        metadata: ObjectMeta {
            name: name.to_string(),
            namespace: Some(namespace),
            labels,
            ..ObjectMeta::default()
        },
        spec: PodSpec {
            node_name: None,
            service_account_name: None,
            containers: vec![Container {
                name: name.to_string(),
                ports,
            }],
        },
        status: PodStatus {
            pod_ip: None,
            pod_ips: ips.into_iter().map(|ip| PodIp { ip }).collect(),
        },
    };
    Mapped::Pod {
        pod: Box::new(pod),
        problem,
    }
}

/// Every network's IPv4 and global IPv6 address (and the legacy top-level
/// pair), in network-name order, without duplicates.
fn addresses(container: &ContainerInspectResponse) -> Vec<IpAddr> {
    let Some(settings) = container.network_settings.as_ref() else {
        return Vec::new();
    };
    let mut networks: Vec<_> = settings.networks.iter().flatten().collect();
    networks.sort_by(|a, b| a.0.cmp(b.0));
    let mut out: Vec<IpAddr> = Vec::new();
    let texts = networks
        .into_iter()
        .flat_map(|(_, n)| [n.ip_address.as_deref(), n.global_ipv6_address.as_deref()]);
    for text in texts.flatten() {
        if let Ok(ip) = text.parse::<IpAddr>() {
            if !ip.is_unspecified() && !out.contains(&ip) {
                out.push(ip);
            }
        }
    }
    out
}

/// The ports published on the host (`docker run -p`), as the
/// `NetworkSettings.Ports` of the inspect answer lists them: one unnamed
/// port per container port, host port and host address (`hostIP` unset
/// for every address: `0.0.0.0`, `::` or none), without duplicates.
fn published_ports(container: &ContainerInspectResponse) -> Vec<ContainerPort> {
    let Some(ports) = container
        .network_settings
        .as_ref()
        .and_then(|n| n.ports.as_ref())
    else {
        return Vec::new();
    };
    let mut out: Vec<ContainerPort> = Vec::new();
    let mut keys: Vec<&String> = ports.keys().collect();
    keys.sort();
    for key in keys {
        let Some((port, protocol)) = split_protocol(key) else {
            continue;
        };
        for binding in ports[key].iter().flatten() {
            let Some(host) = binding
                .host_port
                .as_deref()
                .and_then(|p| p.parse::<u16>().ok())
                .filter(|p| *p != 0)
            else {
                continue;
            };
            let host_ip = binding
                .host_ip
                .as_deref()
                .and_then(|ip| ip.parse::<IpAddr>().ok())
                .filter(|ip| !ip.is_unspecified())
                .map(|ip| ip.to_string());
            let published = ContainerPort {
                name: None,
                container_port: port,
                protocol,
                host_port: Some(i32::from(host)),
                host_ip,
            };
            if !out.contains(&published) {
                out.push(published);
            }
        }
    }
    out
}

/// `name=port[/PROTOCOL],...`: names as Kubernetes port names, protocol
/// TCP (default), UDP or SCTP in any case.
pub fn parse_ports(text: &str) -> Result<Vec<ContainerPort>, String> {
    let mut out: Vec<ContainerPort> = Vec::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (name, rest) = item
            .split_once('=')
            .ok_or_else(|| format!("{item:?}: expected name=port[/protocol]"))?;
        let name = name.trim();
        if !is_port_name(name) {
            return Err(format!(
                "{name:?}: a port name is 1-15 lowercase letters, digits and '-', with a letter, not starting or ending with '-'"
            ));
        }
        let (port, protocol) = split_protocol(rest.trim())
            .ok_or_else(|| format!("{item:?}: expected name=port[/tcp|udp|sctp]"))?;
        if out.iter().any(|p| p.name.as_deref() == Some(name)) {
            return Err(format!("{name:?} named twice"));
        }
        out.push(ContainerPort {
            name: Some(name.to_string()),
            container_port: port,
            protocol,
            host_port: None,
            host_ip: None,
        });
    }
    Ok(out)
}

/// The image's exposed ports (`80/tcp`), named by [`exposed_port_name`];
/// unreadable ones skipped.
fn exposed_ports(ports: &[String]) -> Vec<ContainerPort> {
    let mut out: Vec<ContainerPort> = ports
        .iter()
        .filter_map(|p| split_protocol(p))
        .map(|(port, protocol)| ContainerPort {
            name: Some(exposed_port_name(port, protocol)),
            container_port: port,
            protocol,
            host_port: None,
            host_ip: None,
        })
        .collect();
    out.sort_by_key(|p| (p.container_port, p.protocol as u8));
    out.dedup();
    out
}

/// The name of an exposed port: `<protocol>-<port>` in lowercase
/// (`tcp-80`, `udp-53`, `sctp-9`), a valid port name for every port.
pub fn exposed_port_name(port: i32, protocol: PortProtocol) -> String {
    let protocol = match protocol {
        PortProtocol::Tcp => "tcp",
        PortProtocol::Udp => "udp",
        PortProtocol::Sctp => "sctp",
    };
    format!("{protocol}-{port}")
}

/// `port[/protocol]` with a port in 1-65535.
fn split_protocol(text: &str) -> Option<(i32, PortProtocol)> {
    let (port, protocol) = match text.split_once('/') {
        Some((port, protocol)) => (port, protocol),
        None => (text, "tcp"),
    };
    let port: u16 = port.trim().parse().ok().filter(|p| *p != 0)?;
    let protocol = match protocol.trim().to_ascii_lowercase().as_str() {
        "tcp" => PortProtocol::Tcp,
        "udp" => PortProtocol::Udp,
        "sctp" => PortProtocol::Sctp,
        _ => return None,
    };
    Some((i32::from(port), protocol))
}

/// A Kubernetes port name (IANA service name).
fn is_port_name(name: &str) -> bool {
    (1..=15).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && name.bytes().any(|b| b.is_ascii_lowercase())
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

#[cfg(test)]
mod tests;
