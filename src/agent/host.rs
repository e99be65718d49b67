//! Facts about the host the agent runs on, read in this one place: the
//! host name and core count (the configuration's machine defaults) and
//! the addresses on the namespace's interfaces (`ip -j addr show`, at
//! start and on every reload); the interfaces behind the endpoints, for
//! anti-spoofing, are `super::links`'. It reads; it never changes the host.
#![allow(clippy::disallowed_methods)] // reads the Node's addresses with `ip -j addr show`.

use std::net::IpAddr;

use crate::compile::LocalNode;
use crate::config::{MachineDefaults, NodeConfig};

/// Why the interface addresses could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("reading interface addresses: ip -j addr show: {0}")]
    Spawn(std::io::Error),
    #[error("reading interface addresses: ip -j addr show: {0}")]
    Failed(String),
    #[error("reading interface addresses: {0}")]
    Parse(serde_json::Error),
}

/// The host name (empty when unreadable) and the number of cores.
pub fn machine_defaults() -> MachineDefaults {
    MachineDefaults {
        node_name: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default(),
        queues: std::thread::available_parallelism()
            .map_or(1, |n| u32::try_from(n.get()).unwrap_or(1)),
    }
}

/// The local Node: configured name, labels and addresses, plus every
/// address on the namespace's interfaces.
pub fn local_node(node: &NodeConfig) -> Result<LocalNode, HostError> {
    let mut addresses = node.addresses.clone();
    for address in interface_addresses()? {
        if !addresses.contains(&address) {
            addresses.push(address);
        }
    }
    Ok(LocalNode {
        name: node.name.clone(),
        labels: node.labels.clone(),
        addresses,
    })
}

fn interface_addresses() -> Result<Vec<IpAddr>, HostError> {
    let output = std::process::Command::new("ip")
        .args(["-j", "addr", "show"])
        .output()
        .map_err(HostError::Spawn)?;
    if !output.status.success() {
        return Err(HostError::Failed(
            String::from_utf8_lossy(&output.stderr).trim().to_string(),
        ));
    }
    parse_ip_addr_json(&String::from_utf8_lossy(&output.stdout))
}

/// Addresses in `ip -j addr show` output.
fn parse_ip_addr_json(text: &str) -> Result<Vec<IpAddr>, HostError> {
    #[derive(serde::Deserialize)]
    struct Link {
        #[serde(default)]
        addr_info: Vec<AddrInfo>,
    }
    #[derive(serde::Deserialize)]
    struct AddrInfo {
        local: Option<IpAddr>,
    }
    let links: Vec<Link> = serde_json::from_str(text).map_err(HostError::Parse)?;
    Ok(links
        .iter()
        .flat_map(|l| &l.addr_info)
        .filter_map(|a| a.local)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_addresses_from_ip_json() {
        let json = r#"[{"ifindex":1,"ifname":"lo","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8},{"family":"inet6","local":"::1","prefixlen":128}]},
                      {"ifindex":2,"ifname":"veth0","addr_info":[]},{"ifindex":3,"ifname":"dummy0"}]"#;
        assert_eq!(
            parse_ip_addr_json(json).unwrap(),
            vec![
                "127.0.0.1".parse::<IpAddr>().unwrap(),
                "::1".parse().unwrap()
            ]
        );
        assert!(parse_ip_addr_json("not json").is_err());
    }
}
